//! RAGEN's rollout metrics (`docs/ragen-semantics.md` §9; RAGEN
//! `ragen/llm_agent/es_manager.py::get_rollout_states`), computed from finished trajectories.
//! Names are `{prefix}/{tag}/success` etc. with `prefix` = `train` or `val-env`. Also the
//! `sandbox/*` counters of the env instances over a rollout.

use ragen_gym_core::{EnvStats, Trajectory};
use std::collections::BTreeMap;

/// Metrics of one iteration: name -> value (sorted, JSON-friendly).
pub type Metrics = BTreeMap<String, f64>;

/// [`crate::stats::mean`] of the values (exact on constant values, 0 for none).
fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    crate::stats::mean(&xs.collect::<Vec<_>>())
}

/// Per-env metrics of a batch of trajectories (group-major, `group_size` per group).
///
/// * `{prefix}/{tag}/success`: mean of `terminated && !truncated`, with
///   `{prefix}/{tag}/success_stderr`, its standard error (unbiased std / sqrt(n)), and
///   `{prefix}/{tag}/episodes`, the number of trajectories n;
/// * `{prefix}/{tag}/num_actions`: actions executed per trajectory;
/// * `{prefix}/{tag}/action_is_valid`, `action_is_effective`: per trajectory, turns with the
///   flag / turns, averaged over trajectories (0 for a trajectory with no turn);
/// * `{prefix}/{tag}/pass@{group_size}`: groups with at least one success / groups;
/// * `{prefix}/{tag}/format_penalty_turns`, `{prefix}/{tag}/env_errors` (ragen-gym additions);
/// * `{prefix}/{tag}/score`: mean trajectory score; `{prefix}/{tag}/num_turns`;
/// * `{prefix}/{tag}/expert_agreement`, with `{prefix}/{tag}/expert_advised_steps`: of the steps
///   the env's expert advised on (`rollout.expert_agreement`), the share whose action is among
///   the advised ones, pooled over all steps (absent when no step was advised).
pub fn rollout_metrics(prefix: &str, trajs: &[Trajectory], group_size: usize) -> Metrics {
    let mut m = Metrics::new();
    let Some(first) = trajs.first() else { return m };
    let tag = &first.tag;
    let k = |name: &str| format!("{prefix}/{tag}/{name}");
    let frac = |t: &Trajectory, f: fn(&ragen_gym_core::Turn) -> bool| {
        if t.turns.is_empty() {
            0.0
        } else {
            t.turns.iter().filter(|x| f(x)).count() as f64 / t.turns.len() as f64
        }
    };
    let success: Vec<f64> = trajs
        .iter()
        .map(|t| f64::from(u8::from(t.success)))
        .collect();
    m.insert(k("success"), mean(success.iter().copied()));
    m.insert(k("success_stderr"), crate::stats::std_error(&success));
    m.insert(k("episodes"), trajs.len() as f64);
    m.insert(
        k("num_actions"),
        mean(trajs.iter().map(|t| t.num_actions as f64)),
    );
    m.insert(
        k("num_turns"),
        mean(trajs.iter().map(|t| t.turns.len() as f64)),
    );
    m.insert(
        k("action_is_valid"),
        mean(trajs.iter().map(|t| frac(t, |x| x.action_is_valid))),
    );
    m.insert(
        k("action_is_effective"),
        mean(trajs.iter().map(|t| frac(t, |x| x.action_is_effective))),
    );
    m.insert(
        k("format_penalty_turns"),
        mean(
            trajs
                .iter()
                .map(|t| t.turns.iter().filter(|x| x.format_penalty).count() as f64),
        ),
    );
    m.insert(
        k("env_errors"),
        trajs.iter().filter(|t| t.end_reason.is_some()).count() as f64,
    );
    m.insert(k("score"), mean(trajs.iter().map(Trajectory::score)));
    let agreed: Vec<f64> = trajs
        .iter()
        .flat_map(|t| &t.turns)
        .flat_map(|turn| &turn.steps)
        .filter_map(|s| s.agrees_with_expert())
        .map(|a| f64::from(u8::from(a)))
        .collect();
    if !agreed.is_empty() {
        m.insert(k("expert_agreement"), mean(agreed.iter().copied()));
        m.insert(k("expert_advised_steps"), agreed.len() as f64);
    }
    if group_size > 0 {
        let groups = trajs.chunks(group_size);
        m.insert(
            k(&format!("pass@{group_size}")),
            mean(groups.map(|g| f64::from(u8::from(g.iter().any(|t| t.success))))),
        );
    }
    m
}

