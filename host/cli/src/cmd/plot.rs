//! `ragen-gym plot RUN_DIR`: PNG training curves from `metrics.jsonl` (and an `sft` run's
//! `sft_metrics.jsonl`, [`read_run`]), one panel per curve of
//! [`CURVES`] (success, in-group reward std, entropy, gradient norm, response length,
//! trajectory score), each with a title, labelled axes with ticks, and a legend naming its
//! metrics. Writes `plots/curves.png` (all panels) and one PNG per panel, and prints each
//! series' points. A metric logged with its standard error (`{name}_stderr`, e.g.
//! `val-env/{tag}/success_stderr`) gets error bars of one standard error either side (`docs/ragen-semantics.md` section 9).
//! `--baseline NAME=VALUE` draws a dashed horizontal reference line at VALUE on the success
//! panel, e.g. the random policy's success rate from `ragen-gym eval --policy random`.
//! `ragen-gym plot RUN_DIR RUN_DIR... --out DIR` draws runs of one setting (seeds) as one curve
//! per metric: the mean across runs, with error bars of its standard error across runs
//! ([`seeds`]), and prints each point's spread.
//!
//! Text is drawn with an embedded font (DejaVu Sans, matplotlib's default, from the `dejavu`
//! crate, through plotters' `ab_glyph` renderer), so the images look the same on every machine.

use crate::report::curves::{CURVES, Curve};
use anyhow::Context;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use ragen_gym_starpo::RunDir;
use ragen_gym_starpo::run_dir::read_jsonl;
use std::path::{Path, PathBuf};

pub mod seeds;

/// Arguments of `ragen-gym plot`.
#[derive(clap::Args)]
pub struct Args {
    /// A run directory written by `ragen-gym train`; several (seeds of one setting) are drawn as
    /// their mean with the standard error across them.
    #[arg(value_name = "RUN_DIR", required = true, num_args = 1..)]
    pub run_dirs: Vec<PathBuf>,
    /// Output directory (default `RUN_DIR/plots`; required with several runs).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// A reference success rate drawn as a dashed horizontal line on the success panel, e.g.
    /// `--baseline "random policy=0.143"` (the `success_rate` of `ragen-gym eval --policy
    /// random --episodes 1000 --json`). Repeatable.
    #[arg(long, value_name = "NAME=VALUE", value_parser = Baseline::parse)]
    pub baseline: Vec<Baseline>,
}

/// A horizontal reference line of the success panel.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    /// The legend entry's name.
    pub name: String,
    /// Its y value.
    pub value: f64,
}

impl Baseline {
    /// Parse `NAME=VALUE` (split at the last `=`): a non-empty name and a finite number.
    ///
    /// # Errors
    /// A message saying which part is wrong.
    pub fn parse(arg: &str) -> Result<Self, String> {
        let (name, value) = arg
            .rsplit_once('=')
            .ok_or_else(|| format!("`{arg}` is not NAME=VALUE"))?;
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("`{arg}` has no name before `=`"));
        }
        let value: f64 = value
            .trim()
            .parse()
            .map_err(|e| format!("`{arg}`: the value is not a number ({e})"))?;
        if !value.is_finite() {
            return Err(format!("`{arg}`: the value must be finite"));
        }
        Ok(Self {
            name: name.to_string(),
            value,
        })
    }

    /// The legend entry: `NAME (VALUE)`.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.value)
    }
}

/// One panel: a curve, its series, and the reference lines drawn across it.
#[derive(Debug, Clone)]
pub struct Panel<'a> {
    /// What the panel shows.
    pub curve: &'a Curve,
    /// Its lines.
    pub series: Vec<Series>,
    /// Its horizontal reference lines.
    pub baselines: Vec<Baseline>,
}

/// Whether `curve` is a success panel (the one `--baseline` lines go on).
fn shows_success(curve: &Curve) -> bool {
    curve.series(["val-env/any/success"]).len() == 1
}

/// The font family every text of the plots uses.
const FONT: &str = "sans-serif";

