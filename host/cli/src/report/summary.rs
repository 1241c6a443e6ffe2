//! The closing summary of a `train` run on stdout: validation success at the first and the last
//! validation of the run with their standard errors, the change in standard errors of the
//! difference, and the reference policies' rates on the same validation seeds: random, and the
//! env's expert when it has one (README, "Learning on a laptop").

use ragen_gym_starpo::{Metrics, ReportError, Reporter, TrainEvent};

/// One validation's success rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ValPoint {
    /// Iteration it followed (0 = before training).
    pub iteration: u32,
    /// `val-env/{tag}/success`.
    pub success: f64,
    /// `val-env/{tag}/success_stderr`.
    pub stderr: f64,
}

/// A reference policy's success rate on the run's validation seeds.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference {
    /// The policy, for people: `random policy (10 uniform actions)`, `expert policy (...)`.
    pub policy: String,
    /// Success rate.
    pub success: f64,
    /// Episodes played (one per validation seed).
    pub episodes: usize,
}

impl Reference {
    /// The random policy's label: `random policy (10 uniform actions)`, `(1 uniform action)` for a
    /// one-step env such as the Bandit.
    pub fn random_label(max_episode_steps: u32) -> String {
        let s = if max_episode_steps == 1 { "" } else { "s" };
        format!("random policy ({max_episode_steps} uniform action{s})")
    }
}

/// Collects the validations of a run and prints the summary when it finishes.
#[derive(Debug, Default)]
pub struct SummaryReporter {
    references: Vec<Reference>,
    episodes: usize,
    first: Option<(String, ValPoint)>,
    last: Option<(String, ValPoint)>,
    /// `val-env/{tag}/expert_agreement` (its name) at the first and the last validation that had
    /// it (the first is `None` while there has been one such validation only).
    agreement: Option<(String, Option<f64>, f64)>,
    /// This process continues a run (`--resume`): its earlier validations are in the run's
    /// metrics file, not here.
    resumed: bool,
}

impl SummaryReporter {
    /// A reporter for a run validating on `episodes` episodes, with the reference policies'
    /// rates on the same seeds that were measured.
    pub fn new(episodes: usize, references: Vec<Reference>) -> Self {
        Self {
            references,
            episodes,
            ..Self::default()
        }
    }
}

/// The validation success in `metrics` (`val-env/{tag}/success` and its `success_stderr`) with
/// its metric name, if this iteration validated.
pub fn val_point(iteration: u32, metrics: &Metrics) -> Option<(String, ValPoint)> {
    let (name, success) = val_metric(metrics, "/success")?;
    let stderr = metrics
        .get(&format!("{name}_stderr"))
        .copied()
        .unwrap_or(0.0);
    Some((
        name.clone(),
        ValPoint {
            iteration,
            success: *success,
            stderr,
        },
    ))
}

/// The validation metric `val-env/{tag}{suffix}` in `metrics` (whatever the env's tag) with its
/// name, if this iteration validated and reported it.
pub(crate) fn val_metric<'m>(metrics: &'m Metrics, suffix: &str) -> Option<(&'m String, &'m f64)> {
    metrics
        .iter()
        .find(|(k, _)| k.starts_with("val-env/") && k.ends_with(suffix))
}

/// `val-env/{tag}/expert_agreement` in `metrics`, if this iteration validated on an env with an
/// expert.
fn val_agreement(metrics: &Metrics) -> Option<(&String, f64)> {
    val_metric(metrics, "/expert_agreement").map(|(k, v)| (k, *v))
}

/// The closing line on the expert: the share of validation steps it would also have taken, at
/// the first and last validations (the last alone when there was one).
fn agreement_line(metric: &str, first: Option<f64>, last: f64) -> String {
    match first {
        Some(first) => {
            format!("  steps the expert would also take ({metric}): {first:.3} -> {last:.3}")
        }
        None => format!("  steps the expert would also take ({metric}): {last:.3}"),
    }
}

