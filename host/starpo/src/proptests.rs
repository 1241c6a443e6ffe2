//! Property tests of every reader of outside input in this crate: the answer parser
//! ([`crate::prompt::parse_response`], [`crate::prompt::map_actions`]), the config loader
//! ([`ConfigBuilder`]: TOML layers and `--set` overrides) and the run directory's readers
//! (`run.json`, `checkpoint/trainer_state.json`, `metrics.jsonl`, `trajectories.jsonl`). Any input
//! gives a value or an error that names its source, never a panic; the parser is also linear in
//! its input (a 1.2 MB adversarial answer parses in well under a second). Case counts are set so
//! that the whole file runs in a few seconds.

use crate::config::{Config, ConfigBuilder};
use crate::events::Split;
use crate::prompt::{map_actions, parse_response};
use crate::run_dir::{RunDir, TrajectoryRecord};
use proptest::collection::vec;
use proptest::prelude::*;
use ragen_gym_core::{Metric, Step, StepResult, Trajectory, Turn};

/// Text made of the parser's tags, whitespace, separators and anything else.
fn tagged_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("<think>".to_string()),
        Just("</think>".to_string()),
        Just("<answer>".to_string()),
        Just("</answer>".to_string()),
        Just("<|im_end|>".to_string()),
        Just("||".to_string()),
        Just(" \n\t".to_string()),
        "[a-zA-Z]{0,6}",
        any::<String>(),
    ];
    vec(piece, 0..24).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_answer_parser_takes_any_text(
        text in tagged_text(),
        think in any::<bool>(),
        sep in prop_oneof![Just("||".to_string()), Just(",".to_string()), ".{0,3}"],
        max in 0usize..6,
    ) {
        let p = parse_response(&text, think, &sep, max);
        prop_assert!(p.actions.len() <= max);
        prop_assert!(p.actions.iter().all(|a| !a.is_empty() && a.trim() == a));
        match &p.answer {
            None => {
                prop_assert_eq!(&p.cleaned, &text);
                prop_assert!(p.actions.is_empty() && p.think.is_none());
            }
            Some(a) => {
                let tail = format!("<answer>{a}</answer>");
                prop_assert!(p.cleaned.ends_with(&tail));
                prop_assert_eq!(p.think.is_some(), think);
            }
        }
        let names = ["Up".to_string(), "Down".to_string()];
        let (valid, dropped) = map_actions(&p.actions, Some(&names));
        prop_assert!(valid.iter().all(|v| names.contains(v)));
        prop_assert_eq!(dropped, valid.len() < p.actions.len());
    }
}

#[test]
fn the_answer_parser_is_linear_on_adversarial_answers() {
    // every `</think>` is followed by `<answer>`, none is ever closed: a parser that tries each
    // `<think>` with each `</think>` does 10^10 steps here
    for text in [
        "<think></think><answer>".repeat(50_000),
        format!(
            "{}{}",
            "<think>".repeat(80_000),
            "</think> <answer>x".repeat(50_000)
        ),
    ] {
        let t = std::time::Instant::now();
        let p = parse_response(&text, true, "||", 5);
        assert!(p.answer.is_none());
        let took = t.elapsed();
        assert!(
            took.as_secs_f64() < 1.0,
            "{} bytes took {took:?}",
            text.len()
        );
    }
}

/// A TOML value as text: numbers (with the special floats), strings, booleans, arrays, tables.
fn toml_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|x| x.to_string()),
        any::<f64>().prop_map(|x| format!("{x:?}")),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        any::<bool>().prop_map(|x| x.to_string()),
        ".{0,12}".prop_map(|s| format!("{s:?}")),
        Just("[1, 2]".to_string()),
        Just("{ a = 1 }".to_string()),
        ".{0,8}",
    ]
}

/// Every `section.key` of the default config.
fn known_keys() -> Vec<String> {
    crate::config::default_leaves()
        .into_iter()
        .map(|(key, _)| key)
        .collect()
}

