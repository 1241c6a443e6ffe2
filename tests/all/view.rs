//! `ragen-gym view` in a real browser: a 2-iteration StarPO-S run on the built-in Sokoban with a
//! tiny random model (`train`, constrained decoding, coordinate observations), its page rendered
//! by headless Chromium (`--dump-dom` after the page's script has run, under a virtual-time
//! budget), and what a person would see checked against `trajectories.jsonl`: the number of
//! episodes, the player's cell at the coordinates the observation states, a step's reward, the
//! filter's kept/dropped verdicts, and filters (set through the URL's hash, as the page's
//! controls set them) that hide failures or dropped groups. A run whose observation and response
//! hold `<script>` shows both as text. Chromium comes from `scripts/setup.sh` (Debian's
//! `chromium`); without it these tests fail, naming the fix.
//!
//! Cost: one `train` of 2 iterations on the tiny model and 7 Chromium runs, about 20 s on 2
//! cores.

use crate::child::{cli, run_watched};
use crate::tiny_model;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The `chromium` on `PATH`.
fn chromium() -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium is not on PATH: the browser tests of `ragen-gym view` need it; \
                 run `bash scripts/setup.sh` (installs Debian's chromium)"
            )
        })
}

/// Whether this process runs as root (Chromium's sandbox refuses root without `--no-sandbox`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        == Some("0")
}

/// Chromium's flags for one headless run with its own profile under `profile`.
fn chromium_args(profile: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--virtual-time-budget=10000",
    ]
    .map(String::from)
    .into();
    args.push(format!("--user-data-dir={}", profile.display()));
    if is_root() {
        args.push("--no-sandbox".into());
    }
    args
}

