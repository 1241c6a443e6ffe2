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

#[test]
fn several_runs_plot_their_mean_and_need_an_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut run_dirs = Vec::new();
    for (i, (before, after)) in [(0.1, 0.2), (0.2, 0.3), (0.3, 0.7)].iter().enumerate() {
        let run = dir.path().join(format!("seed{i}"));
        std::fs::create_dir(&run).unwrap();
        let lines = [
            serde_json::json!({"iteration": 0, "val-env/FrozenLake/success": before}),
            serde_json::json!({"iteration": 10, "val-env/FrozenLake/success": after}),
        ];
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(run.join("metrics.jsonl"), text).unwrap();
        run_dirs.push(run);
    }
    let args = |out: Option<PathBuf>| Args {
        run_dirs: run_dirs.clone(),
        out,
        baseline: vec![],
    };
    let err = run(args(None)).unwrap_err().to_string();
    assert!(err.contains("3 runs together needs --out DIR"), "{err}");
    let out = dir.path().join("plots");
    run(args(Some(out.clone()))).unwrap();
    for file in ["curves.png", "success_rate.png"] {
        let png = std::fs::read(out.join(file)).unwrap();
        assert_eq!(&png[..4], b"\x89PNG", "{file}");
    }
    // one run without the others' metric: nothing in common to plot, named in the error
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(
        other.join("metrics.jsonl"),
        "{\"iteration\": 1, \"actor/entropy_loss\": 0.5}\n",
    )
    .unwrap();
    let err = run(Args {
        run_dirs: vec![run_dirs[0].clone(), other.clone()],
        out: Some(out),
        baseline: vec![],
    })
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("no plottable metrics common to every run"),
        "{err}"
    );
}

/// An `sft` run directory plots its epochs, and after `train --resume` its RL iterations shifted
/// to start at the last epoch: epochs 0, 1, 2 then RL iterations 0 and 10 at x = 2 and 12.
#[test]
fn an_sft_run_plots_its_epochs_then_the_rl_that_continued_it() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("sft");
    std::fs::create_dir(&run_dir).unwrap();
    let jsonl = |values: &[(u32, f64)]| -> String {
        values
            .iter()
            .map(|(it, v)| {
                format!(
                    "{}\n",
                    serde_json::json!({"iteration": it, "val-env/Sokoban/success": v})
                )
            })
            .collect()
    };
    std::fs::write(
        run_dir.join("sft_metrics.jsonl"),
        jsonl(&[(0, 0.04), (1, 0.07), (2, 0.13)]),
    )
    .unwrap();
    let success = |lines: &[serde_json::Value]| -> Vec<(f64, f64)> {
        let curve = CURVES.iter().find(|c| shows_success(c)).unwrap();
        series_of(curve, lines)[0].points.clone()
    };
    let sft_only = read_run(&run_dir).unwrap();
    assert_eq!(
        success(&sft_only),
        vec![(0.0, 0.04), (1.0, 0.07), (2.0, 0.13)]
    );
    std::fs::write(
        run_dir.join("metrics.jsonl"),
        jsonl(&[(0, 0.09), (10, 0.055)]),
    )
    .unwrap();
    let both = read_run(&run_dir).unwrap();
    assert_eq!(
        success(&both),
        vec![
            (0.0, 0.04),
            (1.0, 0.07),
            (2.0, 0.13),
            (2.0, 0.09),
            (12.0, 0.055)
        ]
    );
    run(Args {
        run_dirs: vec![run_dir.clone()],
        out: None,
        baseline: vec![],
    })
    .unwrap();
    let png = std::fs::read(run_dir.join("plots").join("curves.png")).unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
}

#[test]
fn values_at_the_ends_of_f64_give_a_finite_range_and_a_drawing() {
    // `ragen-gym plot` of a metrics.jsonl with actor/grad_norm 1e308 then -1e308 spun forever
    let s = vec![Series {
        name: "actor/grad_norm".into(),
        points: vec![(1.0, 1e308), (2.0, -1e308)],
        stderr: vec![None, None],
    }];
    let (_, yr) = ranges(&s, &[]);
    // held to ±1e300, then 5 % of the 2e300 span either side
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs();
    assert!(near(yr.start, -1.1e300) && near(yr.end, 1.1e300), "{yr:?}");
    register_font().unwrap();
    let (w, h) = grid_size(1, 1);
    let mut buf = vec![255u8; (w * h * 3) as usize];
    let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
    draw_grid_on(root, &[panel(&CURVES[0], s, vec![])], 1).unwrap();
}
