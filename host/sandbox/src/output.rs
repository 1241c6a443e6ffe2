//! Checks on what comes out of a plugin: string caps and finite numbers (architecture note,
//! "Output strings are capped"; `wit/types.wit`: non-finite values are rejected).

use crate::bindings::env::ragen::gym::types as t;
use ragen_gym_core::{EnvError, EnvSpec, Metric, ResetResult, StepResult, Symbol};

/// Longest metric name, bytes.
pub const MAX_METRIC_NAME_BYTES: usize = 64;
/// Most metrics in one `info` list.
pub const MAX_METRICS: usize = 64;
/// Longest short spec field (id, version, action name, symbol), bytes.
pub const MAX_SHORT_BYTES: usize = 256;
/// Most action names or legend entries.
pub const MAX_LIST_LEN: usize = 1024;

fn cap(field: &str, s: &str, max: usize) -> Result<(), String> {
    if s.len() > max {
        Err(format!(
            "{field} is {} bytes, over the cap of {max}",
            s.len()
        ))
    } else {
        Ok(())
    }
}

fn finite(field: &str, v: f64) -> Result<(), String> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(format!("{field} is {v}, not a finite number"))
    }
}

fn metrics(field: &str, list: Vec<t::Metric>) -> Result<Vec<Metric>, String> {
    if list.len() > MAX_METRICS {
        return Err(format!(
            "{field} has {} metrics, over the cap of {MAX_METRICS}",
            list.len()
        ));
    }
    list.into_iter()
        .map(|m| {
            cap(
                &format!("{field} metric name"),
                &m.name,
                MAX_METRIC_NAME_BYTES,
            )?;
            finite(&format!("{field} metric `{}`", m.name), m.value)?;
            Ok(Metric {
                name: m.name,
                value: m.value,
            })
        })
        .collect()
}

pub(crate) fn spec(s: t::EnvSpec, max_text: usize) -> Result<EnvSpec, String> {
    cap("spec id", &s.id, MAX_SHORT_BYTES)?;
    cap("spec version", &s.version, MAX_SHORT_BYTES)?;
    cap("spec description", &s.description, max_text)?;
    cap("spec instruction", &s.instruction, max_text)?;
    cap("spec default_config", &s.default_config, max_text)?;
    if let Some(names) = &s.action_names {
        if names.len() > MAX_LIST_LEN {
            return Err(format!(
                "spec has {} action names, over the cap of {MAX_LIST_LEN}",
                names.len()
            ));
        }
        for n in names {
            cap("action name", n, MAX_SHORT_BYTES)?;
        }
    }
    if let Some(legend) = &s.symbol_legend {
        if legend.len() > MAX_LIST_LEN {
            return Err(format!(
                "spec has {} legend entries, over the cap of {MAX_LIST_LEN}",
                legend.len()
            ));
        }
        for e in legend {
            cap("legend symbol", &e.symbol, MAX_SHORT_BYTES)?;
            cap("legend meaning", &e.meaning, MAX_SHORT_BYTES)?;
        }
    }
    if let Some(r) = s.reward_threshold {
        finite("spec reward_threshold", r)?;
    }
    Ok(EnvSpec {
        id: s.id,
        version: s.version,
        description: s.description,
        instruction: s.instruction,
        action_names: s.action_names,
        symbol_legend: s.symbol_legend.map(|l| {
            l.into_iter()
                .map(|e| Symbol {
                    symbol: e.symbol,
                    meaning: e.meaning,
                })
                .collect()
        }),
        max_episode_steps: s.max_episode_steps,
        reward_threshold: s.reward_threshold,
        default_config: s.default_config,
    })
}

pub(crate) fn reset(r: t::ResetResult, max_text: usize) -> Result<ResetResult, String> {
    cap("observation", &r.observation, max_text)?;
    Ok(ResetResult {
        observation: r.observation,
        info: metrics("reset info", r.info)?,
    })
}

pub(crate) fn step(r: t::StepResult, max_text: usize) -> Result<StepResult, String> {
    cap("observation", &r.observation, max_text)?;
    finite("reward", r.reward)?;
    Ok(StepResult {
        observation: r.observation,
        reward: r.reward,
        terminated: r.terminated,
        truncated: r.truncated,
        action_is_valid: r.action_is_valid,
        action_is_effective: r.action_is_effective,
        success: r.success,
        info: metrics("step info", r.info)?,
    })
}

pub(crate) fn env_error(e: t::EnvError, max_text: usize) -> EnvError {
    let clip = |mut s: String| {
        if s.len() > max_text {
            let mut cut = max_text;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    };
    match e {
        t::EnvError::InvalidConfig(m) => EnvError::InvalidConfig(clip(m)),
        t::EnvError::NotReady(m) => EnvError::NotReady(clip(m)),
        t::EnvError::Other(m) => EnvError::Other(clip(m)),
    }
}
