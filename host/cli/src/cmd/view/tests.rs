use super::*;
use ragen_gym_core::{Step, StepResult, Trajectory, Turn};
use ragen_gym_starpo::Split;
use ragen_gym_starpo::run_dir::TrajectoryRecord;

fn turn(observation: &str, response: &str, actions: &[&str]) -> Turn {
    Turn {
        observation: observation.into(),
        actions_left: 5,
        response: response.into(),
        think: None,
        answer: Some(actions.join(" || ")),
        actions: actions.iter().map(|a| a.to_string()).collect(),
        env_reward: -0.1,
        action_is_valid: true,
        action_is_effective: true,
        format_penalty: false,
        info: vec![],
        steps: actions
            .iter()
            .map(|a| Step {
                action: a.to_string(),
                outcome: Ok(StepResult {
                    observation: "next".into(),
                    reward: -0.1,
                    terminated: false,
                    truncated: false,
                    success: false,
                    action_is_valid: true,
                    action_is_effective: true,
                    info: vec![],
                }),
                expert: None,
            })
            .collect(),
        sampled: None,
    }
}

fn record(iteration: u32, group: usize, success: bool, kept: Option<bool>) -> TrajectoryRecord {
    let t = Trajectory {
        env_id: "t/Grid-v0".into(),
        tag: "Grid".into(),
        group,
        seed: 100 + group as u64,
        turns: vec![turn("###\n#P#\n###", "<answer>Up</answer>", &["Up"])],
        final_observation: "###\n#P#\n###".into(),
        num_actions: 1,
        terminated: success,
        truncated: !success,
        success,
        penalty: 0.0,
        extra_reward: 0.0,
        end_reason: None,
        failure: None,
    };
    TrajectoryRecord {
        score: t.score(),
        trajectory: t,
        iteration,
        split: if kept.is_some() {
            Split::Train
        } else {
            Split::Val
        },
        plugin: None,
        plugin_sha256: "00".into(),
        env_config: None,
        in_group_std: kept.map(|_| 0.5),
        filter_kept: kept,
    }
}

fn write_run(dir: &Path, records: &[TrajectoryRecord], extra: &str) {
    let mut text: String = records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    text.push_str(extra);
    std::fs::write(dir.join("trajectories.jsonl"), text).unwrap();
    std::fs::write(
        dir.join("metrics.jsonl"),
        "{\"iteration\":0,\"val-env/Grid/success\":0.25,\"val-env/Grid/success_stderr\":0.1}\n\
         {\"iteration\":2,\"val-env/Grid/success\":0.5}\n",
    )
    .unwrap();
}

fn args(dir: &Path) -> Args {
    Args {
        run_dir: dir.to_path_buf(),
        out: None,
        open: false,
        sample: None,
        replay: false,
        trajectory: None,
        env: None,
        sandbox: SandboxArgs::default(),
    }
}

#[test]
fn the_page_data_holds_every_logged_episode_with_its_filter_verdict_and_the_curve() {
    let d = tempfile::tempdir().unwrap();
    let recs = [
        record(0, 0, false, None),
        record(1, 0, true, Some(true)),
        record(1, 1, false, Some(false)),
    ];
    // a blank line is counted, as `replay --trajectory N` counts lines
    write_run(d.path(), &recs[..2], "\n");
    let mut text = std::fs::read_to_string(d.path().join("trajectories.jsonl")).unwrap();
    text.push_str(&(serde_json::to_string(&recs[2]).unwrap() + "\n"));
    std::fs::write(d.path().join("trajectories.jsonl"), text).unwrap();
    let (data, diverged) = page_data(&args(d.path())).unwrap();
    assert_eq!(diverged, 0);
    let lines: Vec<usize> = data.episodes.iter().map(|e| e.line).collect();
    assert_eq!(lines, [0, 1, 3]);
    let verdicts: Vec<(Option<bool>, Option<f64>)> = data
        .episodes
        .iter()
        .map(|e| (e.kept, e.group_std))
        .collect();
    assert_eq!(
        verdicts,
        [
            (None, None),
            (Some(true), Some(0.5)),
            (Some(false), Some(0.5))
        ]
    );
    assert_eq!(data.header.logged, 3);
    assert_eq!(data.header.iterations, Some(2));
    assert_eq!(data.header.curves.len(), 1);
    assert_eq!(
        data.header.curves[0].points,
        [(0.0, 0.25, Some(0.1)), (2.0, 0.5, None)]
    );
    // no plugin recorded: no legend, the observation stays text, and the page says why
    assert!(data.header.legend.is_empty());
    assert_eq!(data.episodes[0].turns[0].obs.grid, None);
    assert!(
        data.header.notes[0].contains("shown as text"),
        "{:?}",
        data.header.notes
    );
    assert_eq!(data.episodes[1].turns[0].steps[0].reward, Some(-0.1));
}

