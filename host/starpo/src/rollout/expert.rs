//! Expert demonstrations in the rollout's own format: [`expert_rollout`] runs the multi-turn
//! rollout of [`super::rollout`] (the same prompts, turn layout, parsing, action budget and
//! trajectory records) with the env's expert (`ragen:gym/expert`) in place of the model. Each
//! turn's answer is planned on a *shadow* env, a second instance reset with the same seed: it asks
//! the expert, steps the shadow with the advised action, and asks again, up to
//! `max_actions_per_turn` actions or the end of the episode (closed loop within the turn). Envs are
//! deterministic given the seed and the actions (`docs/plugins.md`, "Determinism"), so the
//! rollout's env then sees exactly the outcomes the shadow saw.

use super::episode::Episode;
use super::pool::run_parallel;
use super::{EnvPool, Generation, RolloutParams, prompts};
use crate::prompt::{Tokenize, TokenizeError};
use ragen_gym_core::{Env, EnvCallError, Trajectory};

/// Why demonstrations could not be collected.
#[derive(Debug, thiserror::Error)]
pub enum ExpertRolloutError {
    /// A prompt could not be encoded.
    #[error("encode a prompt")]
    Tokenize(#[from] TokenizeError),
    /// The expert or its shadow env failed (e.g. the plugin has no expert).
    #[error("the expert of seed {seed}")]
    Expert {
        /// The episode's reset seed.
        seed: u64,
        /// The env's error (names the plugin).
        #[source]
        source: EnvCallError,
    },
}

/// How the actions of an answer are joined: RAGEN's `A || B` (its instructions' example), or
/// `A|| B` under constrained action decoding, whose grammar allows one space before a name and
/// none before the separator (`ragen_gym_policy::ActionGrammar`).
pub fn answer_joiner(action_sep: &str, constrained: bool) -> String {
    if constrained {
        format!("{} ", action_sep.trim())
    } else {
        format!(" {} ", action_sep.trim())
    }
}

/// The answer text after the forced prefix for `actions` joined by `joiner`
/// ([`answer_joiner`]): `A || B</answer>` (with thinking on, an empty thought first).
pub fn expert_answer(actions: &[String], joiner: &str, p: &RolloutParams) -> String {
    let answer = format!("{}</answer>", actions.join(joiner));
    if p.prompt.enable_think {
        format!("</think><answer>{answer}")
    } else {
        answer
    }
}

/// Plan one turn on `shadow`: the expert's preferred action, stepped, until `max` actions, the
/// end of the episode or no advice.
fn plan_turn(shadow: &mut dyn Env, max: usize) -> Result<Vec<String>, EnvCallError> {
    let mut actions = Vec::new();
    while actions.len() < max {
        let Some(action) = shadow.advise()?.actions.into_iter().next() else {
            break;
        };
        let r = shadow.step(&action)?;
        actions.push(action);
        if r.terminated || r.truncated {
            break;
        }
    }
    Ok(actions)
}

/// Run episodes with the expert as the policy: `seeds[i] = (group, seed)` for env `i` of `pool`,
/// with `shadows` (as many instances of the same env) to plan on, answers joined by `joiner`.
/// Returns the trajectories in that order, as [`super::rollout`] records them (no token traces:
/// the answers are text).
///
/// # Errors
/// [`ExpertRolloutError::Expert`] when an expert or a shadow env fails (the first, by seed).
pub fn expert_rollout(
    pool: &mut EnvPool,
    shadows: &mut EnvPool,
    seeds: &[(usize, u64)],
    tokenizer: &dyn Tokenize,
    joiner: &str,
    p: &RolloutParams,
) -> Result<Vec<Trajectory>, ExpertRolloutError> {
    assert!(
        seeds.len() <= pool.len() && seeds.len() <= shadows.len(),
        "more seeds than envs in the pools"
    );
    // The expert plays: its agreement with itself is not asked for.
    let p = &RolloutParams {
        expert_agreement: false,
        ..p.clone()
    };
    let (spec, envs) = pool.parts_mut();
    let action_names = spec.action_names.as_deref();
    let (_, shadow_envs) = shadows.parts_mut();
    let mut eps: Vec<_> = envs
        .iter_mut()
        .zip(shadow_envs.iter_mut())
        .zip(seeds)
        .map(|((env, shadow), &(group, seed))| ((env, shadow), Episode::new(group, seed)))
        .collect();
    run_parallel(&mut eps, |((env, shadow), ep)| {
        ep.reset(env.as_mut(), p);
        // A failed reset of the shadow shows at its first advice.
        let _ = shadow.reset(ep.seed());
    });
    for _turn in 0..p.max_turn {
        let (active, _) = prompts(&mut eps, tokenizer, p)?;
        if active.is_empty() {
            break;
        }
        let mut work: Vec<_> = eps
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| active.contains(i))
            .map(|(_, e)| (e, None::<ExpertRolloutError>))
            .collect();
        run_parallel(&mut work, |(((env, shadow), ep), failed)| {
            let max = p.max_actions_per_turn.min(ep.actions_left(p));
            match plan_turn(shadow.as_mut(), max) {
                Ok(actions) => {
                    let g = Generation {
                        text: expert_answer(&actions, joiner, p),
                        trace: None,
                    };
                    ep.apply(g, env.as_mut(), p, action_names);
                }
                Err(source) => {
                    *failed = Some(ExpertRolloutError::Expert {
                        seed: ep.seed(),
                        source,
                    });
                }
            }
        });
        if let Some(e) = work.into_iter().find_map(|(_, failed)| failed) {
            return Err(e);
        }
    }
    Ok(eps
        .into_iter()
        .map(|(_, ep)| ep.into_trajectory(&spec.id, &p.tag))
        .collect())
}