/// The summary's lines: before, after, the change in standard errors of the difference
/// (`sqrt(se_before^2 + se_after^2)`) and the reference policies' rates. `resumed`: the process
/// continued a run, so a single validation is the only one since it resumed.
pub fn summary_lines(
    metric: &str,
    episodes: usize,
    (first, last): (ValPoint, ValPoint),
    references: &[Reference],
    resumed: bool,
) -> Vec<String> {
    let mut lines = vec![format!(
        "validation success ({metric}, {episodes} episodes, ± one standard error):"
    )];
    if first.iteration == last.iteration {
        // one validation: there is no before to compare
        let why = if resumed {
            "the only validation since this run resumed; the earlier ones are in its metrics file"
        } else {
            "no validation before training: trainer.val_before_train = false"
        };
        lines.push(format!(
            "  after:  {:.3} ± {:.3} (iteration {}; {why})",
            last.success, last.stderr, last.iteration
        ));
    } else {
        lines.push(format!(
            "  before: {:.3} ± {:.3} (iteration {})",
            first.success, first.stderr, first.iteration
        ));
        lines.push(format!(
            "  after:  {:.3} ± {:.3} (iteration {})",
            last.success, last.stderr, last.iteration
        ));
    }
    let diff = last.success - first.success;
    let se = first.stderr.hypot(last.stderr);
    if first.iteration != last.iteration {
        lines.push(if se > 0.0 {
            format!(
                "  change: {diff:+.3} = {:+.1} standard errors of the difference",
                diff / se
            )
        } else {
            format!("  change: {diff:+.3}")
        });
    }
    for r in references {
        lines.push(format!(
            "  {} on the same {} seeds: {:.3}",
            r.policy, r.episodes, r.success
        ));
    }
    lines
}

