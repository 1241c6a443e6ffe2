//! When the update does what: whether an iteration updates the actor (the critic's warm-up) and
//! whether an update is one optimiser step, the rule that lets the old log-probs and values come
//! from the update's own forward (`docs/ragen-semantics.md` §9). The scoring passes
//! ([`crate::advantages::ScoringPasses`]) and the update ([`crate::update::update`]) both ask here.

use crate::config::Config;

/// Whether iteration `iteration` (1-based) updates the actor: from `trainer.critic_warmup` on
/// (RAGEN `ragen/trainer/agent_trainer.py::fit`: `critic_warmup <= global_steps`).
pub fn actor_updates_at(cfg: &Config, iteration: u32) -> bool {
    cfg.trainer.critic_warmup <= iteration
}

/// Whether the update of `samples` kept samples is one optimiser step: one PPO epoch over one
/// mini-batch (`actor.ppo_epochs` = 1, `samples <= actor.ppo_mini_batch_size`).
pub fn is_one_step(cfg: &Config, samples: usize) -> bool {
    cfg.actor.ppo_epochs == 1 && samples <= cfg.actor.ppo_mini_batch_size
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_actor_starts_at_iteration_critic_warmup() {
        // RAGEN agent_trainer.py::fit: `critic_warmup <= global_steps`, global_steps from 1.
        let mut cfg = Config::default_config();
        cfg.trainer.critic_warmup = 3;
        let from: Vec<u32> = (1..=5).filter(|&i| actor_updates_at(&cfg, i)).collect();
        assert_eq!(from, vec![3, 4, 5]);
        cfg.trainer.critic_warmup = 0;
        assert!(actor_updates_at(&cfg, 1));
        cfg.trainer.critic_warmup = 1;
        assert!(actor_updates_at(&cfg, 1));
    }

    #[test]
    fn one_step_is_one_epoch_over_one_mini_batch() {
        let mut cfg = Config::default_config();
        cfg.actor.ppo_epochs = 1;
        cfg.actor.ppo_mini_batch_size = 32;
        assert!(is_one_step(&cfg, 32));
        assert!(!is_one_step(&cfg, 33));
        cfg.actor.ppo_epochs = 2;
        assert!(!is_one_step(&cfg, 1));
    }
}
