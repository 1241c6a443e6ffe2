//! `ragen-gym plot RUN_DIR`: PNG training curves from `metrics.jsonl` (success, in-group reward
//! std, entropy, gradient norm, response length), drawn with plotters' bitmap backend.
//!
//! The images carry no text (no font is shipped; the bitmap backend needs one for labels):
//! each file is named after its metric, and the command prints each curve's points, range and
//! the file it wrote.

use anyhow::Context;
use plotters::prelude::*;
use ragen_gym_starpo::RunDir;
use std::path::{Path, PathBuf};

/// Arguments of `ragen-gym plot`.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory written by `ragen-gym train`.
    #[arg(value_name = "RUN_DIR")]
    pub run_dir: PathBuf,
    /// Output directory (default `RUN_DIR/plots`).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

/// Metric-name suffixes that get a curve (RAGEN's paper curves).
const CURVES: [&str; 6] = [
    "/success",
    "rollout/in_group_std",
    "actor/entropy_loss",
    "actor/grad_norm",
    "train/response_length",
    "rollout/chosen_in_group_std",
];

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    let run = RunDir::open(&args.run_dir)?;
    let lines = run
        .read_metrics()
        .with_context(|| format!("failed to read metrics of {}", args.run_dir.display()))?;
    let out = args.out.unwrap_or_else(|| args.run_dir.join("plots"));
    std::fs::create_dir_all(&out).with_context(|| format!("failed to create {}", out.display()))?;
    let mut names: Vec<String> = lines
        .iter()
        .filter_map(|l| l.as_object())
        .flat_map(|o| o.keys().cloned())
        .filter(|k| CURVES.iter().any(|c| k.ends_with(c)))
        .collect();
    names.sort();
    names.dedup();
    if names.is_empty() {
        anyhow::bail!("{} has no plottable metrics", run.metrics_path().display());
    }
    for name in names {
        let pts: Vec<(f64, f64)> = lines
            .iter()
            .filter_map(|l| Some((l.get("iteration")?.as_f64()?, l.get(&name)?.as_f64()?)))
            .collect();
        let file = out.join(format!("{}.png", name.replace(['/', '@'], "_")));
        draw(&file, &pts).with_context(|| format!("failed to draw {}", file.display()))?;
        let (lo, hi) = range(&pts);
        let series: Vec<String> = pts.iter().map(|(x, y)| format!("{x}:{y:.4}")).collect();
        println!(
            "{name} [{lo:.4}, {hi:.4}] -> {}\n  {}",
            file.display(),
            series.join(" ")
        );
    }
    Ok(())
}

fn range(pts: &[(f64, f64)]) -> (f64, f64) {
    let lo = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let hi = pts.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

fn draw(path: &Path, pts: &[(f64, f64)]) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, (640, 400)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let x0 = pts
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .min(0.0);
    let x1 = pts
        .iter()
        .map(|p| p.0)
        .fold(f64::NEG_INFINITY, f64::max)
        .max(x0 + 1.0);
    let (mut y0, mut y1) = range(pts);
    // A flat (or NaN) series gets a unit-high window around it.
    if y1.partial_cmp(&y0) != Some(std::cmp::Ordering::Greater) {
        y0 -= 0.5;
        y1 += 0.5;
    }
    let pad = (y1 - y0) * 0.05;
    let mut chart = ChartBuilder::on(&root)
        .margin(20)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Grid: 5 horizontal and vertical lines, no labels.
    let grey = RGBColor(220, 220, 220);
    for i in 0..=4 {
        let y = y0 - pad + (y1 - y0 + 2.0 * pad) * f64::from(i) / 4.0;
        let x = x0 + (x1 - x0) * f64::from(i) / 4.0;
        chart
            .draw_series(LineSeries::new([(x0, y), (x1, y)], &grey))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        chart
            .draw_series(LineSeries::new([(x, y0 - pad), (x, y1 + pad)], &grey))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    chart
        .draw_series(LineSeries::new(pts.iter().copied(), BLUE.stroke_width(2)))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .draw_series(pts.iter().map(|p| Circle::new(*p, 3, BLUE.filled())))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}
