//! One iteration's data: roll out the train groups (with the failure policy: retries, dropped
//! groups, or a stop), fork their branches (`rollout.branch`, [`crate::rollout::branch`]), score
//! the trajectories (env rewards, format penalty, reward functions, normalisation) and keep the
//! StarPO-S groups, as training samples with the rollout's metrics.
//!
//! With branches, the trajectories are the groups' own (`env_groups x group_size`, group after
//! group, as without) followed by the branches. Scores are normalised over each group with its
//! branches; the per-group views that assume the layout (`pass@k`, the StarPO-S ranking) see the
//! groups' own trajectories, and a kept group keeps its branches.

use super::Trainer;
use crate::batch::{TrainSample, build_batch};
use crate::error::TrainError;
use crate::events::{Emitter as Events, Phase, Split, TrainEvent};
use crate::failure_policy::{check, enforce, excluded_groups, failed_groups};
use crate::filter::{FilterParams, filter_groups};
use crate::metrics::{Metrics, add_stats, rollout_metrics, sandbox_metrics};
use crate::policy_adapter::{PolicyGenerator, PolicyTokenizer};
use crate::prompt::OriginCounts;
use crate::rewards::{apply_reward_functions, raw_scores, training_scores};
use crate::rollout::branch::{branch, branch_points};
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
        let (mut trajs, p, dropped, shared, mut m) = self.roll_out(it, ev)?;
        let cfg = &self.cfg;
        let group_size = cfg.es_manager.train.group_size;
        let roots = cfg.train_batch_size().min(trajs.len());
        apply_reward_functions(&mut self.reward_functions, &mut trajs, &mut m);
        m.extend(rollout_metrics("train", &trajs[..roots], group_size));
        if cfg.rollout.branch.is_on() {
            let branches = &trajs[roots..];
            m.insert("rollout/branches".into(), branches.len() as f64);
            let won = branches.iter().filter(|t| t.success).count();
            m.insert(
                "rollout/branch_success".into(),
                won as f64 / branches.len().max(1) as f64,
            );
        }
        let raw = raw_scores(cfg, &trajs);
        let excluded = excluded_groups(&trajs, &raw, &dropped, &mut m);
        let scores = training_scores(cfg, &trajs, &excluded, &mut m);
        let filter = FilterParams::from_config(cfg);
        let kept = filter_groups(&scores[..roots], group_size, &excluded, &filter);
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
            &shared,
        )?;
        m.insert("train/response_length".into(), crate::stats::mean(&lens));
        add_stats(&mut m, "response_length", &lens);
        m.insert("rollout/kept_trajectories".into(), samples.len() as f64);
        Ok((samples, m))
    }

    /// The train groups' rollout of iteration `it` (its seeds from the rollout index, Online-k)
    /// under the failure policy, then its branches (`rollout.branch`; a failed branch drops its
    /// group, with no retry); its settings, the groups dropped for failures, the turns each
    /// trajectory copied from a parent (0 for the groups' own), and the metrics of sampling:
    /// `timing_s/gen`, prefix sharing, constrained decoding and the `sandbox/*` counters of the
    /// rollout (its retries and branches included).
    #[expect(
        clippy::type_complexity,
        reason = "one private call site destructures it at once"
    )]
    fn roll_out(
        &mut self,
        it: u32,
        ev: &mut Events<'_>,
    ) -> Result<
        (
            Vec<Trajectory>,
            RolloutParams,
            BTreeSet<usize>,
            Vec<usize>,
            Metrics,
        ),
        TrainError,
    > {
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
            self.models.policy.rollout_model()?,
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
        let (mut dropped, mut tally) = enforce(&cfg.failure, &mut trajs, &env_id, it, &mut again)?;
        let mut shared = vec![0; trajs.len()];
        if cfg.rollout.branch.is_on() {
            let points = branch_points(&trajs, &dropped, &cfg.rollout.branch);
            let branches = {
                let mut progress = ev.progress(it, Phase::Rollout);
                let on_turn = &mut |pr: RolloutProgress| progress(pr.generated);
                branch(pool, &trajs, &points, &mut generator, &p, on_turn)?
            };
            ev.check()?;
            tally.count(&branches);
            dropped.extend(failed_groups(&branches));
            shared.extend(points.iter().map(|pt| pt.after));
            trajs.extend(branches);
            check(&cfg.failure, &trajs, &env_id, it)?;
        }
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
        Ok((trajs, p, dropped, shared, m))
    }
}