#[test]
fn the_expert_advice_recorded_on_a_step_reaches_the_page() {
    let d = tempfile::tempdir().unwrap();
    let mut advised = record(0, 0, false, None);
    advised.trajectory.turns[0].steps[0].expert = Some(vec!["Down".into(), "Left".into()]);
    write_run(d.path(), &[advised, record(0, 1, false, None)], "");
    let (data, _) = page_data(&args(d.path())).unwrap();
    let expert = |e: usize| data.episodes[e].turns[0].steps[0].expert.clone();
    assert_eq!(
        expert(0),
        Some(vec!["Down".to_string(), "Left".to_string()])
    );
    assert_eq!(expert(1), None);
    // In the page's data block with its name, and absent where nothing was advised.
    let step = serde_json::to_value(&data.episodes[0].turns[0].steps[0]).unwrap();
    assert_eq!(step["expert"], serde_json::json!(["Down", "Left"]));
    let plain = serde_json::to_value(&data.episodes[1].turns[0].steps[0]).unwrap();
    assert!(plain.get("expert").is_none());
}

#[test]
fn sample_spreads_the_cap_over_the_file() {
    let d = tempfile::tempdir().unwrap();
    let recs: Vec<TrajectoryRecord> = (0..10)
        .map(|g| record(g / 2, g as usize, false, None))
        .collect();
    write_run(d.path(), &recs, "");
    let mut a = args(d.path());
    a.sample = Some(4);
    let (data, _) = page_data(&a).unwrap();
    let lines: Vec<usize> = data.episodes.iter().map(|e| e.line).collect();
    assert_eq!(lines, [0, 2, 5, 7], "floor(i * 10 / 4)");
    assert_eq!(data.header.logged, 10);
    a.sample = Some(50);
    assert_eq!(page_data(&a).unwrap().0.episodes.len(), 10);
}

#[test]
fn bad_inputs_name_the_file_and_line() {
    let d = tempfile::tempdir().unwrap();
    let err = format!("{:#}", page_data(&args(d.path())).err().unwrap());
    assert!(
        err.contains("has no trajectories.jsonl or sft_trajectories.jsonl"),
        "{err}"
    );
    write_run(
        d.path(),
        &[record(0, 0, true, None)],
        "{\"not\": \"a record\"}\n",
    );
    let err = format!("{:#}", page_data(&args(d.path())).err().unwrap());
    assert!(
        err.contains("trajectories.jsonl line 1 is not a trajectory record"),
        "{err}"
    );
    std::fs::write(
        d.path().join("metrics.jsonl"),
        "{\"iteration\":0}\nnot json\n",
    )
    .unwrap();
    let err = format!("{:#}", page_data(&args(d.path())).err().unwrap());
    assert!(err.contains("metrics.jsonl line 2 is not JSON"), "{err}");
    let missing = d.path().join("nope");
    let err = format!("{:#}", page_data(&args(&missing)).err().unwrap());
    assert!(err.contains("nope is not a run directory"), "{err}");
}

#[test]
fn reads_are_bounded() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("run.json");
    std::fs::write(&p, vec![b' '; (load::MAX_SMALL_BYTES + 1) as usize]).unwrap();
    let err = format!(
        "{:#}",
        load::read_bounded(&p, load::MAX_SMALL_BYTES).unwrap_err()
    );
    assert!(
        err.contains("run.json is larger than 1048576 bytes"),
        "{err}"
    );
}

#[test]
fn untrusted_text_stays_inside_the_data_block() {
    let d = tempfile::tempdir().unwrap();
    let mut r = record(0, 0, false, None);
    r.trajectory.turns[0].observation = "</script><script>alert(1)</script>".into();
    r.trajectory.turns[0].response = "<answer>Up</answer><img src=x onerror=alert(2)>".into();
    write_run(d.path(), &[r], "");
    let (data, _) = page_data(&args(d.path())).unwrap();
    let page = html::page(&data).unwrap();
    assert!(
        !page.contains("alert(1)</script>") && !page.contains("<img"),
        "escaped"
    );
    assert_eq!(page.matches("<script").count(), 2);
}