/// One line of a panel: a metric's `(iteration, value)` points.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The metric's name (the legend entry).
    pub name: String,
    /// Its points, in iteration order.
    pub points: Vec<(f64, f64)>,
    /// The standard error of each point (`{name}_stderr` on the same line), drawn as an error
    /// bar of one standard error either side; `None` where the line has none.
    pub stderr: Vec<Option<f64>>,
}

/// The suffix of the metric that holds a metric's standard error (`starpo::metrics`).
const STDERR_SUFFIX: &str = "_stderr";

impl Series {
    /// Whether any point has an error bar.
    pub fn has_error_bars(&self) -> bool {
        self.stderr.iter().any(Option::is_some)
    }

    /// Each point with its error bar's ends, `(x, y - stderr, y, y + stderr)`.
    pub fn error_bars(&self) -> impl Iterator<Item = (f64, f64, f64, f64)> + '_ {
        self.points
            .iter()
            .zip(&self.stderr)
            .filter_map(|(&(x, y), e)| e.map(|e| (x, y - e, y, y + e)))
    }

    /// The legend entry: the metric's name, with "± 1 s.e." when it has error bars.
    pub fn label(&self) -> String {
        if self.has_error_bars() {
            format!("{} ± 1 s.e.", self.name)
        } else {
            self.name.clone()
        }
    }
}

/// The series of `curve` in `lines` (the objects of `metrics.jsonl`); empty when the run has
/// none of its metrics.
pub fn series_of(curve: &Curve, lines: &[serde_json::Value]) -> Vec<Series> {
    let mut names: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.as_object())
        .flat_map(|o| o.keys().map(String::as_str))
        .collect();
    names.sort_unstable();
    names.dedup();
    curve
        .series(names)
        .into_iter()
        .map(|name| {
            let stderr_name = format!("{name}{STDERR_SUFFIX}");
            let (points, stderr) = lines
                .iter()
                .filter_map(|l| {
                    let point = (l.get("iteration")?.as_f64()?, l.get(name)?.as_f64()?);
                    let e = l
                        .get(&stderr_name)
                        .and_then(serde_json::Value::as_f64)
                        .filter(|e| e.is_finite() && *e >= 0.0);
                    Some((point, e))
                })
                .unzip();
            Series {
                name: name.to_string(),
                points,
                stderr,
            }
        })
        .collect()
}

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    anyhow::ensure!(ok, "the embedded font does not parse");
    Ok(())
}

fn plot_err<E: std::error::Error + Send + Sync + 'static>(
    e: DrawingAreaErrorKind<E>,
) -> anyhow::Error {
    anyhow::anyhow!("{e}")
}

/// Values beyond ±this are drawn off the chart's edge: 1e308 and -1e308 on one panel made the
/// span infinite, and plotters' tick search on an infinite range never ended.
const Y_LIMIT: f64 = 1e300;

/// The x and y ranges of a panel: x from 0 to the last iteration (at least 1), y around the
/// values, their error bars and the baselines (each held within ±[`Y_LIMIT`]) with 5 % padding
/// (a unit window around a flat series).
fn ranges(
    series: &[Series],
    baselines: &[Baseline],
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let (mut x1, mut y0, mut y1) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    let mut cover = |y: f64| {
        if y.is_finite() {
            let y = y.clamp(-Y_LIMIT, Y_LIMIT);
            y0 = y0.min(y);
            y1 = y1.max(y);
        }
    };
    for s in series {
        for &(x, y) in &s.points {
            x1 = x1.max(x);
            cover(y);
        }
        for (_, lo, _, hi) in s.error_bars() {
            cover(lo);
            cover(hi);
        }
    }
    for b in baselines {
        cover(b.value);
    }
    if y1.partial_cmp(&y0) != Some(std::cmp::Ordering::Greater) {
        let mid = if y0.is_finite() { y0 } else { 0.0 };
        (y0, y1) = (mid - 0.5, mid + 0.5);
    }
    let pad = (y1 - y0) * 0.05;
    (0.0..x1, (y0 - pad)..(y1 + pad))
}