/// A config, or the error, after these overrides; a config must survive its own `config.toml`.
fn build_with(overrides: &[(String, String)]) -> Result<Config, String> {
    let mut b = ConfigBuilder::new();
    for (k, v) in overrides {
        b = b
            .layer_override(&format!("{k}={v}"))
            .map_err(|e| e.to_string())?;
    }
    let cfg = b.build().map_err(|e| e.to_string())?;
    let again = ConfigBuilder::new()
        .layer_str(&cfg.to_toml(), "config.toml")
        .and_then(ConfigBuilder::build)
        .expect("a config reloads from its own config.toml");
    assert_eq!(format!("{again:?}"), format!("{cfg:?}"));
    Ok(cfg)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_config_loader_takes_any_layer(text in ".{0,200}", toml in vec((".{0,8}", toml_value()), 0..4)) {
        // any text as a layer: a config or an error naming the layer
        if let Err(e) = ConfigBuilder::new().layer_str(&text, "layer.toml").and_then(ConfigBuilder::build) {
            prop_assert!(e.to_string().contains("layer.toml") || e.to_string().starts_with("invalid config"), "{}", e);
        }
        let doc: String = toml.iter().map(|(k, v)| format!("{k:?} = {v}\n")).collect();
        let _ = ConfigBuilder::new().layer_str(&doc, "layer.toml").and_then(ConfigBuilder::build);
    }

    #[test]
    fn the_config_loader_takes_any_override(
        picks in vec((any::<prop::sample::Index>(), toml_value()), 1..4),
        raw in ".{0,40}",
    ) {
        let keys = known_keys();
        let overrides: Vec<(String, String)> =
            picks.iter().map(|(i, v)| (i.get(&keys).clone(), v.clone())).collect();
        if let Err(e) = build_with(&overrides) {
            prop_assert!(!e.is_empty());
        }
        let _ = ConfigBuilder::new().layer_override(&raw).and_then(ConfigBuilder::build);
    }
}

/// Bytes that look like the run directory's JSON and JSONL, or anything.
fn json_ish() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"\"iteration\": ".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"[1e999, null, -0]".to_vec()),
        Just(b"\"env_id\":\"x\",".to_vec()),
        any::<u32>().prop_map(|x| x.to_string().into_bytes()),
        vec(any::<u8>(), 0..8),
    ];
    vec(piece, 0..20).prop_map(|p| p.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_run_dir_readers_take_any_file(bytes in json_ish(), first in 0u64..4) {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        std::fs::create_dir_all(r.checkpoint_path()).unwrap();
        let files = [
            r.run_info_path(),
            r.checkpoint_path().join("trainer_state.json"),
            r.metrics_path(),
            r.trajectories_path(),
        ];
        for f in &files {
            std::fs::write(f, &bytes).unwrap();
        }
        let named = |e: crate::run_dir::RunDirError, file: &str| {
            let msg = e.to_string();
            assert!(msg.contains(file), "{msg}");
        };
        if let Err(e) = r.read_run_info() { named(e, "run.json") }
        if let Err(e) = r.read_trainer_state() { named(e, "trainer_state.json") }
        if let Err(e) = r.read_metrics() { named(e, "metrics.jsonl") }
        if let Err(e) = r.read_trajectories(None) { named(e, "trajectories.jsonl") }
        // truncation keeps only whole lines of earlier iterations, which then read back, or
        // refuses a file damaged before its end, naming it
        match r.truncate_jsonl_from(&r.metrics_path(), first) {
            Ok(()) => {
                let kept = r.read_metrics().unwrap();
                prop_assert!(kept.iter().all(|v| v["iteration"].as_u64().is_some_and(|i| i < first)));
            }
            Err(e) => named(e, "metrics.jsonl"),
        }
    }
}

