//! What the host lifts out of a plugin's exports, field by field with each cap checked before
//! the copy (`crate::lift`): the records of `wit/types.wit` as the host reads them, and the
//! typed export functions that return them. `bindgen!` (`crate::bindings`) still types the
//! exports for the load-time check and makes the `env` resource; the calls whose results carry
//! strings and lists go through these, so a field over its cap is refused by name ("step info
//! has 4000 metrics, over the cap of 64") instead of running into the copy budget.

use crate::lift::{
    Capped, CappedList, Clipped, ListField, list_fields, output_text_cap, text_fields,
};
use crate::limits::{MAX_LIST_LEN, MAX_METRIC_NAME_BYTES, MAX_METRICS, MAX_SHORT_BYTES};
use crate::state::HostState;
use ragen_gym_sdk::types as sdk;
use wasmtime::component::{
    ComponentNamedList, ComponentType, Instance, Lift, Lower, ResourceAny, TypedFunc,
};
use wasmtime::{AsContextMut, Store};

text_fields! {
    /// An env spec's id.
    SpecId = "spec id", MAX_SHORT_BYTES;
    /// An env spec's version.
    SpecVersion = "spec version", MAX_SHORT_BYTES;
    /// An env spec's description.
    SpecDescription = "spec description", output_text_cap();
    /// An env spec's instruction.
    SpecInstruction = "spec instruction", output_text_cap();
    /// An env spec's default config.
    SpecDefaultConfig = "spec default_config", output_text_cap();
    /// One action name of a spec.
    ActionName = "action name", MAX_SHORT_BYTES;
    /// A legend entry's symbol.
    LegendSymbol = "legend symbol", MAX_SHORT_BYTES;
    /// A legend entry's meaning.
    LegendMeaning = "legend meaning", MAX_SHORT_BYTES;
    /// An observation of `reset` or `step`.
    Observation = "observation", output_text_cap();
    /// A metric's name.
    MetricName = "metric name", MAX_METRIC_NAME_BYTES;
    /// The expert's description.
    ExpertDescription = "expert description", output_text_cap();
    /// One action the expert advises.
    AdvisedAction = "advised action", output_text_cap();
    /// The message of an `env-error` or of a reward plugin's refusal: kept up to the cap.
    ErrorMessage = "error message", output_text_cap();
}

list_fields! {
    /// A spec's action names.
    ActionNames = "spec", "action names", MAX_LIST_LEN;
    /// A spec's symbol legend.
    Legend = "spec", "legend entries", MAX_LIST_LEN;
    /// `reset`'s info.
    ResetInfo = "reset info", "metrics", MAX_METRICS;
    /// `step`'s info.
    StepInfo = "step info", "metrics", MAX_METRICS;
    /// A reward breakdown's components.
    Components = "components", "metrics", MAX_METRICS;
    /// The expert's advised actions.
    AdvisedActions = "advice", "actions", MAX_LIST_LEN;
}

/// `types.metric`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct Metric {
    name: Capped<MetricName>,
    value: f64,
}

fn metrics<F: ListField>(list: CappedList<Metric, F>) -> Vec<sdk::Metric> {
    list.0
        .into_iter()
        .map(|m| sdk::Metric {
            name: m.name.0,
            value: m.value,
        })
        .collect()
}

/// `types.symbol`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct Symbol {
    symbol: Capped<LegendSymbol>,
    meaning: Capped<LegendMeaning>,
}

/// `types.env-spec`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct EnvSpec {
    id: Capped<SpecId>,
    version: Capped<SpecVersion>,
    description: Capped<SpecDescription>,
    instruction: Capped<SpecInstruction>,
    #[component(name = "action-names")]
    action_names: Option<CappedList<Capped<ActionName>, ActionNames>>,
    #[component(name = "symbol-legend")]
    symbol_legend: Option<CappedList<Symbol, Legend>>,
    #[component(name = "max-episode-steps")]
    max_episode_steps: u32,
    #[component(name = "reward-threshold")]
    reward_threshold: Option<f64>,
    #[component(name = "default-config")]
    default_config: Capped<SpecDefaultConfig>,
}

impl From<EnvSpec> for sdk::EnvSpec {
    fn from(s: EnvSpec) -> Self {
        Self {
            id: s.id.0,
            version: s.version.0,
            description: s.description.0,
            instruction: s.instruction.0,
            action_names: s
                .action_names
                .map(|l| l.0.into_iter().map(|n| n.0).collect()),
            symbol_legend: s.symbol_legend.map(|l| {
                l.0.into_iter()
                    .map(|e| sdk::Symbol {
                        symbol: e.symbol.0,
                        meaning: e.meaning.0,
                    })
                    .collect()
            }),
            max_episode_steps: s.max_episode_steps,
            reward_threshold: s.reward_threshold,
            default_config: s.default_config.0,
        }
    }
}

/// `types.reset-result`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct ResetResult {
    observation: Capped<Observation>,
    info: CappedList<Metric, ResetInfo>,
}

impl From<ResetResult> for sdk::ResetResult {
    fn from(r: ResetResult) -> Self {
        Self {
            observation: r.observation.0,
            info: metrics(r.info),
        }
    }
}

/// `types.step-result`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct StepResult {
    observation: Capped<Observation>,
    reward: f64,
    terminated: bool,
    truncated: bool,
    #[component(name = "action-is-valid")]
    action_is_valid: bool,
    #[component(name = "action-is-effective")]
    action_is_effective: bool,
    success: bool,
    info: CappedList<Metric, StepInfo>,
}