/// An x tick label: iterations are whole numbers, so only whole ticks are labelled.
fn iteration_label(x: &f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        String::new()
    }
}

/// Decimals that tell ticks `span` apart: 2 for a span of about 1, one more per decade below.
fn decimals(span: f64) -> usize {
    (2.0 - span.log10().floor()).clamp(0.0, 6.0) as usize
}

/// The pixel mapping of a panel's chart (for tests).
type PanelCoord = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// The colour of baseline lines (a dark grey, apart from the series' palette).
const BASELINE_COLOR: RGBColor = RGBColor(90, 90, 90);

/// Draw one panel onto `area`; returns its chart's pixel mapping.
/// A y tick with `places` decimals; "-0.00" reads as a bug, so ticks that round to zero print as
/// zero.
fn tick_label(y: f64, places: usize) -> String {
    let s = format!("{y:.places$}");
    if s.trim_start_matches('-')
        .chars()
        .all(|c| c == '0' || c == '.')
    {
        s.trim_start_matches('-').to_string()
    } else {
        s
    }
}

fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel<'_>,
) -> anyhow::Result<PanelCoord> {
    let (curve, series) = (panel.curve, &panel.series);
    let (xr, yr) = ranges(series, &panel.baselines);
    let x_end = xr.end;
    let places = decimals(yr.end - yr.start);
    let y_label = move |y: &f64| tick_label(*y, places);
    let mut chart = ChartBuilder::on(area)
        .caption(curve.title, (FONT, 22))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(xr, yr)
        .map_err(plot_err)?;
    chart
        .configure_mesh()
        .x_desc("iteration")
        .y_desc(curve.y_label)
        .axis_desc_style((FONT, 15))
        .label_style((FONT, 13))
        .x_labels(8)
        .y_labels(6)
        .x_label_formatter(&iteration_label)
        .y_label_formatter(&y_label)
        .max_light_lines(1)
        .light_line_style(RGBColor(240, 240, 240))
        .draw()
        .map_err(plot_err)?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(plot_err)?
            .label(s.label())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(plot_err)?;
        chart
            .draw_series(s.error_bars().map(|(x, lo, y, hi)| {
                ErrorBar::new_vertical(x, lo, y, hi, color.stroke_width(1), 8)
            }))
            .map_err(plot_err)?;
    }
    for b in &panel.baselines {
        let style = BASELINE_COLOR.stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(
                [(0.0, b.value), (x_end, b.value)],
                10,
                6,
                style,
            ))
            .map_err(plot_err)?
            .label(b.label())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .draw()
        .map_err(plot_err)?;
    Ok(chart.as_coord_spec().clone())
}

/// The pixel size of a grid of `n` panels in `cols` columns.
fn grid_size(n: usize, cols: usize) -> (u32, u32) {
    (560 * cols as u32, 400 * n.div_ceil(cols) as u32)
}