/// What the env instances did over a span (one rollout: the difference of two
/// [`crate::EnvPool::stats`] readings), as `sandbox/fuel_used`, `sandbox/instances` (instances
/// created, i.e. replacements of trapped ones), `sandbox/plugin_errors` (traps and refused
/// output), `sandbox/http_denied`, `sandbox/log_dropped` and `sandbox/log_clipped`. Native envs count zeros.
pub fn sandbox_metrics(span: &EnvStats) -> Metrics {
    [
        ("fuel_used", span.fuel_used),
        ("instances", span.instances),
        ("plugin_errors", span.plugin_errors),
        ("http_denied", span.http_denied),
        ("log_dropped", span.log_dropped),
        ("log_clipped", span.log_clipped),
    ]
    .into_iter()
    .map(|(k, v)| (format!("sandbox/{k}"), v as f64))
    .collect()
}

/// Add `{name}/mean`, `/max`, `/min` of `xs` (verl's data metrics style).
pub fn add_stats(m: &mut Metrics, name: &str, xs: &[f64]) {
    if xs.is_empty() {
        return;
    }
    m.insert(format!("{name}/mean"), mean(xs.iter().copied()));
    m.insert(
        format!("{name}/max"),
        xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    );
    m.insert(
        format!("{name}/min"),
        xs.iter().copied().fold(f64::INFINITY, f64::min),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_core::{Step, Turn};

    fn turn(valid: bool, eff: bool) -> Turn {
        Turn {
            observation: String::new(),
            actions_left: 0,
            response: String::new(),
            think: None,
            answer: None,
            actions: vec![],
            env_reward: 0.5,
            action_is_valid: valid,
            action_is_effective: eff,
            format_penalty: !valid,
            info: vec![],
            steps: vec![],
            sampled: None,
        }
    }

    fn traj(group: usize, success: bool, turns: Vec<Turn>, n: usize) -> Trajectory {
        Trajectory {
            env_id: "t/X-v0".into(),
            tag: "X".into(),
            group,
            seed: 0,
            turns,
            final_observation: String::new(),
            num_actions: n,
            terminated: true,
            truncated: !success,
            success,
            penalty: 0.0,
            extra_reward: 0.0,
            end_reason: None,
            failure: None,
        }
    }

    #[test]
    fn ragen_rollout_metrics() {
        let t = vec![
            traj(0, true, vec![turn(true, true), turn(false, false)], 3),
            traj(0, false, vec![turn(true, false)], 1),
            traj(1, false, vec![], 0),
            traj(1, false, vec![turn(true, true)], 2),
        ];
        let m = rollout_metrics("train", &t, 2);
        assert_eq!(m["train/X/success"], 0.25);
        // one success in four: unbiased std sqrt(0.25) = 0.5 over sqrt(4)
        assert_eq!(m["train/X/success_stderr"], 0.25);
        assert_eq!(m["train/X/episodes"], 4.0);
        assert_eq!(m["train/X/num_actions"], 1.5);
        // valid: (1/2 + 1 + 0 + 1) / 4
        assert_eq!(m["train/X/action_is_valid"], 0.625);
        // effective: (1/2 + 0 + 0 + 1) / 4
        assert_eq!(m["train/X/action_is_effective"], 0.375);
        assert_eq!(m["train/X/pass@2"], 0.5);
        assert_eq!(m["train/X/score"], (1.0 + 0.5 + 0.0 + 0.5) / 4.0);
        // No step carries advice: no agreement metric.
        assert!(!m.contains_key("train/X/expert_agreement"));
    }

    #[test]
    fn expert_agreement_pools_the_advised_steps() {
        let step = |action: &str, expert: Option<&[&str]>| Step {
            action: action.into(),
            outcome: Err("unused".into()),
            expert: expert.map(|a| a.iter().map(|s| s.to_string()).collect()),
        };
        let with = |steps| Turn {
            steps,
            ..turn(true, true)
        };
        // Trajectory 1: Down among {Down, Right}, Left not in {Down}; trajectory 2: Up in {Up},
        // and a step not advised (ignored); trajectory 3: nothing advised. 2 of 3 agree (pooled,
        // not per trajectory: that would give (1/2 + 1) / 2 = 0.75).
        let t = vec![
            traj(
                0,
                false,
                vec![with(vec![
                    step("Down", Some(&["Down", "Right"])),
                    step("Left", Some(&["Down"])),
                ])],
                2,
            ),
            traj(
                0,
                true,
                vec![with(vec![step("Up", Some(&["Up"])), step("Up", None)])],
                2,
            ),
            traj(1, false, vec![with(vec![step("Up", None)])], 1),
        ];
        let m = rollout_metrics("val-env", &t, 0);
        assert_eq!(m["val-env/X/expert_agreement"], 2.0 / 3.0);
        assert_eq!(m["val-env/X/expert_advised_steps"], 3.0);
    }
}
