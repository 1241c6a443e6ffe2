//! Checks on what comes out of a plugin, after the records are converted to the SDK types:
//! strings within their caps and numbers finite (`wit/types.wit`: the host rejects non-finite
//! values). The caps are in [`crate::limits`]. A failed check is a `BadOutput` plugin failure.

use crate::limits::{MAX_LIST_LEN, MAX_METRIC_NAME_BYTES, MAX_METRICS, MAX_SHORT_BYTES};
use ragen_gym_core::{
    Advice, EnvError, EnvSpec, ExpertInfo, Metric, ResetResult, RewardBreakdown, StepResult,
};

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

fn metrics(field: &str, list: &[Metric]) -> Result<(), String> {
    if list.len() > MAX_METRICS {
        return Err(format!(
            "{field} has {} metrics, over the cap of {MAX_METRICS}",
            list.len()
        ));
    }
    for m in list {
        cap(
            &format!("{field} metric name"),
            &m.name,
            MAX_METRIC_NAME_BYTES,
        )?;
        finite(&format!("{field} metric `{}`", m.name), m.value)?;
    }
    Ok(())
}

fn list_len(owner: &str, what: &str, len: usize) -> Result<(), String> {
    if len > MAX_LIST_LEN {
        Err(format!(
            "{owner} has {len} {what}, over the cap of {MAX_LIST_LEN}"
        ))
    } else {
        Ok(())
    }
}

/// An env spec: short fields within [`MAX_SHORT_BYTES`], text within `max_text`, lists within
/// [`MAX_LIST_LEN`], a finite reward threshold.
pub(crate) fn check_spec(s: &EnvSpec, max_text: usize) -> Result<(), String> {
    cap("spec id", &s.id, MAX_SHORT_BYTES)?;
    cap("spec version", &s.version, MAX_SHORT_BYTES)?;
    cap("spec description", &s.description, max_text)?;
    cap("spec instruction", &s.instruction, max_text)?;
    cap("spec default_config", &s.default_config, max_text)?;
    if let Some(names) = &s.action_names {
        list_len("spec", "action names", names.len())?;
        for n in names {
            cap("action name", n, MAX_SHORT_BYTES)?;
        }
    }
    if let Some(legend) = &s.symbol_legend {
        list_len("spec", "legend entries", legend.len())?;
        for e in legend {
            cap("legend symbol", &e.symbol, MAX_SHORT_BYTES)?;
            cap("legend meaning", &e.meaning, MAX_SHORT_BYTES)?;
        }
    }
    if let Some(r) = s.reward_threshold {
        finite("spec reward_threshold", r)?;
    }
    Ok(())
}

/// A reset result: the observation within `max_text`, valid metrics.
pub(crate) fn check_reset(r: &ResetResult, max_text: usize) -> Result<(), String> {
    cap("observation", &r.observation, max_text)?;
    metrics("reset info", &r.info)
}

/// A step result: the observation within `max_text`, a finite reward, valid metrics.
pub(crate) fn check_step(r: &StepResult, max_text: usize) -> Result<(), String> {
    cap("observation", &r.observation, max_text)?;
    finite("reward", r.reward)?;
    metrics("step info", &r.info)
}

/// Expert info: the description within `max_text`.
pub(crate) fn check_expert_info(i: &ExpertInfo, max_text: usize) -> Result<(), String> {
    cap("expert description", &i.description, max_text)
}

/// Advice: at most [`MAX_LIST_LEN`] actions within `max_text` each, a probability in [0, 1].
pub(crate) fn check_advice(a: &Advice, max_text: usize) -> Result<(), String> {
    list_len("advice", "actions", a.actions.len())?;
    for action in &a.actions {
        cap("advised action", action, max_text)?;
    }
    if let Some(p) = a.success_probability {
        finite("success probability", p)?;
        if !(0.0..=1.0).contains(&p) {
            return Err(format!("success probability {p} is outside [0, 1]"));
        }
    }
    Ok(())
}

/// A reward breakdown: a finite total and valid components.
pub(crate) fn check_breakdown(b: &RewardBreakdown) -> Result<(), String> {
    finite("total", b.total)?;
    metrics("components", &b.components)
}

/// An env's own error, its message cut to `max_text` bytes (on a char boundary).
pub(crate) fn clip_env_error(e: EnvError, max_text: usize) -> EnvError {
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
        EnvError::InvalidConfig(m) => EnvError::InvalidConfig(clip(m)),
        EnvError::NotReady(m) => EnvError::NotReady(clip(m)),
        EnvError::Other(m) => EnvError::Other(clip(m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(reward: f64, info: Vec<Metric>) -> StepResult {
        StepResult {
            observation: "o".into(),
            reward,
            terminated: false,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: false,
            info,
        }
    }

    #[test]
    fn caps_hold_at_the_boundary_and_refuse_one_more() {
        let name = |n: usize| "m".repeat(n);
        assert!(
            check_step(
                &step(0.0, vec![Metric::new(name(MAX_METRIC_NAME_BYTES), 1.0)]),
                8
            )
            .is_ok()
        );
        let e = check_step(
            &step(0.0, vec![Metric::new(name(MAX_METRIC_NAME_BYTES + 1), 1.0)]),
            8,
        )
        .unwrap_err();
        assert_eq!(e, "step info metric name is 65 bytes, over the cap of 64");
        let many = |n: usize| (0..n).map(|i| Metric::new(format!("m{i}"), 0.0)).collect();
        assert!(check_step(&step(0.0, many(MAX_METRICS)), 8).is_ok());
        assert!(check_step(&step(0.0, many(MAX_METRICS + 1)), 8).is_err());
        let obs = |n: usize| ResetResult {
            observation: "x".repeat(n),
            info: vec![],
        };
        assert!(check_reset(&obs(8), 8).is_ok());
        assert_eq!(
            check_reset(&obs(9), 8).unwrap_err(),
            "observation is 9 bytes, over the cap of 8"
        );
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        assert_eq!(
            check_step(&step(f64::NAN, vec![]), 8).unwrap_err(),
            "reward is NaN, not a finite number"
        );
        let b = RewardBreakdown {
            total: 1.0,
            components: vec![Metric::new("len", f64::INFINITY)],
        };
        assert_eq!(
            check_breakdown(&b).unwrap_err(),
            "components metric `len` is inf, not a finite number"
        );
    }

    #[test]
    fn env_errors_are_clipped_on_a_char_boundary() {
        let e = clip_env_error(EnvError::Other("aé".repeat(4)), 4);
        assert_eq!(e, EnvError::Other("aéa".into()));
    }
}
