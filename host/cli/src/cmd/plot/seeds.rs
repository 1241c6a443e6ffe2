//! Curves over several runs of one setting (seeds): each point is the mean of the runs' values at
//! that iteration, its error bar the standard error of that mean across runs (sample standard
//! deviation over the square root of the number of runs), as Henderson et al., "Deep
//! Reinforcement Learning that Matters" (arXiv 1709.06560, section "Reporting Evaluation
//! Metrics"), ask of results over seeds. A run's own per-point standard error (over episodes) is
//! not part of it: with several seeds the spread between seeds is the error that matters.

use super::Series;

/// A series pooled over runs, with each run's value at each point (for the printed spread).
#[derive(Debug, Clone, PartialEq)]
pub struct Pooled {
    /// The mean line with its across-run standard errors.
    pub series: Series,
    /// Each point's values, one per run, in the order the runs were given.
    pub values: Vec<Vec<f64>>,
}

impl Pooled {
    /// `x: mean ± se (min..max over n runs: a b c)` for each point.
    pub fn describe(&self) -> Vec<String> {
        self.series
            .points
            .iter()
            .zip(&self.series.stderr)
            .zip(&self.values)
            .map(|(((x, y), e), v)| {
                let min = v.iter().copied().fold(f64::INFINITY, f64::min);
                let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let each: Vec<String> = v.iter().map(|v| format!("{v:.4}")).collect();
                format!(
                    "{x}: {y:.4} ± {:.4} (spread {min:.4}..{max:.4} over {} runs: {})",
                    e.unwrap_or(0.0),
                    v.len(),
                    each.join(" ")
                )
            })
            .collect()
    }
}

/// Mean and standard error of the mean (`None` for fewer than 2 values).
fn mean_and_stderr(v: &[f64]) -> (f64, Option<f64>) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, None);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, Some((var / n).sqrt()))
}

/// Pool `runs` (each the series of one panel in one run) into one series per metric: only metrics
/// every run has, and only iterations at which every run has a value, so each point is a mean over
/// the same runs. The pooled series is named `{metric}, mean of {n} runs`.
pub fn pool(runs: &[Vec<Series>]) -> Vec<Pooled> {
    let Some((first, rest)) = runs.split_first() else {
        return Vec::new();
    };
    let n = runs.len();
    first
        .iter()
        .filter_map(|s| {
            let others: Vec<&Series> = rest
                .iter()
                .map(|r| r.iter().find(|o| o.name == s.name))
                .collect::<Option<_>>()?;
            let mut points = Vec::new();
            let mut stderr = Vec::new();
            let mut values = Vec::new();
            for &(x, y) in &s.points {
                let at: Option<Vec<f64>> = others
                    .iter()
                    .map(|o| o.points.iter().find(|p| p.0 == x).map(|p| p.1))
                    .collect();
                let Some(mut v) = at else { continue };
                v.insert(0, y);
                let (mean, se) = mean_and_stderr(&v);
                points.push((x, mean));
                stderr.push(se);
                values.push(v);
            }
            (!points.is_empty()).then(|| Pooled {
                series: Series {
                    name: format!("{}, mean of {n} runs", s.name),
                    points,
                    stderr,
                },
                values,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(f64, f64)]) -> Series {
        Series {
            name: name.to_string(),
            points: points.to_vec(),
            stderr: vec![Some(0.5); points.len()],
        }
    }

    #[test]
    fn points_are_means_with_the_standard_error_across_runs() {
        let v = "val-env/FrozenLake/success";
        let runs = vec![
            vec![series(v, &[(0.0, 0.1), (5.0, 0.4), (10.0, 0.2)])],
            vec![
                series(v, &[(0.0, 0.2), (10.0, 0.3)]),
                series("train/FrozenLake/success", &[(1.0, 0.5)]),
            ],
            vec![series(v, &[(0.0, 0.3), (10.0, 0.7)])],
        ];
        let pooled = pool(&runs);
        // only the metric all three runs have; iteration 5 only in the first run is dropped
        assert_eq!(pooled.len(), 1);
        let p = &pooled[0];
        assert_eq!(p.series.name, format!("{v}, mean of 3 runs"));
        assert_eq!(p.values, vec![vec![0.1, 0.2, 0.3], vec![0.2, 0.3, 0.7]]);
        // by hand: mean 0.2, sample sd 0.1, s.e. 0.1 / sqrt(3) = 0.0577350;
        // mean 0.4, deviations -0.2 -0.1 0.3, var 0.14 / 2 = 0.07, s.e. sqrt(0.07 / 3) = 0.1527525
        let xs: Vec<f64> = p.series.points.iter().map(|p| p.0).collect();
        assert_eq!(xs, vec![0.0, 10.0]);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
        assert!(close(p.series.points[0].1, 0.2) && close(p.series.points[1].1, 0.4));
        let se: Vec<f64> = p.series.stderr.iter().map(|e| e.unwrap()).collect();
        assert!(close(se[0], 0.0577350) && close(se[1], 0.1527525), "{se:?}");
        assert_eq!(
            p.describe()[1],
            "10: 0.4000 ± 0.1528 (spread 0.2000..0.7000 over 3 runs: 0.2000 0.3000 0.7000)"
        );
    }

    #[test]
    fn one_run_has_no_error_bar_and_no_runs_no_series() {
        let pooled = pool(&[vec![series("a", &[(1.0, 0.25)])]]);
        assert_eq!(pooled[0].series.points, vec![(1.0, 0.25)]);
        assert_eq!(pooled[0].series.stderr, vec![None]);
        assert!(pool(&[]).is_empty());
        // a metric whose runs share no iteration gives no series
        let apart = pool(&[
            vec![series("a", &[(1.0, 0.25)])],
            vec![series("a", &[(2.0, 0.5)])],
        ]);
        assert!(apart.is_empty());
    }
}
