//! The expert's part of [`check_env`](crate::check_env): an env whose plugin has an expert
//! (`ragen:gym/expert`, interface 0.1.1) is followed from `reset` on a sample of seeds, and held
//! to what it claims. Every advised action must be one of the spec's action names, advice must
//! be deterministic and must not change the env; an episode whose first advice claims success
//! with probability 1 must end in success; and where the expert states probabilities, the
//! number of successes must agree with their sum (within 4 standard deviations of the
//! Poisson-binomial count, plus one).

use crate::env::Env;

/// Seeds the expert is followed from.
pub const EXPERT_CHECK_SEEDS: u64 = 32;

/// What following the expert from one seed gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ExpertEpisode {
    /// The success probability the first advice stated, if any.
    pub claimed: Option<f64>,
    /// Whether the episode ended in success.
    pub success: bool,
    /// Steps taken.
    pub steps: u32,
}

/// Reset `env` with `seed` and take the expert's preferred action until the episode ends, the
/// expert has no move, or the spec's step budget is spent. Asks twice per state and refuses
/// advice that differs, a probability outside [0, 1], or an action the spec does not name.
///
/// # Errors
/// A message naming the seed and the step.
pub fn follow_expert(env: &mut dyn Env, seed: u64) -> Result<ExpertEpisode, String> {
    let spec = env.spec().clone();
    env.reset(seed)
        .map_err(|e| format!("seed {seed}: reset: {e}"))?;
    let mut out = ExpertEpisode {
        claimed: None,
        success: false,
        steps: 0,
    };
    for step in 0..spec.max_episode_steps {
        let at = |e: &dyn std::fmt::Display| format!("seed {seed}, step {step}: {e}");
        let advice = env.advise().map_err(|e| at(&e))?;
        let again = env.advise().map_err(|e| at(&e))?;
        if advice != again {
            return Err(at(&format!(
                "two calls of advise from one state differ: {advice:?} then {again:?}"
            )));
        }
        if let Some(p) = advice.success_probability
            && !(0.0..=1.0).contains(&p)
        {
            return Err(at(&format!("success probability {p} is outside [0, 1]")));
        }
        if step == 0 {
            out.claimed = advice.success_probability;
        }
        if let Some(names) = spec.action_names.as_ref().filter(|n| !n.is_empty())
            && let Some(bad) = advice
                .actions
                .iter()
                .find(|a| !names.iter().any(|n| n.eq_ignore_ascii_case(a)))
        {
            return Err(at(&format!("advised {bad:?}, which is not an action name")));
        }
        let Some(action) = advice.actions.first() else {
            break;
        };
        let r = env.step(action).map_err(|e| at(&e))?;
        out.steps += 1;
        if !r.action_is_valid {
            return Err(at(&format!("the advised action {action:?} was invalid")));
        }
        out.success |= r.success;
        if r.terminated || r.truncated {
            break;
        }
    }
    Ok(out)
}

/// The expert check on `env`; `None` when its plugin has no expert for its config.
pub(crate) fn check_expert(env: &mut dyn Env) -> Option<Result<(), String>> {
    let info = match env.expert_info() {
        Ok(None) => return None,
        Ok(Some(info)) => info,
        Err(e) => return Some(Err(format!("expert info: {e}"))),
    };
    let mut episodes = Vec::new();
    for seed in 0..EXPERT_CHECK_SEEDS {
        match follow_expert(env, seed) {
            Ok(e) => episodes.push((seed, e)),
            Err(e) => return Some(Err(e)),
        }
    }
    Some(check_claims(&info.description, &episodes))
}

/// Hold the episodes to their first advice's claims (see the module docs).
pub(crate) fn check_claims(expert: &str, episodes: &[(u64, ExpertEpisode)]) -> Result<(), String> {
    if let Some((seed, _)) = episodes
        .iter()
        .find(|(_, e)| e.claimed.is_some_and(|p| p >= 1.0) && !e.success)
    {
        return Err(format!(
            "seed {seed}: the expert ({expert}) claimed success with probability 1 at reset, \
             and following it failed"
        ));
    }
    let claimed: Vec<(f64, bool)> = episodes
        .iter()
        .filter_map(|(_, e)| e.claimed.map(|p| (p, e.success)))
        .collect();
    let expected: f64 = claimed.iter().map(|c| c.0).sum();
    let successes = claimed.iter().filter(|c| c.1).count() as f64;
    let sd = claimed
        .iter()
        .map(|c| c.0 * (1.0 - c.0))
        .sum::<f64>()
        .sqrt();
    if (successes - expected).abs() > 4.0 * sd + 1.0 {
        return Err(format!(
            "the expert ({expert}) claimed {expected:.2} successes in {} episodes (sd {sd:.2}) \
             and reached {successes}",
            claimed.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(claimed: Option<f64>, success: bool) -> ExpertEpisode {
        ExpertEpisode {
            claimed,
            success,
            steps: 1,
        }
    }

    #[test]
    fn a_certain_claim_must_succeed_and_counts_must_match_the_probabilities() {
        let sure = [(0, ep(Some(1.0), true)), (1, ep(Some(1.0), false))];
        let e = check_claims("bfs", &sure).unwrap_err();
        assert!(e.starts_with("seed 1:") && e.contains("bfs"), "{e}");
        // 32 episodes at p = 0.5: expected 16, sd 2.83, so 4 sd + 1 allows 16 +- 12.3.
        let half = |wins: usize| -> Vec<(u64, ExpertEpisode)> {
            (0..32)
                .map(|i| (i, ep(Some(0.5), (i as usize) < wins)))
                .collect()
        };
        assert!(check_claims("dp", &half(5)).is_ok());
        assert!(check_claims("dp", &half(28)).is_ok());
        let e = check_claims("dp", &half(29)).unwrap_err();
        assert!(
            e.contains("16.00 successes in 32") && e.contains("29"),
            "{e}"
        );
        // Episodes without a stated probability are not counted.
        let unknown: Vec<_> = (0..32).map(|i| (i, ep(None, false))).collect();
        assert!(check_claims("x", &unknown).is_ok());
    }
}
