//! The [`Bandit`] env: RAGEN's two-armed bandit (`ragen/env/bandit`) behind the SDK's
//! [`Environment`] trait.
//!
//! `reset(seed)` seeds a `ChaCha8Rng` and swaps the listed arm order with probability 0.5; the
//! single `step` pulls the named arm: the low arm pays `lo_arm_score`, the high arm
//! `hi_arm_hiscore` with probability `hi_arm_hiscore_prob` (else `hi_arm_loscore`), drawn from
//! the same generator (or, with `payout: "expected"`, the arm's mean without a draw). The episode
//! always terminates after one valid pull; `success` means the high arm was chosen, whatever it
//! paid.

use ragen_gym_sdk::{
    Advice, EnvError, EnvSpec, Environment, ExpertInfo, Metric, ResetResult, StepResult,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{BanditConfig, Payout};
use crate::text::{reset_observation, step_observation};

/// RAGEN's `max_actions_per_traj` for the Bandit tags.
pub const MAX_EPISODE_STEPS: u32 = 1;

/// One Bandit env instance.
#[derive(Debug, Clone)]
pub struct Bandit {
    config: BanditConfig,
    episode: Option<Episode>,
}

#[derive(Debug, Clone)]
struct Episode {
    high_first: bool,
    rng: ChaCha8Rng,
    done: bool,
}

impl Bandit {
    /// An env with a config that passed `Environment::check_config`.
    pub fn with_config(config: BanditConfig) -> Self {
        Self {
            config,
            episode: None,
        }
    }

    /// The arm names in this episode's listed order, if reset.
    pub fn arm_order(&self) -> Option<[&str; 2]> {
        let (lo, hi) = (
            self.config.lo_arm_name.as_str(),
            self.config.hi_arm_name.as_str(),
        );
        self.episode
            .as_ref()
            .map(|e| if e.high_first { [hi, lo] } else { [lo, hi] })
    }

    fn invalid(&self) -> StepResult {
        StepResult {
            observation: String::new(),
            reward: 0.0,
            terminated: false,
            truncated: false,
            action_is_valid: false,
            action_is_effective: false,
            success: false,
            info: Vec::new(),
        }
    }
}

/// Lenient arm matching: case-insensitive (Unicode lowercase), ignoring surrounding whitespace.
fn same_name(action: &str, name: &str) -> bool {
    action.trim().to_lowercase() == name.to_lowercase()
}

impl Environment for Bandit {
    const ID: &'static str = "ragen/Bandit-v0";
    type Config = BanditConfig;

    fn check_config(config: &BanditConfig) -> Result<(), EnvError> {
        // The constraints documented on the fields of `BanditConfig`; the SDK runs this after parsing
        // (`ragen_gym_sdk::adapter::config`), before `spec` and `new`.
        let bad = |field: &str, why: String| {
            Err(EnvError::InvalidConfig(format!("field `{field}`: {why}")))
        };
        for (field, name) in [
            ("lo_arm_name", &config.lo_arm_name),
            ("hi_arm_name", &config.hi_arm_name),
        ] {
            if name.trim().is_empty() || name.trim() != name {
                return bad(
                    field,
                    format!("{name:?} must be non-empty without surrounding spaces"),
                );
            }
            if name.contains('|') || name.contains('\n') {
                return bad(field, format!("{name:?} must not contain `|` or a newline"));
            }
        }
        if config.lo_arm_name.eq_ignore_ascii_case(&config.hi_arm_name) {
            return bad(
                "hi_arm_name",
                format!("{:?} is the same as lo_arm_name", config.hi_arm_name),
            );
        }
        for (field, value) in [
            ("lo_arm_score", config.lo_arm_score),
            ("hi_arm_loscore", config.hi_arm_loscore),
            ("hi_arm_hiscore", config.hi_arm_hiscore),
        ] {
            if !value.is_finite() {
                return bad(field, format!("{value} is not finite"));
            }
        }
        if !(0.0..=1.0).contains(&config.hi_arm_hiscore_prob) {
            return bad(
                "hi_arm_hiscore_prob",
                format!("{} is outside [0, 1]", config.hi_arm_hiscore_prob),
            );
        }
        Ok(())
    }

    fn spec(config: &BanditConfig) -> EnvSpec {
        // Listed alphabetically, so the spec does not reveal which arm is the better one; each
        // episode's reset observation lists them in a seed-shuffled order.
        let mut names = vec![config.lo_arm_name.clone(), config.hi_arm_name.clone()];
        names.sort_by_key(|n| n.to_lowercase());
        EnvSpec::new(format!(
            "Pick one of two slot machines, {} or {}, to maximise your expected reward; the \
             names hint at how each one pays.",
            names[0], names[1]
        ))
        .actions(names)
        .max_steps(MAX_EPISODE_STEPS)
    }

    fn new(config: BanditConfig) -> Result<Self, EnvError> {
        Ok(Self::with_config(config))
    }

    fn reset(&mut self, seed: u64) -> Result<ResetResult, EnvError> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let high_first = rng.random_bool(0.5);
        self.episode = Some(Episode {
            high_first,
            rng,
            done: false,
        });
        let [first, second] = self
            .arm_order()
            .ok_or_else(|| EnvError::Other("episode missing after reset".to_string()))?;
        Ok(ResetResult {
            observation: reset_observation(first, second),
            info: vec![Metric::new(
                "high_arm_first",
                f64::from(u8::from(high_first)),
            )],
        })
    }

    fn step(&mut self, action: &str) -> Result<StepResult, EnvError> {
        let invalid = self.invalid();
        let config = &self.config;
        let episode = self
            .episode
            .as_mut()
            .ok_or_else(|| EnvError::NotReady("step called before reset".to_string()))?;
        if episode.done {
            return Err(EnvError::NotReady(
                "the episode has ended; call reset".to_string(),
            ));
        }
        let chose_high = if same_name(action, &config.hi_arm_name) {
            true
        } else if same_name(action, &config.lo_arm_name) {
            false
        } else {
            return Ok(StepResult {
                observation: "Pull one of the two machines by name.".to_string(),
                ..invalid
            });
        };
        let (name, reward) = if chose_high {
            let reward = match config.payout {
                Payout::Sampled => {
                    if episode.rng.random_bool(config.hi_arm_hiscore_prob) {
                        config.hi_arm_hiscore
                    } else {
                        config.hi_arm_loscore
                    }
                }
                Payout::Expected => config.hi_arm_mean(),
            };
            (&config.hi_arm_name, reward)
        } else {
            (&config.lo_arm_name, config.lo_arm_score)
        };
        episode.done = true;
        Ok(StepResult {
            observation: step_observation(name, reward),
            reward,
            terminated: true,
            truncated: false,
            action_is_valid: true,
            action_is_effective: true,
            success: chose_high,
            info: vec![Metric::new(
                "chose_high_arm",
                f64::from(u8::from(chose_high)),
            )],
        })
    }

    fn expert_info(_config: &BanditConfig) -> Option<ExpertInfo> {
        Some(ExpertInfo {
            description: "the high-risk arm, the better one (RAGEN's `success`)".into(),
            optimal: true,
        })
    }

    /// The high arm: its pick is `success`, whatever it pays.
    fn expert(&mut self) -> Result<Advice, EnvError> {
        match &self.episode {
            Some(e) if !e.done => Ok(Advice::one(self.config.hi_arm_name.clone(), Some(1.0))),
            _ => Err(EnvError::NotReady("no episode running; call reset".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_sdk::adapter;

    fn pull(env: &mut Bandit, seed: u64, arm: &str) -> StepResult {
        env.reset(seed).unwrap();
        env.step(arm).unwrap()
    }

    #[test]
    fn high_arm_pays_one_a_quarter_of_the_time() {
        // Binomial(20000, 0.25): mean 5000, sd sqrt(20000 * 0.25 * 0.75) = 61.2; allow 5 sd.
        let mut env = adapter::create::<Bandit>("").unwrap();
        let n = 20_000;
        let mut wins = 0usize;
        for seed in 0..n {
            let r = pull(&mut env, seed, "Dragon");
            assert!(r.reward == 1.0 || r.reward == 0.0);
            assert!(r.success && r.terminated && !r.truncated);
            wins += usize::from(r.reward == 1.0);
        }
        assert!((wins as f64 - 5000.0).abs() < 5.0 * 61.24, "{wins} wins");
    }

    #[test]
    fn the_expert_picks_the_high_arm_whichever_is_listed_first() {
        let mut env = adapter::create::<Bandit>("").unwrap();
        assert!(env.expert().is_err(), "before reset");
        for seed in 0..20 {
            env.reset(seed).unwrap();
            let advice = env.expert().unwrap();
            assert_eq!(advice, Advice::one("Dragon", Some(1.0)));
            assert!(env.step(&advice.actions[0]).unwrap().success);
            assert!(env.expert().is_err(), "after the end");
        }
    }

    #[test]
    fn low_arm_always_pays_its_score() {
        let mut env = adapter::create::<Bandit>("").unwrap();
        for seed in 0..500 {
            let r = pull(&mut env, seed, "phoenix");
            assert_eq!(r.reward, 0.1);
            assert_eq!(r.observation, "Phoenix: 0.1 points");
            assert!(!r.success && r.terminated);
        }
        let mut paper = adapter::create::<Bandit>(r#"{"lo_arm_score":0.15}"#).unwrap();
        assert_eq!(pull(&mut paper, 3, " PHOENIX ").reward, 0.15);
    }

    #[test]
    fn expected_payout_is_the_arms_mean_and_success_is_unchanged() {
        // RAGEN's arms: Dragon pays 0.25 * 1.0 every time, Phoenix its 0.1; the arm order is
        // the sampled env's (the order draw comes first and is the same).
        let mut sampled = adapter::create::<Bandit>("").unwrap();
        let mut expected = adapter::create::<Bandit>(r#"{"payout":"expected"}"#).unwrap();
        for seed in 0..200 {
            let a = expected.reset(seed).unwrap();
            assert_eq!(a, sampled.reset(seed).unwrap());
            let r = expected.step("Dragon").unwrap();
            assert_eq!(r.reward, 0.25);
            assert_eq!(r.observation, "Dragon: 0.25 points");
            assert!(r.success && r.terminated);
            assert_eq!(pull(&mut expected, seed, "Phoenix").reward, 0.1);
        }
        // a risky arm worse than the safe one: 0.1 * 2.0 + 0.9 * -0.5 = -0.25
        let mut worse = adapter::create::<Bandit>(
            r#"{"payout":"expected","hi_arm_hiscore":2.0,"hi_arm_loscore":-0.5,"hi_arm_hiscore_prob":0.1}"#,
        )
        .unwrap();
        let r = pull(&mut worse, 7, "dragon");
        assert!((r.reward + 0.25).abs() < 1e-12 && r.success, "{r:?}");
    }

    #[test]
    fn arm_order_is_shuffled_about_half_the_time() {
        // Binomial(4000, 0.5): sd 31.6; allow 5 sd.
        let mut env = adapter::create::<Bandit>("").unwrap();
        let n = 4000;
        let mut high_first = 0usize;
        for seed in 0..n {
            let obs = env.reset(seed).unwrap().observation;
            let order = env.arm_order().unwrap();
            assert!(obs.find(order[0]).unwrap() < obs.find(order[1]).unwrap());
            high_first += usize::from(order[0] == "Dragon");
        }
        assert!(
            (high_first as f64 - 2000.0).abs() < 5.0 * 31.62,
            "{high_first}"
        );
    }

    #[test]
    fn configured_names_and_invalid_pulls() {
        let mut env =
            adapter::create::<Bandit>(r#"{"lo_arm_name":"Trader","hi_arm_name":"Librarian"}"#)
                .unwrap();
        env.reset(1).unwrap();
        let r = env.step("Dragon").unwrap();
        assert!(!r.action_is_valid && !r.terminated && r.reward == 0.0);
        let r = env.step("librarian").unwrap();
        assert!(r.action_is_valid && r.success && r.observation.starts_with("Librarian: "));
        assert!(matches!(env.step("Trader"), Err(EnvError::NotReady(_))));
        assert!(matches!(
            adapter::create::<Bandit>("").unwrap().step("Dragon"),
            Err(EnvError::NotReady(_))
        ));
    }

    #[test]
    fn spec_lists_both_arms_and_one_step() {
        let spec = adapter::spec::<Bandit>(r#"{"lo_arm_name":"Trader","hi_arm_name":"Librarian"}"#)
            .unwrap();
        assert_eq!(spec.id, "ragen/Bandit-v0");
        assert_eq!(spec.max_episode_steps, 1);
        assert_eq!(spec.action_names.unwrap(), ["Librarian", "Trader"]);
        assert_eq!(
            adapter::config::<Bandit>(&spec.default_config).unwrap(),
            BanditConfig::default()
        );
    }

    proptest::proptest! {
        #[test]
        fn same_seed_and_action_give_the_same_episode(seed: u64, arm in 0usize..3) {
            let names = ["Phoenix", "Dragon", "Unicorn"];
            let run = || {
                let mut env = adapter::create::<Bandit>("").unwrap();
                (format!("{:?}", env.reset(seed)), format!("{:?}", env.step(names[arm])))
            };
            proptest::prop_assert_eq!(run(), run());
        }
    }
}