impl From<StepResult> for sdk::StepResult {
    fn from(r: StepResult) -> Self {
        Self {
            observation: r.observation.0,
            reward: r.reward,
            terminated: r.terminated,
            truncated: r.truncated,
            action_is_valid: r.action_is_valid,
            action_is_effective: r.action_is_effective,
            success: r.success,
            info: metrics(r.info),
        }
    }
}

/// `types.env-error`; its message is kept up to the output cap.
#[derive(ComponentType, Lift)]
#[component(variant)]
pub(crate) enum EnvError {
    #[component(name = "invalid-config")]
    InvalidConfig(Clipped<ErrorMessage>),
    #[component(name = "not-ready")]
    NotReady(Clipped<ErrorMessage>),
    #[component(name = "other")]
    Other(Clipped<ErrorMessage>),
}

impl From<EnvError> for sdk::EnvError {
    fn from(e: EnvError) -> Self {
        match e {
            EnvError::InvalidConfig(m) => Self::InvalidConfig(m.text),
            EnvError::NotReady(m) => Self::NotReady(m.text),
            EnvError::Other(m) => Self::Other(m.text),
        }
    }
}

/// `types.expert-info`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct ExpertInfo {
    description: Capped<ExpertDescription>,
    optimal: bool,
}

impl From<ExpertInfo> for sdk::ExpertInfo {
    fn from(i: ExpertInfo) -> Self {
        Self {
            description: i.description.0,
            optimal: i.optimal,
        }
    }
}

/// `types.advice`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct Advice {
    actions: CappedList<Capped<AdvisedAction>, AdvisedActions>,
    #[component(name = "success-probability")]
    success_probability: Option<f64>,
}

impl From<Advice> for sdk::Advice {
    fn from(a: Advice) -> Self {
        Self {
            actions: a.actions.0.into_iter().map(|s| s.0).collect(),
            success_probability: a.success_probability,
        }
    }
}

/// `types.reward-breakdown`.
#[derive(ComponentType, Lift)]
#[component(record)]
pub(crate) struct RewardBreakdown {
    total: f64,
    components: CappedList<Metric, Components>,
}

impl From<RewardBreakdown> for sdk::RewardBreakdown {
    fn from(b: RewardBreakdown) -> Self {
        Self {
            total: b.total,
            components: metrics(b.components),
        }
    }
}

/// What an export returns: the record or the plugin's `env-error`.
pub(crate) type Reply<T> = (Result<T, EnvError>,);

/// The export functions of `ragen:gym/environment` and `ragen:gym/expert` whose results the
/// host reads, typed with the records above, in one instance. (String parameters are passed
/// owned: a typed function with a borrowed one could not be kept.)
pub(crate) struct EnvFuncs {
    pub(crate) spec: TypedFunc<(String,), Reply<EnvSpec>>,
    pub(crate) reset: TypedFunc<(ResourceAny, u64), Reply<ResetResult>>,
    pub(crate) step: TypedFunc<(ResourceAny, String), Reply<StepResult>>,
    /// `expert.info` and `expert.advise`, when the plugin exports `ragen:gym/expert`.
    pub(crate) expert: Option<ExpertFuncs>,
}

/// `expert.info` and `expert.advise`.
pub(crate) struct ExpertFuncs {
    pub(crate) info: TypedFunc<(String,), Reply<Option<ExpertInfo>>>,
    pub(crate) advise: TypedFunc<(ResourceAny,), Reply<Advice>>,
}

/// The interface names the host asks for; wasmtime's export lookup accepts any
/// semver-compatible version (`0.1.0` plugins export `...@0.1.0`).
const ENVIRONMENT: &str = "ragen:gym/environment@0.1.1";
const EXPERT: &str = "ragen:gym/expert@0.1.1";
const REWARD: &str = "ragen:gym/reward-function@0.1.1";

impl EnvFuncs {
    /// Look the functions up in `instance` and check their types (once per instance).
    pub(crate) fn load(
        store: &mut Store<HostState>,
        instance: &Instance,
        with_expert: bool,
    ) -> wasmtime::Result<Self> {
        let expert = if with_expert {
            Some(ExpertFuncs {
                info: func(store, instance, EXPERT, "info")?,
                advise: func(store, instance, EXPERT, "advise")?,
            })
        } else {
            None
        };
        Ok(Self {
            spec: func(store, instance, ENVIRONMENT, "spec")?,
            reset: func(store, instance, ENVIRONMENT, "[method]env.reset")?,
            step: func(store, instance, ENVIRONMENT, "[method]env.step")?,
            expert,
        })
    }
}

/// `reward-function.score`, whose refusal message is kept up to the output cap.
pub(crate) type ScoreFunc = TypedFunc<
    (crate::bindings::wit::Trajectory,),
    (Result<RewardBreakdown, Clipped<ErrorMessage>>,),
>;

/// Look `score` up in `instance` and check its type.
pub(crate) fn score_func(
    store: &mut Store<HostState>,
    instance: &Instance,
) -> wasmtime::Result<ScoreFunc> {
    func(store, instance, REWARD, "score")
}

/// `name` in `interface` of `instance`, typed.
fn func<P, R>(
    store: &mut Store<HostState>,
    instance: &Instance,
    interface: &str,
    name: &str,
) -> wasmtime::Result<TypedFunc<P, R>>
where
    P: ComponentNamedList + Lower,
    R: ComponentNamedList + Lift,
{
    let iface = instance
        .get_export_index(store.as_context_mut(), None, interface)
        .ok_or_else(|| wasmtime::Error::msg(format!("no export {interface}")))?;
    let index = instance
        .get_export_index(store.as_context_mut(), Some(&iface), name)
        .ok_or_else(|| wasmtime::Error::msg(format!("no export {interface}#{name}")))?;
    instance.get_typed_func(store.as_context_mut(), index)
}
