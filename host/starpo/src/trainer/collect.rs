//! One iteration's data: roll out the train groups (with the failure policy: retries, dropped
//! groups, or a stop), score the trajectories (env rewards, format penalty, reward functions,
//! normalisation) and keep the StarPO-S groups, as training samples with the rollout's metrics.

use super::Trainer;
use crate::batch::{TrainSample, build_batch};
use crate::error::TrainError;
use crate::events::{Emitter as Events, Phase, Split, TrainEvent};
use crate::failure_policy::{enforce, excluded_groups};
use crate::filter::{FilterParams, filter_groups};
use crate::metrics::{Metrics, add_stats, rollout_metrics, sandbox_metrics};
use crate::policy_adapter::{PolicyGenerator, PolicyTokenizer};
use crate::prompt::OriginCounts;
use crate::rewards::{apply_reward_functions, raw_scores, training_scores};
use crate::rollout::{RolloutParams, RolloutProgress, rollout};
use crate::seeds::{retry_sampler_seed, rollout_sampler_seed, train_reset_base, train_seeds};
use ragen_gym_core::Trajectory;
use std::collections::BTreeSet;
use std::time::Instant;

impl Trainer {
    /// Rollout, rewards, filter: the kept samples and the rollout's metrics.
    pub(super) fn collect(
        &mut self,
        it: u32,
        ev: &mut Events<'_>,
    ) -> Result<(Vec<TrainSample>, Metrics), TrainError> {
        let (mut trajs, p, dropped, mut m) = self.roll_out(it, ev)?;
        let cfg = &self.cfg;
        let group_size = cfg.es_manager.train.group_size;
        apply_reward_functions(&mut self.reward_functions, &mut trajs, &mut m);
        m.extend(rollout_metrics("train", &trajs, group_size));
        let raw = raw_scores(cfg, &trajs);
        let excluded = excluded_groups(&trajs, &raw, &dropped, &mut m);
        let scores = training_scores(cfg, &trajs, &excluded, &mut m);
        let filter = FilterParams::from_config(cfg);
        let kept = filter_groups(&scores, group_size, &excluded, &filter);
        ev.emit(TrainEvent::Trajectories {
            iteration: it,
            split: Split::Train,
            trajectories: &trajs,
            groups: &kept.verdicts(),
        });
        ev.check()?;
        m.extend(kept.metrics);
        let (samples, lens) = build_batch(
            &PolicyTokenizer(self.models.policy.tokenizer()),
            &p.prompt,
            &trajs,
            &scores,
            &kept.kept_groups,
            cfg.agent_proxy.use_turn_scores,
        )?;
        m.insert("train/response_length".into(), crate::stats::mean(&lens));
        add_stats(&mut m, "response_length", &lens);
        m.insert("rollout/kept_trajectories".into(), samples.len() as f64);
        Ok((samples, m))
    }

    /// The train groups' rollout of iteration `it` (its seeds from the rollout index, Online-k)
    /// under the failure policy, its settings, the groups dropped for failures, and the metrics
    /// of sampling: `timing_s/gen`, prefix sharing, constrained decoding and the `sandbox/*`
    /// counters of the rollout (its retries included).
    fn roll_out(
        &mut self,
        it: u32,
        ev: &mut Events<'_>,
    ) -> Result<(Vec<Trajectory>, RolloutParams, BTreeSet<usize>, Metrics), TrainError> {
        let cfg = &self.cfg;
        let g = cfg.es_manager.train;
        let rollout_index = u64::from((it - 1) / cfg.trainer.online_k);
        let base = train_reset_base(cfg.seed.train, g.env_groups, rollout_index);
        let seeds = train_seeds(base, g.env_groups, g.group_size, cfg.seed.member_offset);
        let sampler_seed = rollout_sampler_seed(cfg.seed.sampler, rollout_index);
        let spec = self.train_pool.spec();
        let p = RolloutParams::from_config(cfg, spec, cfg.rollout.temperature, sampler_seed);
        let env_id = spec.id.clone();
        let t = Instant::now();
        ev.phase(it, Phase::Rollout, seeds.len());
        let mut generator = PolicyGenerator::new(
            self.models.policy.sampler(),
            self.models.policy.tokenizer(),
            self.constraint.as_ref(),
            self.prefix_sharing,
        );
        let before = self.train_pool.stats();
        let mut trajs = {
            let mut progress = ev.progress(it, Phase::Rollout);
            let on_turn = &mut |pr: RolloutProgress| progress(pr.generated);
            rollout(&mut self.train_pool, &seeds, &mut generator, &p, on_turn)?
        };
        ev.check()?;
        let pool = &mut self.train_pool;
        let mut again = |members: &[usize], attempt: u32| -> Result<_, TrainError> {
            let mut q = p.clone();
            q.sampling.seed = retry_sampler_seed(p.sampling.seed, attempt);
            let retry_seeds: Vec<(usize, u64)> = members.iter().map(|&i| seeds[i]).collect();
            Ok(rollout(
                pool,
                &retry_seeds,
                &mut generator,
                &q,
                &mut |_| {},
            )?)
        };
        let (dropped, tally) = enforce(&cfg.failure, &mut trajs, &env_id, it, &mut again)?;
        let mut m = sandbox_metrics(&self.train_pool.stats().since(&before));
        m.extend(tally.metrics());
        m.insert("timing_s/gen".into(), t.elapsed().as_secs_f64());
        m.extend(generator.prefix_sharing_metrics());
        if self.constraint.is_some() {
            let mut counts = OriginCounts::default();
            let turns = trajs.iter().flat_map(|t| &t.turns);
            turns
                .filter_map(|t| t.sampled.as_ref())
                .for_each(|t| counts.add(t));
            let (choice, forced) = counts.fractions();
            m.insert("rollout/constrained_token_frac".into(), choice);
            m.insert("rollout/forced_token_frac".into(), forced);
        }
        Ok((trajs, p, dropped, m))
    }
}
