//! StarPO trainer integration: the rollout over real env logic (native), and one tiny end-to-end
//! training run with the default model (train 1 iteration, resume to 2) whose files are written
//! by the CLI's reporters.

use ragen_gym_builtins::Builtin;
use ragen_gym_cli::report::Reporters;
use ragen_gym_cli::report::jsonl::{EnvSource, JsonlReporter};
use ragen_gym_cli::report::tensorboard::{TensorBoardReporter, event_files, read_events, scalars};
use ragen_gym_starpo::prompt::{PromptConfig, env_prefix};
use ragen_gym_starpo::seeds::group_seeds;
use ragen_gym_starpo::testing::ScriptedGenerator;
use ragen_gym_starpo::{
    ConfigBuilder, EnvPool, EnvPreset, GenerationParams, Profile, RolloutParams, RunDir,
    TrainSetup, Trainer, rollout,
};

fn bandit() -> &'static Builtin {
    ragen_gym_builtins::find("bandit").expect("bandit is built in")
}

/// The bandit preset as a GPU run sees it (without its `[cpu.*]` tables).
fn bandit_preset() -> EnvPreset<'static> {
    EnvPreset {
        name: "bandit",
        toml: bandit().preset.expect("a preset"),
    }
}

fn native_bandit() -> ragen_gym_builtins::NativeConstructor {
    bandit().native.expect("bandit builds natively")
}

fn bandit_pool(n: usize) -> EnvPool {
    EnvPool::new((0..n).map(|_| native_bandit()("").unwrap()).collect())
}

fn params() -> RolloutParams {
    let cfg = ConfigBuilder::new()
        .layer_preset(bandit_preset(), Profile::Full)
        .unwrap()
        .build()
        .unwrap();
    let pool = bandit_pool(1);
    RolloutParams {
        prompt: PromptConfig {
            system_prompt: cfg.agent_proxy.system_prompt.clone(),
            prefix: env_prefix(pool.spec(), 1, "||"),
            enable_think: true,
            response_length: 100,
            max_context_window: -1,
        },
        max_turn: cfg.agent_proxy.max_turn,
        max_actions_per_turn: cfg.agent_proxy.max_actions_per_turn,
        max_actions_per_traj: cfg.agent_proxy.max_actions_per_traj,
        action_sep: "||".into(),
        format_penalty: -0.1,
        max_model_len: 100_000,
        generation_batch_size: 8,
        sampling: GenerationParams {
            temperature: 1.0,
            top_p: 1.0,
            max_new_tokens: 100,
            seed: 0,
            stop_at_answer: false,
        },
        tag: "Bandit".into(),
        trajectory_wall_budget: None,
        expert_agreement: cfg.rollout.expert_agreement,
    }
}

