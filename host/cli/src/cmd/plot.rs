//! `ragen-gym plot RUN_DIR`: PNG training curves from `metrics.jsonl`, one panel per curve of
//! [`CURVES`] (success, in-group reward std, entropy, gradient norm, response length,
//! trajectory score), each with a title, labelled axes with ticks, and a legend naming its
//! metrics. Writes `plots/curves.png` (all panels) and one PNG per panel, and prints each
//! series' points. A metric logged with its standard error (`{name}_stderr`, e.g.
//! `val-env/{tag}/success_stderr`) gets error bars of one standard error either side (`docs/ragen-semantics.md` section 9).
//! `--baseline NAME=VALUE` draws a dashed horizontal reference line at VALUE on the success
//! panel, e.g. the random policy's success rate from `ragen-gym eval --policy random`.
//!
//! Text is drawn with an embedded font (DejaVu Sans, matplotlib's default, from the `dejavu`
//! crate, through plotters' `ab_glyph` renderer), so the images look the same on every machine.

use crate::report::curves::{CURVES, Curve};
use anyhow::Context;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
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

/// The x and y ranges of a panel: x from 0 to the last iteration (at least 1), y around the
/// values, their error bars and the baselines with 5 % padding (a unit window around a flat
/// series).
fn ranges(
    series: &[Series],
    baselines: &[Baseline],
) -> (std::ops::Range<f64>, std::ops::Range<f64>) {
    let (mut x1, mut y0, mut y1) = (1.0f64, f64::INFINITY, f64::NEG_INFINITY);
    let mut cover = |y: f64| {
        if y.is_finite() {
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
fn draw_panel(
    area: &DrawingArea<BitMapBackend<'_>, Shift>,
    panel: &Panel<'_>,
) -> anyhow::Result<PanelCoord> {
    let (curve, series) = (panel.curve, &panel.series);
    let (xr, yr) = ranges(series, &panel.baselines);
    let x_end = xr.end;
    let places = decimals(yr.end - yr.start);
    // "-0.00" reads as a bug: ticks that round to zero print as zero.
    let y_label = move |y: &f64| {
        let s = format!("{y:.places$}");
        if s.trim_start_matches('-')
            .chars()
            .all(|c| c == '0' || c == '.')
        {
            s.trim_start_matches('-').to_string()
        } else {
            s
        }
    };
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

/// Run the subcommand.
pub fn run(args: Args) -> anyhow::Result<()> {
    register_font()?;
    let run = RunDir::open(&args.run_dir)?;
    let lines = run
        .read_metrics()
        .with_context(|| format!("failed to read metrics of {}", args.run_dir.display()))?;
    let panels: Vec<Panel<'_>> = CURVES
        .iter()
        .map(|curve| Panel {
            curve,
            series: series_of(curve, &lines),
            baselines: if shows_success(curve) {
                args.baseline.clone()
            } else {
                Vec::new()
            },
        })
        .filter(|p| !p.series.is_empty())
        .collect();
    if panels.is_empty() {
        anyhow::bail!("{} has no plottable metrics", run.metrics_path().display());
    }
    let out = args.out.unwrap_or_else(|| args.run_dir.join("plots"));
    std::fs::create_dir_all(&out).with_context(|| format!("failed to create {}", out.display()))?;
    let all = out.join("curves.png");
    draw_grid(&all, &panels, 2.min(panels.len()))
        .with_context(|| format!("failed to draw {}", all.display()))?;
    println!("{}", all.display());
    for panel in &panels {
        let slug = panel.curve.title.to_lowercase().replace([' ', '-'], "_");
        let file = out.join(format!("{slug}.png"));
        draw_grid(&file, std::slice::from_ref(panel), 1)
            .with_context(|| format!("failed to draw {}", file.display()))?;
        println!("{} -> {}", panel.curve.title, file.display());
        for b in &panel.baselines {
            println!("  baseline {} {}", b.name, b.value);
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
mod tests {
    use super::*;

    fn panel(curve: &Curve, series: Vec<Series>, baselines: Vec<Baseline>) -> Panel<'_> {
        Panel {
            curve,
            series,
            baselines,
        }
    }

    #[test]
    fn baselines_parse_and_name_what_is_wrong() {
        assert_eq!(
            Baseline::parse("random policy=0.143"),
            Ok(Baseline {
                name: "random policy".into(),
                value: 0.143
            })
        );
        // the last `=` splits, so a name may hold one
        assert_eq!(Baseline::parse("a=b=0.5").unwrap().name, "a=b");
        assert!(Baseline::parse("0.5").unwrap_err().contains("NAME=VALUE"));
        assert!(Baseline::parse("=0.5").unwrap_err().contains("no name"));
        assert!(
            Baseline::parse("random=high")
                .unwrap_err()
                .contains("not a number")
        );
        assert!(
            Baseline::parse("random=inf")
                .unwrap_err()
                .contains("finite")
        );
        assert_eq!(
            Baseline::parse("random=0.25").unwrap().label(),
            "random (0.25)"
        );
        assert!(shows_success(&CURVES[0]));
        assert!(CURVES[1..].iter().all(|c| !shows_success(c)));
    }

    #[test]
    fn a_baseline_is_a_dashed_line_across_the_success_panel() {
        use serde_json::json;
        let lines = vec![
            json!({"iteration": 0, "val-env/Bandit/success": 0.5,
                   "val-env/Bandit/success_stderr": 0.05}),
            json!({"iteration": 10, "val-env/Bandit/success": 0.9,
                   "val-env/Bandit/success_stderr": 0.04}),
        ];
        let s = series_of(&CURVES[0], &lines);
        // a baseline below every point widens the y range to cover it: 0.2 .. 0.94, 5 % padding
        let random = Baseline::parse("random=0.2").unwrap();
        let (_, yr) = ranges(&s, std::slice::from_ref(&random));
        assert!((yr.start - (0.2 - 0.037)).abs() < 1e-12, "{yr:?}");
        assert!((yr.end - (0.94 + 0.037)).abs() < 1e-12, "{yr:?}");
        register_font().unwrap();
        let (w, h) = grid_size(1, 1);
        let render = |baselines: Vec<Baseline>| {
            let mut buf = vec![255u8; (w * h * 3) as usize];
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let coord = draw_grid_on(root, &[panel(&CURVES[0], s.clone(), baselines)], 1)
                .unwrap()
                .remove(0);
            (buf, coord)
        };
        let grey = [BASELINE_COLOR.0, BASELINE_COLOR.1, BASELINE_COLOR.2];
        let row = |buf: &[u8], py: i32, x0: i32, x1: i32| -> usize {
            (x0..x1)
                .filter(|&px| {
                    let i = (py as usize * w as usize + px as usize) * 3;
                    buf[i..i + 3] == grey
                })
                .count()
        };
        let (buf, coord) = render(vec![random.clone()]);
        let (x0, y) = coord.translate(&(0.0, 0.2));
        let (x1, _) = coord.translate(&(10.0, 0.2));
        let on = row(&buf, y, x0, x1);
        // dashes of 10 pixels with gaps of 6 cover about 10/16 of the width
        let width = (x1 - x0) as f64;
        assert!(
            (on as f64) > 0.5 * width && (on as f64) < 0.8 * width,
            "{on} of {width} pixels at y = 0.2 are the baseline's"
        );
        // the line stays at its value, and nothing is grey there without it
        let (_, y_off) = coord.translate(&(0.0, 0.35));
        assert_eq!(row(&buf, y_off, x0, x1), 0);
        let (bare, coord) = render(vec![]);
        let (x0, top) = coord.translate(&(0.0, 0.94));
        let (x1, bottom) = coord.translate(&(10.0, 0.46));
        let widest = (top..bottom).map(|py| row(&bare, py, x0, x1)).max();
        assert!(
            widest < Some(10),
            "{widest:?} grey pixels in a row without a baseline"
        );
    }

    #[test]
    fn panels_pick_their_series_and_draw_with_text() {
        let lines: Vec<serde_json::Value> = (0..4)
            .map(|i| {
                let mut v = serde_json::json!({
                    "iteration": i,
                    "train/Bandit/success": 0.25 * f64::from(i),
                    "actor/grad_norm": 1.0,
                });
                if i % 3 == 0 {
                    v["val-env/Bandit/success"] = serde_json::json!(0.5);
                }
                v
            })
            .collect();
        let s = series_of(&CURVES[0], &lines);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].name, "train/Bandit/success");
        assert_eq!(s[0].points[3], (3.0, 0.75));
        assert_eq!(s[1].points, vec![(0.0, 0.5), (3.0, 0.5)]);
        // a flat series gets a unit window
        let g = series_of(&CURVES[3], &lines);
        assert_eq!(ranges(&g, &[]), (0.0..3.0, 0.45..1.55));
        // ticks: whole iterations only; no "-0.00"
        assert_eq!(
            (iteration_label(&2.0), iteration_label(&0.5)),
            ("2".into(), String::new())
        );
        assert_eq!((decimals(1.1), decimals(30.0), decimals(0.011)), (2, 1, 4));
        // the embedded font draws the title: dark pixels in the band above the chart, where
        // only text goes
        register_font().unwrap();
        let (w, h) = grid_size(1, 1);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
        draw_grid_on(root, &[panel(&CURVES[0], s, vec![])], 1).unwrap();
        let title_band = &buf[..(w * 30 * 3) as usize];
        let dark = title_band
            .chunks(3)
            .filter(|p| p.iter().all(|c| *c < 128))
            .count();
        assert!(dark > 100, "{dark} dark pixels in the title band");
    }

    #[test]
    fn success_gets_error_bars_of_one_standard_error() {
        use serde_json::json;
        let lines = vec![
            json!({"iteration": 0, "val-env/Bandit/success": 0.25,
                   "val-env/Bandit/success_stderr": 0.0625}),
            json!({"iteration": 1, "train/Bandit/success": 0.5,
                   "train/Bandit/success_stderr": 0.125}),
            // a line without its standard error gets no bar
            json!({"iteration": 2, "train/Bandit/success": 0.75}),
            json!({"iteration": 4, "val-env/Bandit/success": 0.75,
                   "val-env/Bandit/success_stderr": 0.05}),
        ];
        let s = series_of(&CURVES[0], &lines);
        assert_eq!(s[0].name, "train/Bandit/success");
        assert_eq!(s[0].points, vec![(1.0, 0.5), (2.0, 0.75)]);
        assert_eq!(s[0].stderr, vec![Some(0.125), None]);
        assert_eq!(s[0].label(), "train/Bandit/success ± 1 s.e.");
        assert_eq!(
            s[1].error_bars().collect::<Vec<_>>(),
            vec![(0.0, 0.1875, 0.25, 0.3125), (4.0, 0.7, 0.75, 0.8)]
        );
        // the y range covers the bars: 0.1875 - 0.030625 .. 0.8 + 0.030625
        let (xr, yr) = ranges(&s, &[]);
        assert_eq!(xr, 0.0..4.0);
        assert!((yr.start - 0.156875).abs() < 1e-12 && (yr.end - 0.830625).abs() < 1e-12);
        // drawn: the bar around (1, 0.5) is in the series' colour up to 0.625 and not beyond,
        // and the same panel without standard errors has nothing there
        register_font().unwrap();
        let (w, h) = grid_size(1, 1);
        let render = |series: Vec<Series>| {
            let mut buf = vec![255u8; (w * h * 3) as usize];
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let coord = draw_grid_on(root, &[panel(&CURVES[0], series, vec![])], 1)
                .unwrap()
                .remove(0);
            (buf, coord)
        };
        let color = Palette99::pick(0).to_rgba();
        let rgb = [color.0, color.1, color.2];
        let at = |buf: &[u8], (px, py): (i32, i32)| {
            let i = (py as usize * w as usize + px as usize) * 3;
            [buf[i], buf[i + 1], buf[i + 2]]
        };
        let (buf, coord) = render(s.clone());
        for y in [0.56, 0.6, 0.62] {
            assert_eq!(at(&buf, coord.translate(&(1.0, y))), rgb, "bar at y = {y}");
        }
        let (cx, cy) = coord.translate(&(1.0, 0.625));
        assert_eq!(at(&buf, (cx + 3, cy)), rgb, "the bar's cap");
        assert_ne!(at(&buf, coord.translate(&(1.0, 0.66))), rgb, "past the bar");
        let bare: Vec<Series> = s
            .into_iter()
            .map(|s| Series {
                stderr: vec![None; s.points.len()],
                ..s
            })
            .collect();
        let (buf, coord) = render(bare);
        assert_ne!(at(&buf, coord.translate(&(1.0, 0.6))), rgb);
    }
}
