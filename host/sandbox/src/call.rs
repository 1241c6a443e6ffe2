//! Which call into a plugin is running: its name in failures, its fuel budgets and the output
//! caps its copy-budget errors list.

use crate::limits::{
    INSTANTIATE_FUEL_CALLS, MAX_LIST_LEN, MAX_METRICS, MAX_SHORT_BYTES, SandboxConfig,
};

/// Which call into a plugin is running: names it in failures and sets its fuel budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// Start code and constructor of a fresh instance.
    Instantiate,
    /// `spec(config)`.
    Spec,
    /// `reset(seed)`.
    Reset,
    /// `step(action)`.
    Step,
    /// `expert.info(config)`.
    ExpertInfo,
    /// `expert.advise(env)`.
    Advise,
    /// `score(trajectory)`.
    Score,
    /// The env resource's destructor.
    Drop,
}

impl Call {
    /// How many per-call fuel budgets this call gets.
    pub(crate) fn fuel_calls(self) -> u64 {
        match self {
            Self::Instantiate => INSTANTIATE_FUEL_CALLS,
            _ => 1,
        }
    }

    /// The call as failures name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Instantiate => "instantiation (start code and constructor)",
            Self::Spec => "spec",
            Self::Reset => "reset",
            Self::Step => "step",
            Self::ExpertInfo => "expert info",
            Self::Advise => "expert advise",
            Self::Score => "score",
            Self::Drop => "env destructor",
        }
    }

    /// What the call copies out of the guest, with each field's cap (for copy-budget errors).
    pub(crate) fn output_caps(self, config: &SandboxConfig) -> String {
        let text = config.max_output_bytes;
        match self {
            Self::Spec => format!(
                "texts of at most {text} bytes, short fields of {MAX_SHORT_BYTES}, \
                 at most {MAX_LIST_LEN} action names and legend entries"
            ),
            Self::Reset | Self::Step => {
                format!("observation of at most {text} bytes, at most {MAX_METRICS} info metrics")
            }
            Self::Score => format!("at most {MAX_METRICS} components"),
            Self::ExpertInfo => format!("a description of at most {text} bytes"),
            Self::Advise => {
                format!("at most {MAX_LIST_LEN} actions of at most {text} bytes each")
            }
            Self::Instantiate | Self::Drop => format!(
                "log lines, http requests with bodies of at most {} bytes",
                config.http_body_bytes()
            ),
        }
    }
}
