//! The env instances of one batch shape ([`EnvPool`], built by an [`EnvFactory`]) and the
//! thread helper that resets and steps them in parallel ([`run_parallel`]). A plugin trap or env
//! error stays inside its own instance (`docs/architecture.md` §4).

use ragen_gym_core::{Env, EnvCallError, EnvSpec, EnvStats};

/// Builds one env instance (a sandboxed plugin or a native env).
pub type EnvFactory = Box<dyn Fn() -> Result<Box<dyn Env>, EnvCallError>>;

/// A set of env instances for one batch shape.
pub struct EnvPool {
    envs: Vec<Box<dyn Env>>,
    spec: EnvSpec,
}

impl EnvPool {
    /// `n` fresh instances from `make_env`.
    pub fn from_factory(make_env: &EnvFactory, n: usize) -> Result<Self, EnvCallError> {
        let envs = (0..n).map(|_| make_env()).collect::<Result<Vec<_>, _>>()?;
        Ok(Self::new(envs))
    }

    /// Wrap `n` env instances (one per trajectory). Panics if `envs` is empty.
    pub fn new(envs: Vec<Box<dyn Env>>) -> Self {
        let spec = envs
            .first()
            .expect("an env pool needs at least one env")
            .spec()
            .clone();
        Self { envs, spec }
    }

    /// The env spec.
    pub fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    /// Number of envs.
    pub fn len(&self) -> usize {
        self.envs.len()
    }

    /// Whether the pool is empty.
    pub fn is_empty(&self) -> bool {
        self.envs.is_empty()
    }

    /// The counters of every instance, summed (fuel, instances, failures, denials, dropped log
    /// lines since each was built; zeros for native envs). The trainer reports what one rollout
    /// adds as `sandbox/*` metrics.
    pub fn stats(&self) -> EnvStats {
        let mut sum = EnvStats::default();
        for e in &self.envs {
            sum.add(&e.stats());
        }
        sum
    }

    /// The spec and the instances, for the rollout to step them while it reads the spec.
    pub(super) fn parts_mut(&mut self) -> (&EnvSpec, &mut [Box<dyn Env>]) {
        (&self.spec, &mut self.envs)
    }
}

/// Run `f` on every item, the items split into one contiguous chunk per available core.
pub(super) fn run_parallel<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Sync) {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len())
        .max(1);
    let chunk = items.len().div_ceil(threads).max(1);
    std::thread::scope(|s| {
        for c in items.chunks_mut(chunk) {
            let f = &f;
            s.spawn(move || c.iter_mut().for_each(f));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Counter;

    /// An env that reports fixed counters, as a sandboxed one would.
    struct Counted(Box<dyn Env>, EnvStats);

    impl Env for Counted {
        fn spec(&self) -> &EnvSpec {
            self.0.spec()
        }
        fn reset(&mut self, seed: u64) -> Result<ragen_gym_core::ResetResult, EnvCallError> {
            self.0.reset(seed)
        }
        fn step(&mut self, action: &str) -> Result<ragen_gym_core::StepResult, EnvCallError> {
            self.0.step(action)
        }
        fn stats(&self) -> EnvStats {
            self.1.clone()
        }
    }

    #[test]
    fn stats_sum_every_instance() {
        let counted = |fuel, errors| -> Box<dyn Env> {
            Box::new(Counted(
                Counter::boxed(),
                EnvStats {
                    fuel_used: fuel,
                    instances: 1 + errors,
                    plugin_errors: errors,
                    http_denied: 1,
                    log_dropped: 0,
                    log_clipped: 0,
                },
            ))
        };
        let pool = EnvPool::new(vec![counted(10, 0), counted(32, 2), Counter::boxed()]);
        assert_eq!(
            pool.stats(),
            EnvStats {
                fuel_used: 42,
                instances: 4,
                plugin_errors: 2,
                http_denied: 2,
                log_dropped: 0,
                log_clipped: 0,
            }
        );
    }
}