/// The DOM of `page` opened at `#hash` after its script ran.
fn dump_dom(page: &Path, hash: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let url = format!("file://{}#{hash}", page.display());
    let out = Command::new("timeout")
        .arg("120")
        .arg(chromium())
        .args(chromium_args(profile.path()))
        .args(["--dump-dom", &url])
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("data-rendered=\"true\""),
        "chromium on {url}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// What the page's script drew in `dump_dom(page, hash)`: the DOM after its last `</script>`
/// (the script's own text, with the words it writes, comes before).
fn drawn(page: &Path, hash: &str) -> String {
    let dom = dump_dom(page, hash);
    dom[dom.rfind("</script>").unwrap()..].to_string()
}

/// `train --env sokoban` for 2 iterations into `run_dir`: 4 groups of 4, the 2 with the highest
/// in-group std kept (RAGEN v1's top-k), every trajectory logged, 8 validation episodes before
/// and after training.
fn train(model: &Path, run_dir: &Path) {
    let (model, run_dir) = (model.display().to_string(), run_dir.display().to_string());
    let mut args = vec![
        "train", "--env", "sokoban", "--device", "cpu", "--model", &model,
    ];
    args.extend(["--run-dir", &run_dir, "--iterations", "2"]);
    for s in [
        "es_manager.train.env_groups=4",
        "es_manager.train.group_size=4",
        "rollout.rollout_filter_ratio=0.5",
        "rollout.rollout_filter_strategy=top_k",
        "es_manager.val.env_groups=8",
        "trainer.test_freq=0",
        "trainer.log_trajectories=64",
        "actor.ppo_mini_batch_size=8",
    ] {
        args.extend(["--set", s]);
    }
    let out = run_watched(&args, &[], Duration::from_secs(600), 2048);
    assert_eq!(out.code, Some(0), "{}", out.stderr);
}

fn view(args: &[&str]) -> String {
    let out = Command::new(cli()).arg("view").args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "view {args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn records(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("trajectories.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The `N of M episodes` line and the number of listed episodes (`<li class="ep ...">`).
fn counts(dom: &str) -> (String, usize) {
    let start = dom.find("id=\"count\">").expect("the count") + "id=\"count\">".len();
    let text = dom[start..dom[start..].find('<').unwrap() + start].to_string();
    (text, dom.matches("<li class=\"ep ").count())
}

/// `(row, column)` from the observation's `Player: (r, c)` (or `Player on target: (r, c)`) line.
fn player_at(observation: &str) -> (usize, usize) {
    let line = observation
        .lines()
        .find(|l| l.starts_with("Player"))
        .expect("a coordinate observation");
    let inner = &line[line.find('(').unwrap() + 1..line.find(')').unwrap()];
    let (r, c) = inner.split_once(", ").unwrap();
    (r.parse().unwrap(), c.parse().unwrap())
}

#[test]
fn a_sokoban_run_renders_in_chromium_as_boards_rewards_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    train(&tiny_model(dir.path()), &run);
    let page = dir.path().join("view.html");
    let page_s = page.display().to_string();
    let said = view(&[run.to_str().unwrap(), "--out", &page_s]);
    let recs = records(&run);
    let n = recs.len();
    assert_eq!(
        n,
        8 + 2 * 16 + 8,
        "8 validation episodes before training and after it, 2 x 16 training ones"
    );
    assert!(
        said.contains(&format!("{n} of {n} logged episodes")),
        "{said}"
    );

    // every episode is listed
    let dom = drawn(&page, "");
    assert_eq!(counts(&dom), (format!("{n} of {n} episodes"), n));

    // a training episode: its first board has the player where the observation says, and its
    // first step's reward, score and filter verdict show
    let line = 8 + 5;
    let rec = &recs[line];
    let (r, c) = player_at(rec["turns"][0]["observation"].as_str().unwrap());
    let dom = drawn(&page, &format!("ep={line}"));
    assert!(dom.contains("<article class=\"episode"), "{dom}");
    assert!(dom.contains(&format!("data-line=\"{line}\"")));
    let board = &dom[dom.find("<table class=\"grid\">").unwrap()..];
    let board = &board[..board.find("</table>").unwrap()];
    let players: Vec<&str> = board.matches("<td class=\"cell c-player").collect();
    assert_eq!(players.len(), 1, "one player cell on the board");
    let cell = format!("data-row=\"{r}\" data-col=\"{c}\"");
    let at = board.find(&cell).expect("the player's cell");
    let td = &board[board[..at].rfind("<td").unwrap()..at];
    assert!(td.starts_with("<td class=\"cell c-player"), "{td}");
    let reward = rec["turns"][0]["steps"][0]["outcome"]["Ok"]["reward"]
        .as_f64()
        .unwrap();
    assert!(dom.contains(&format!("<td class=\"step-reward\">{reward:.2}</td>")));
    let score = rec["score"].as_f64().unwrap();
    assert!(dom.contains(&format!(">score {score:.2}<")));
    let kept = rec["filter_kept"]
        .as_bool()
        .expect("a training line has the verdict");
    let verdict = if kept {
        "kept by StarPO-S"
    } else {
        "dropped by StarPO-S"
    };
    assert!(dom.contains(verdict));

    // the filters: outcome and verdict, through the hash
    let count_of = |f: &dyn Fn(&Value) -> bool| recs.iter().filter(|r| f(r)).count();
    let successes = count_of(&|r| r["success"] == true);
    assert!(
        successes > 0 && successes < n,
        "{successes} of {n}: both outcomes"
    );
    let dom = drawn(&page, "outcome=success");
    assert_eq!(
        counts(&dom),
        (format!("{successes} of {n} episodes"), successes)
    );
    assert!(!dom.contains("<li class=\"ep failure"), "failures hidden");
    let dom = drawn(&page, "outcome=failure");
    assert_eq!(counts(&dom).1, n - successes);
    assert!(!dom.contains("<li class=\"ep success"), "successes hidden");
    // half of the 4 groups of each iteration kept, whole groups
    let kept = count_of(&|r| r["filter_kept"] == true);
    assert_eq!(kept, 2 * 2 * 4);
    for it in [1, 2] {
        let std_of = |k: bool| {
            let group = recs
                .iter()
                .filter(|r| r["iteration"] == it && r["filter_kept"] == k);
            group
                .map(|r| r["in_group_std"].as_f64().unwrap())
                .collect::<Vec<f64>>()
        };
        let lowest_kept = std_of(true).into_iter().fold(f64::INFINITY, f64::min);
        let highest_dropped = std_of(false).into_iter().fold(0.0, f64::max);
        assert!(
            lowest_kept >= highest_dropped,
            "iteration {it}: top-k by std"
        );
    }
    assert_eq!(count_of(&|r| r["filter_kept"] == false), kept);
    let dom = drawn(&page, "filter=dropped&iteration=2");
    assert_eq!(counts(&dom).1, 8, "2 dropped groups of 4 in iteration 2");
    assert!(dom.contains("dropped by StarPO-S") && !dom.contains("kept by StarPO-S"));
}

#[test]
fn script_in_an_observation_and_a_response_shows_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let turn = serde_json::json!({
        "observation": "<script>document.title='owned-by-observation'</script>",
        "actions_left": 5, "response": "<script>document.title='owned-by-response'</script>",
        "think": null, "answer": null, "actions": [], "env_reward": 0.0,
        "action_is_valid": false, "action_is_effective": false, "format_penalty": true,
        "info": [], "steps": []
    });
    let rec = serde_json::json!({
        "env_id": "t/X-v0", "tag": "X", "group": 0, "seed": 1, "turns": [turn],
        "final_observation": "<img src=x onerror=\"document.title='owned-by-img'\">",
        "num_actions": 0, "terminated": false, "truncated": true, "success": false,
        "penalty": -0.1, "extra_reward": 0.0, "end_reason": null, "iteration": 0,
        "split": "val", "score": -0.1, "plugin_sha256": "00"
    });
    std::fs::write(run.join("trajectories.jsonl"), format!("{rec}\n")).unwrap();
    let page = dir.path().join("view.html");
    view(&[run.to_str().unwrap(), "--out", page.to_str().unwrap()]);
    let dom = dump_dom(&page, "");
    assert!(
        dom.contains("<title>ragen-gym view</title>"),
        "no injected script ran"
    );
    let dom = drawn(&page, "");
    for shown in [
        "&lt;script&gt;document.title='owned-by-observation'&lt;/script&gt;",
        "&lt;script&gt;document.title='owned-by-response'&lt;/script&gt;",
        "&lt;img src=x onerror=\"document.title='owned-by-img'\"&gt;",
    ] {
        assert!(dom.contains(shown), "{shown} shown as text");
    }
    assert_eq!(dom.matches("<img").count(), 0);
    assert_eq!(dom.matches("<script").count(), 0, "no script element drawn");
}