/// Draw `panels` in a grid of `cols` columns into the PNG `path`.
fn draw_grid(path: &Path, panels: &[Panel<'_>], cols: usize) -> anyhow::Result<()> {
    let root = BitMapBackend::new(path, grid_size(panels.len(), cols)).into_drawing_area();
    draw_grid_on(root, panels, cols).map(drop)
}

/// Draw `panels` onto `root`; returns each panel's pixel mapping.
fn draw_grid_on(
    root: DrawingArea<BitMapBackend<'_>, Shift>,
    panels: &[Panel<'_>],
    cols: usize,
) -> anyhow::Result<Vec<PanelCoord>> {
    let rows = panels.len().div_ceil(cols);
    root.fill(&WHITE).map_err(plot_err)?;
    let mut coords = Vec::with_capacity(panels.len());
    for (area, panel) in root.split_evenly((rows, cols)).iter().zip(panels) {
        coords.push(draw_panel(area, panel)?);
    }
    root.present().map_err(plot_err)?;
    Ok(coords)
}

/// The metrics lines of a run directory: `metrics.jsonl` of `train`; for a directory `sft`
/// wrote, its epochs (`sft_metrics.jsonl`, epoch `e` at iteration `e`) first, then, if
/// `train --resume` continued it with RL, the RL iterations shifted to start at the last epoch,
/// so one curve runs from the untrained model through SFT and RL (the RL run's iteration 0 is a
/// second validation of the last epoch's weights, drawn at the same x).
pub fn read_run(dir: &Path) -> anyhow::Result<Vec<serde_json::Value>> {
    let run = RunDir::open(dir)?;
    let context = || format!("failed to read metrics of {}", dir.display());
    let sft = run.sft_metrics_path();
    if !sft.exists() {
        return run.read_metrics().with_context(context);
    }
    let mut lines = read_jsonl(&sft).with_context(context)?;
    let last_epoch = lines
        .iter()
        .filter_map(|l| l.get("iteration").and_then(serde_json::Value::as_f64))
        .fold(0.0, f64::max);
    if run.metrics_path().exists() {
        for mut l in run.read_metrics().with_context(context)? {
            if let Some(it) = l.get("iteration").and_then(serde_json::Value::as_f64) {
                l["iteration"] = serde_json::json!(it + last_epoch);
            }
            lines.push(l);
        }
    }
    Ok(lines)
}

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    register_font()?;
    let runs = args
        .run_dirs
        .iter()
        .map(|d| read_run(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let several = runs.len() > 1;
    let mut spreads: Vec<Vec<seeds::Pooled>> = Vec::new();
    let mut panels: Vec<Panel<'_>> = Vec::new();
    for curve in CURVES {
        let series = if several {
            let per_run: Vec<Vec<Series>> = runs.iter().map(|l| series_of(curve, l)).collect();
            let pooled = seeds::pool(&per_run);
            let series = pooled.iter().map(|p| p.series.clone()).collect();
            spreads.push(pooled);
            series
        } else {
            series_of(curve, &runs[0])
        };
        if series.is_empty() {
            if several {
                spreads.pop();
            }
            continue;
        }
        panels.push(Panel {
            curve,
            series,
            baselines: if shows_success(curve) {
                args.baseline.clone()
            } else {
                Vec::new()
            },
        });
    }
    let dirs: Vec<String> = args
        .run_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect();
    if panels.is_empty() {
        anyhow::bail!(
            "no plottable metrics{} in {}",
            if several { " common to every run" } else { "" },
            dirs.join(", ")
        );
    }
    let out = match args.out {
        Some(out) => out,
        None if several => anyhow::bail!(
            "plotting {} runs together needs --out DIR (the plots belong to none of them)",
            runs.len()
        ),
        None => args.run_dirs[0].join("plots"),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("failed to create {}", out.display()))?;
    let all = out.join("curves.png");
    draw_grid(&all, &panels, 2.min(panels.len()))
        .with_context(|| format!("failed to draw {}", all.display()))?;
    println!("{}", all.display());
    for (i, panel) in panels.iter().enumerate() {
        let slug = panel.curve.title.to_lowercase().replace([' ', '-'], "_");
        let file = out.join(format!("{slug}.png"));
        draw_grid(&file, std::slice::from_ref(panel), 1)
            .with_context(|| format!("failed to draw {}", file.display()))?;
        println!("{} -> {}", panel.curve.title, file.display());
        for b in &panel.baselines {
            println!("  baseline {} {}", b.name, b.value);
        }
        if several {
            for p in &spreads[i] {
                println!("  {}", p.series.label());
                for line in p.describe() {
                    println!("    {line}");
                }
            }
            continue;
        }
        for s in &panel.series {
            let pts: Vec<String> = s
                .points
                .iter()
                .zip(&s.stderr)
                .map(|((x, y), e)| match e {
                    Some(e) => format!("{x}:{y:.4}±{e:.4}"),
                    None => format!("{x}:{y:.4}"),
                })
                .collect();
            println!("  {} {}", s.label(), pts.join(" "));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