impl Reporter for SummaryReporter {
    fn report(&mut self, event: &TrainEvent<'_>) -> Result<(), ReportError> {
        match *event {
            TrainEvent::Started { resumed, .. } => self.resumed = resumed,
            TrainEvent::Metrics { iteration, metrics } => {
                if let Some(p) = val_point(iteration, metrics) {
                    if self.first.is_none() {
                        self.first = Some(p.clone());
                    }
                    self.last = Some(p);
                }
                if let Some((name, a)) = val_agreement(metrics) {
                    // The first validation's value, once a second validation has come.
                    let first = self
                        .agreement
                        .as_ref()
                        .map(|(_, f, last)| f.unwrap_or(*last));
                    self.agreement = Some((name.clone(), first, a));
                }
            }
            TrainEvent::Finished { .. } => {
                if let (Some((metric, first)), Some((_, last))) = (&self.first, &self.last) {
                    for line in summary_lines(
                        metric,
                        self.episodes,
                        (*first, *last),
                        &self.references,
                        self.resumed,
                    ) {
                        println!("{line}");
                    }
                    if let Some((metric, first, last)) = &self.agreement {
                        println!("{}", agreement_line(metric, *first, *last));
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_validation_point_is_read_with_its_stderr() {
        let m = Metrics::from([
            ("train/FrozenLake/success".to_string(), 0.5),
            ("val-env/FrozenLake/success".to_string(), 0.25),
            ("val-env/FrozenLake/success_stderr".to_string(), 0.027),
        ]);
        let (name, p) = val_point(3, &m).unwrap();
        assert_eq!(name, "val-env/FrozenLake/success");
        assert_eq!(
            p,
            ValPoint {
                iteration: 3,
                success: 0.25,
                stderr: 0.027
            }
        );
        let train_only = Metrics::from([("train/FrozenLake/success".to_string(), 0.5)]);
        assert_eq!(val_point(4, &train_only), None);
    }

    #[test]
    fn the_change_is_counted_in_standard_errors_of_the_difference() {
        // 0.1 -> 0.5 with standard errors 0.03 and 0.04: difference 0.4, its standard error
        // sqrt(0.03^2 + 0.04^2) = 0.05, so 8.0 standard errors.
        let first = ValPoint {
            iteration: 0,
            success: 0.1,
            stderr: 0.03,
        };
        let last = ValPoint {
            iteration: 10,
            success: 0.5,
            stderr: 0.04,
        };
        let references = [
            Reference {
                policy: "random policy (10 uniform actions)".into(),
                success: 0.25,
                episodes: 256,
            },
            Reference {
                policy: "expert policy (optimal: value iteration)".into(),
                success: 0.48,
                episodes: 256,
            },
        ];
        let lines = summary_lines("val-env/X/success", 256, (first, last), &references, false);
        assert_eq!(
            lines,
            vec![
                "validation success (val-env/X/success, 256 episodes, ± one standard error):",
                "  before: 0.100 ± 0.030 (iteration 0)",
                "  after:  0.500 ± 0.040 (iteration 10)",
                "  change: +0.400 = +8.0 standard errors of the difference",
                "  random policy (10 uniform actions) on the same 256 seeds: 0.250",
                "  expert policy (optimal: value iteration) on the same 256 seeds: 0.480",
            ]
        );
    }

    #[test]
    fn the_random_label_counts_its_actions() {
        assert_eq!(
            Reference::random_label(1),
            "random policy (1 uniform action)"
        );
        assert_eq!(
            Reference::random_label(10),
            "random policy (10 uniform actions)"
        );
    }

    #[test]
    fn the_expert_agreement_is_read_from_validations_only() {
        let m = Metrics::from([
            ("train/FrozenLake/expert_agreement".to_string(), 0.9),
            ("val-env/FrozenLake/expert_agreement".to_string(), 0.4375),
        ]);
        let (name, value) = val_agreement(&m).expect("a validation's agreement");
        assert_eq!(
            (name.as_str(), value),
            ("val-env/FrozenLake/expert_agreement", 0.4375)
        );
        assert_eq!(val_agreement(&Metrics::new()), None);
        // the line names the env's own metric, as the success line does
        assert_eq!(
            agreement_line(name, Some(0.4), 0.65),
            "  steps the expert would also take (val-env/FrozenLake/expert_agreement): 0.400 -> 0.650"
        );
        // one validation (trainer.val_before_train = false): no before to show
        assert_eq!(
            agreement_line(name, None, 0.288),
            "  steps the expert would also take (val-env/FrozenLake/expert_agreement): 0.288"
        );
    }

    #[test]
    fn the_agreement_has_a_first_value_once_a_second_validation_came() {
        let mut r = SummaryReporter::new(256, Vec::new());
        let val = |a: f64| Metrics::from([("val-env/SimpleSokoban/expert_agreement".into(), a)]);
        let mut seen = Vec::new();
        for (it, m) in [
            (1, val(0.2)),
            (2, Metrics::new()),
            (3, val(0.3)),
            (4, val(0.5)),
        ] {
            r.report(&TrainEvent::Metrics {
                iteration: it,
                metrics: &m,
            })
            .unwrap();
            seen.push(r.agreement.as_ref().map(|(_, f, l)| (*f, *l)));
        }
        assert_eq!(
            seen,
            vec![
                Some((None, 0.2)),
                Some((None, 0.2)),
                Some((Some(0.2), 0.3)),
                Some((Some(0.2), 0.5))
            ]
        );
    }

    #[test]
    fn one_validation_is_an_after_line_without_a_change() {
        // a run with trainer.val_before_train = false validates once, at its last iteration
        let p = ValPoint {
            iteration: 10,
            success: 0.199,
            stderr: 0.025,
        };
        let lines = summary_lines("val-env/FrozenLake/success", 256, (p, p), &[], false);
        assert_eq!(
            lines,
            vec![
                "validation success (val-env/FrozenLake/success, 256 episodes, ± one standard error):",
                "  after:  0.199 ± 0.025 (iteration 10; no validation before training: trainer.val_before_train = false)",
            ]
        );
        // A resumed run's single validation is the first since it resumed, whatever the key says.
        let lines = summary_lines("val-env/FrozenLake/success", 256, (p, p), &[], true);
        assert_eq!(
            lines[1],
            "  after:  0.199 ± 0.025 (iteration 10; the only validation since this run resumed; \
             the earlier ones are in its metrics file)"
        );
    }
}