#[test]
fn bandit_rollout_success_is_picking_the_high_arm() {
    // RAGEN Bandit: success = the chosen arm is the hi arm (Dragon), whatever it pays; one turn.
    let seeds = group_seeds(10_000, 4, 2);
    let mut pool = bandit_pool(seeds.len());
    let t = rollout(
        &mut pool,
        &seeds,
        &mut ScriptedGenerator::fixed("risky</think><answer>dragon</answer>"),
        &params(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(t.len(), 8);
    for x in &t {
        assert!(x.success, "{x:?}");
        assert_eq!(x.turns.len(), 1);
        assert_eq!(x.turns[0].actions, vec!["Dragon"]);
        assert!(
            x.score() == 0.0 || x.score() == 1.0,
            "hi arm pays 0 or 1: {}",
            x.score()
        );
    }
    // group members share the seed, so they see the same state
    assert_eq!(t[0].turns[0].observation, t[1].turns[0].observation);
    let mut pool = bandit_pool(2);
    let t = rollout(
        &mut pool,
        &seeds[..2],
        &mut ScriptedGenerator::fixed("safe</think><answer>Phoenix</answer>"),
        &params(),
        &mut |_| {},
    )
    .unwrap();
    assert!(
        t.iter()
            .all(|x| !x.success && (x.score() - 0.1).abs() < 1e-12)
    );
}

#[test]
fn train_one_iteration_then_resume_with_the_default_model() {
    let model = ragen_gym_policy_path();
    assert!(
        model.exists(),
        "default model missing at {} (run scripts/setup.sh)",
        model.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let build = |iters: u32, resume: bool| {
        let b = if resume {
            RunDir::open(&run_dir).unwrap().resume_config().unwrap()
        } else {
            ConfigBuilder::new()
                .layer_preset(bandit_preset(), Profile::Full)
                .unwrap()
                .layer_str(
                    "[es_manager.train]\nenv_groups = 1\ngroup_size = 2\n[es_manager.val]\nenv_groups = 1\n\
                     [agent_proxy]\nenable_think = false\n\
                     [rollout]\nresponse_length = 6\nrollout_filter_ratio = 1.0\n\
                     [algorithm]\nadv_estimator = \"grpo\"\n\
                     [actor]\nppo_mini_batch_size = 2\nmicro_batch_size = 2\n\
                     [model]\nlora_rank = 2\nlora_alpha = 4.0\n\
                     [trainer]\ntest_freq = 0\nval_before_train = false\nsave_freq = 1\n",
                    "test config",
                )
                .unwrap()
        };
        let cfg = b
            .layer_override(&format!("trainer.total_training_steps={iters}"))
            .unwrap()
            .build()
            .unwrap();
        Trainer::new(TrainSetup {
            config: cfg,
            make_env: Box::new(|| native_bandit()("")),
            plugin_sha256: "native".into(),
            env_source: "bandit".into(),
            reward_functions: vec![],
            run_dir: run_dir.clone(),
            resume,
            device: ragen_gym_policy::Device::Cpu,
        })
        .unwrap()
    };
    // the CLI's reporters write metrics.jsonl, trajectories.jsonl and the TensorBoard files
    let reporters = |t: &Trainer| {
        let run = RunDir::open(t.run_dir()).unwrap();
        let env = EnvSource {
            plugin: "bandit".into(),
            plugin_sha256: "native".into(),
            env_config: String::new(),
        };
        Reporters(vec![
            Box::new(TensorBoardReporter::new(&run)),
            Box::new(JsonlReporter::new(run, env, 4)),
        ])
    };
    let mut t = build(1, false);
    t.train(&mut reporters(&t)).unwrap();
    assert_eq!(t.iteration(), 1);
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = metrics
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1);
    for key in [
        "train/Bandit/success",
        "rollout/in_group_std",
        "actor/entropy_loss",
        "actor/grad_norm",
        "val-env/Bandit/success",
    ] {
        assert!(lines[0][key].is_number(), "missing {key} in {}", lines[0]);
    }
    // the rollout's sandbox counters reach metrics.jsonl: zeros for a native env
    for key in [
        "fuel_used",
        "instances",
        "plugin_errors",
        "http_denied",
        "log_dropped",
        "log_clipped",
    ] {
        assert_eq!(lines[0][format!("sandbox/{key}")], 0.0, "{key}");
    }
    assert!(run_dir.join("checkpoint/trainer_state.json").exists());
    assert!(
        run_dir
            .join("checkpoint/policy/adapter_model.safetensors")
            .exists()
    );
    drop(t); // its run-directory lock with it
    let mut t = build(2, true);
    assert_eq!(t.iteration(), 1);
    t.train(&mut reporters(&t)).unwrap();
    assert_eq!(t.iteration(), 2);
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let its: Vec<u64> = metrics
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["iteration"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(its, vec![1, 2]);
    // TensorBoard holds exactly the metrics of metrics.jsonl: every finite value once, at its
    // iteration, as f32 (two files: one per process)
    let mut tb: Vec<(String, i64, f32)> = event_files(&run_dir)
        .unwrap()
        .iter()
        .flat_map(|f| scalars(&read_events(f).unwrap()))
        .collect();
    tb.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    let mut want: Vec<(String, i64, f32)> = metrics
        .lines()
        .flat_map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let it = v["iteration"].as_i64().unwrap();
            v.as_object()
                .unwrap()
                .iter()
                .filter(|(k, _)| *k != "iteration")
                .map(|(k, x)| (k.clone(), it, x.as_f64().unwrap() as f32))
                .collect::<Vec<_>>()
        })
        .collect();
    want.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
    assert_eq!(event_files(&run_dir).unwrap().len(), 2);
    assert!(want.len() > 20, "{want:?}");
    assert_eq!(tb, want);

    // A resume refuses another env, and a checkpoint that was removed rather than never written.
    drop(t);
    let resume = |sha: &str, env: &'static str, set: &str| {
        let mut b = RunDir::open(&run_dir).unwrap().resume_config().unwrap();
        if !set.is_empty() {
            b = b.layer_override(set).unwrap();
        }
        let cfg = b.build().unwrap();
        let make = ragen_gym_builtins::find(env).unwrap().native.unwrap();
        Trainer::new(TrainSetup {
            config: cfg,
            make_env: Box::new(move || make("")),
            plugin_sha256: sha.into(),
            env_source: env.into(),
            reward_functions: vec![],
            run_dir: run_dir.clone(),
            resume: true,
            device: ragen_gym_policy::Device::Cpu,
        })
    };
    let refused = |sha: &str, env: &'static str| match resume(sha, env, "") {
        Ok(t) => format!("resumed at iteration {}", t.iteration()),
        Err(e) => format!("{e}"),
    };
    let files = || {
        [
            "config.toml",
            "metrics.jsonl",
            "trajectories.jsonl",
            "run.json",
        ]
        .map(|f| std::fs::read(run_dir.join(f)).unwrap())
    };
    // one process writes a run at a time: a second one is refused while the first lives
    let first = resume("native", "bandit", "").unwrap();
    let e = refused("native", "bandit");
    assert!(e.contains(".process.lock: held by another process"), "{e}");
    drop(first);
    // a resume may not change what the checkpoint trains (rank 2, alpha 4)
    for (set, want) in [
        (
            "model.lora_rank=4",
            "model.lora_rank = 4, but the checkpoint",
        ),
        (
            "model.lora_alpha=8.0",
            "model.lora_alpha = 8, but the checkpoint",
        ),
    ] {
        let e = resume("native", "bandit", set).err().unwrap().to_string();
        assert!(e.contains(want) && e.contains("trained with"), "{set}: {e}");
    }
    // a total below the iterations done would train nothing and record the smaller total
    let e = resume("native", "bandit", "trainer.total_training_steps=1")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("trainer.total_training_steps (1) is below the 2 iterations the run has done"),
        "{e}"
    );
    // a damaged line before the end of trajectories.jsonl is refused before any file changes
    let before = files();
    let trajectories = run_dir.join("trajectories.jsonl");
    let whole = String::from_utf8(before[2].clone()).unwrap();
    std::fs::write(&trajectories, format!("{{garbage\n{whole}")).unwrap();
    let damaged = files();
    let e = refused("native", "bandit");
    assert!(
        e.contains("trajectories.jsonl: line 1 is not JSON, yet whole lines follow it"),
        "{e}"
    );
    assert!(
        files() == damaged,
        "a refused resume changed the run's files"
    );
    std::fs::write(&trajectories, whole).unwrap();
    assert!(files() == before);
    let e = refused("other", "bandit");
    assert!(
        e.contains("run.json")
            && e.contains("sha256 native")
            && e.contains("(bandit) is ragen/Bandit-v0 (sha256 other)"),
        "{e}"
    );
    let e = refused("native", "frozenlake");
    assert!(
        e.contains("run.json")
            && e.contains("trained on ragen/Bandit-v0")
            && e.contains("is ragen/FrozenLake-v0"),
        "{e}"
    );
    let state = run_dir.join("checkpoint/trainer_state.json");
    std::fs::rename(&state, run_dir.join("trainer_state.json.away")).unwrap();
    let e = refused("native", "bandit");
    assert!(
        e.contains("checkpoint/trainer_state.json: missing from the checkpoint"),
        "{e}"
    );
    std::fs::rename(run_dir.join("trainer_state.json.away"), &state).unwrap();
    assert_eq!(refused("native", "bandit"), "resumed at iteration 2");
    // no checkpoint, yet metrics.jsonl records iteration 2, past the first one (save_freq 1)
    std::fs::rename(run_dir.join("checkpoint"), run_dir.join("checkpoint.away")).unwrap();
    let e = refused("native", "bandit");
    assert!(
        e.contains("checkpoint: missing, yet metrics.jsonl records iteration 2")
            && e.contains("checkpoint of iteration 1 (trainer.save_freq)"),
        "{e}"
    );
    // the run's own save_freq decides, not one the resume sets
    let e = resume("native", "bandit", "trainer.save_freq=10")
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("checkpoint of iteration 1 (trainer.save_freq)"),
        "{e}"
    );
    // a crash before the first checkpoint (only iteration 1 logged): the run starts again
    let first = metrics.lines().next().unwrap().to_string() + "\n";
    std::fs::write(run_dir.join("metrics.jsonl"), first).unwrap();
    assert_eq!(refused("native", "bandit"), "resumed at iteration 0");

    // a LoRA rank the model cannot take is the config key's error (SmolLM2-135M: k_proj maps
    // 576 to 3 KV heads x 64 = 192)
    let cfg = ConfigBuilder::new()
        .layer_preset(bandit_preset(), Profile::Full)
        .unwrap()
        .layer_override("model.lora_rank=4294967295")
        .unwrap()
        .build()
        .unwrap();
    let e = Trainer::new(TrainSetup {
        config: cfg,
        make_env: Box::new(|| native_bandit()("")),
        plugin_sha256: "native".into(),
        env_source: "bandit".into(),
        reward_functions: vec![],
        run_dir: dir.path().join("rank"),
        resume: false,
        device: ragen_gym_policy::Device::Cpu,
    })
    .err()
    .unwrap();
    assert!(
        matches!(e, ragen_gym_starpo::TrainError::Config(_))
            && e.to_string()
                .contains("model.lora_rank: 4294967295 is above 192, the smaller side of k_proj"),
        "{e}"
    );
}

fn ragen_gym_policy_path() -> std::path::PathBuf {
    ragen_gym_starpo::Config::default_config()
        .model
        .resolved_path()
}