/// Any finite float: decimals as envs write them, the extremes, and every bit pattern (serde_json
/// reads each back exactly with its `float_roundtrip` feature; without it, 941592.9378174719
/// came back as 941592.937817472, the case in `proptest-regressions/proptests.txt`).
fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        (-1_000_000_000_000i64..1_000_000_000_000).prop_map(|x| x as f64 / 1e6),
        Just(941_592.937_817_471_9),
        Just(f64::MAX),
        Just(f64::MIN_POSITIVE),
        any::<f64>().prop_filter("finite", |x| x.is_finite()),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let result = (
        ".{0,12}",
        finite(),
        any::<[bool; 5]>(),
        vec((".{0,6}", finite()), 0..3),
    )
        .prop_map(|(observation, reward, f, info)| StepResult {
            observation,
            reward,
            terminated: f[0],
            truncated: f[1],
            action_is_valid: f[2],
            action_is_effective: f[3],
            success: f[4],
            info: info.into_iter().map(|(n, v)| Metric::new(n, v)).collect(),
        });
    (
        ".{0,8}",
        prop_oneof![result.prop_map(Ok), ".{0,12}".prop_map(Err)],
        proptest::option::of(proptest::collection::vec(".{0,6}", 0..3)),
    )
        .prop_map(|(action, outcome, expert)| Step {
            action,
            outcome,
            expert,
        })
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        (
            ".{0,16}",
            any::<usize>(),
            ".{0,24}",
            proptest::option::of(".{0,8}"),
            proptest::option::of(".{0,8}"),
        ),
        (
            vec(".{0,6}", 0..3),
            finite(),
            any::<[bool; 3]>(),
            vec(step(), 0..3),
        ),
    )
        .prop_map(
            |(
                (observation, actions_left, response, think, answer),
                (actions, env_reward, f, steps),
            )| Turn {
                observation,
                actions_left,
                response,
                think,
                answer,
                actions,
                env_reward,
                action_is_valid: f[0],
                action_is_effective: f[1],
                format_penalty: f[2],
                info: vec![],
                steps,
                sampled: None,
            },
        )
}

fn record() -> impl Strategy<Value = TrajectoryRecord> {
    let trajectory = (
        (
            ".{0,12}",
            ".{0,6}",
            any::<usize>(),
            any::<u64>(),
            vec(turn(), 0..3),
        ),
        (
            ".{0,12}",
            any::<usize>(),
            any::<[bool; 3]>(),
            finite(),
            finite(),
            proptest::option::of(".{0,12}"),
        ),
    )
        .prop_map(
            |(
                (env_id, tag, group, seed, turns),
                (final_observation, num_actions, f, penalty, extra_reward, end_reason),
            )| Trajectory {
                env_id,
                tag,
                group,
                seed,
                turns,
                final_observation,
                num_actions,
                terminated: f[0],
                truncated: f[1],
                success: f[2],
                penalty,
                extra_reward,
                end_reason,
                failure: None,
            },
        );
    (
        trajectory,
        any::<u32>(),
        any::<bool>(),
        finite(),
        proptest::option::of(".{0,8}"),
        ".{0,8}",
        proptest::option::of(".{0,8}"),
        proptest::option::of((finite(), any::<bool>())),
    )
        .prop_map(
            |(trajectory, iteration, val, score, plugin, plugin_sha256, env_config, verdict)| {
                TrajectoryRecord {
                    trajectory,
                    iteration,
                    split: if val { Split::Val } else { Split::Train },
                    score,
                    plugin,
                    plugin_sha256,
                    env_config,
                    in_group_std: verdict.map(|v| v.0),
                    filter_kept: verdict.map(|v| v.1),
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn trajectories_jsonl_reads_back_what_was_written(records in vec(record(), 1..4)) {
        let d = tempfile::tempdir().unwrap();
        let r = RunDir::create(d.path()).unwrap();
        let mut w = r.jsonl_writer(&r.trajectories_path()).unwrap();
        for rec in &records {
            w.write(rec).unwrap();
        }
        w.sync().unwrap();
        let read: Vec<TrajectoryRecord> =
            r.read_trajectories(None).unwrap().into_iter().map(|(_, t)| t).collect();
        prop_assert_eq!(read, records);
    }
}
