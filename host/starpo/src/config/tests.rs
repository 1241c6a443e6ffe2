//! The config's tests: RAGEN's defaults, the layer order, strictness, the shipped files.

use super::*;

#[test]
fn default_has_ragen_values() {
    let c = Config::default_config();
    assert_eq!(c.es_manager.train.env_groups, 8);
    assert_eq!(c.es_manager.train.group_size, 16);
    assert_eq!(c.train_batch_size(), 128);
    assert_eq!(c.rollout.rollout_filter_ratio, 0.25);
    assert_eq!(c.actor.clip_ratio_high, 0.28);
    assert_eq!(c.actor.clip_ratio_c, 3.0);
    assert_eq!(c.algorithm.adv_estimator, AdvEstimator::Gae);
    assert_eq!(c.seed.train, 10000);
    assert_eq!(c.seed.val, 123);
    assert_eq!(c.rollout.max_model_len, 3600);
}

#[test]
fn every_key_in_default_is_commented() {
    // Each `key = value` line must be preceded by a comment line.
    let lines: Vec<&str> = DEFAULT_TOML.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let l = l.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with('[') {
            continue;
        }
        assert!(
            lines[i - 1].trim().starts_with('#'),
            "key line {} has no comment: {l}",
            i + 1
        );
    }
}

#[test]
fn layers_apply_in_order() {
    let c = ConfigBuilder::new()
        .layer_str(
            "[actor]\nclip_ratio_high = 0.2\n[rollout]\nrollout_filter_ratio = 1.0",
            "exp.toml",
        )
        .unwrap()
        .layer_env([
            (
                "RAGEN_ACTOR__CLIP_RATIO_HIGH".to_string(),
                "0.3".to_string(),
            ),
            ("RAGEN_LOG".into(), "x".into()),
        ])
        .unwrap()
        .layer_override("algorithm.adv_estimator=grpo")
        .unwrap()
        .layer_override("env.config={\"a\":1}")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(c.actor.clip_ratio_high, 0.3);
    assert_eq!(c.rollout.rollout_filter_ratio, 1.0);
    assert_eq!(c.algorithm.adv_estimator, AdvEstimator::Grpo);
    assert_eq!(c.env.config, "{\"a\":1}");
}

#[test]
fn for_env_and_user_layers_follow_the_recipe() {
    let preset = EnvPreset {
        name: "bandit",
        toml: include_str!("../../../../configs/bandit.toml"),
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("exp.toml");
    std::fs::write(&file, "[actor]\nppo_epochs = 3\nclip_ratio_high = 0.25\n").unwrap();
    let c = ConfigBuilder::for_env(Some(preset), Profile::Cpu)
        .unwrap()
        .user_layers(
            Some(&file),
            [("RAGEN_ACTOR__PPO_EPOCHS".to_string(), "4".to_string())],
            &["actor.clip_ratio_high=0.3".to_string()],
        )
        .unwrap()
        .set_str("env.config", r#"{"name": "it's \"quoted\""}"#, "--config")
        .unwrap()
        .build()
        .unwrap();
    // the CPU profile and the preset are below, the file below the variable, --set on top
    let cpu = ConfigBuilder::new()
        .layer_str(CPU_PROFILE_TOML, "cpu")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(c.es_manager.train, cpu.es_manager.train);
    assert_eq!(c.agent_proxy.max_turn, 1, "the bandit preset");
    assert_eq!(c.actor.ppo_epochs, 4);
    assert_eq!(c.actor.clip_ratio_high, 0.3);
    assert_eq!(c.env.config, r#"{"name": "it's \"quoted\""}"#);
    let full = ConfigBuilder::for_env(None, Profile::Full)
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(full, Config::default_config());
    assert_eq!(full.live_env_instances(), 128 + 256 + 16);
}

#[test]
fn a_presets_cpu_tables_apply_on_the_cpu_profile_only() {
    let preset = EnvPreset {
        name: "toy",
        toml: "[actor]\nactor_lr = 3e-5\n[cpu.actor]\nactor_lr = 7e-4\n\
               [cpu.trainer]\ntotal_training_steps = 9\n",
    };
    let build = |profile| {
        ConfigBuilder::for_env(Some(preset), profile)
            .unwrap()
            .build()
            .unwrap()
    };
    let cpu = build(Profile::Cpu);
    assert_eq!(
        (cpu.actor.actor_lr, cpu.trainer.total_training_steps),
        (7e-4, 9)
    );
    let full = build(Profile::Full);
    assert_eq!(
        (full.actor.actor_lr, full.trainer.total_training_steps),
        (3e-5, 200)
    );
    // the CPU tables are checked on every profile; a bad one names the preset and the key
    for profile in [Profile::Cpu, Profile::Full] {
        let bad = EnvPreset {
            name: "toy",
            toml: "[cpu.actor]\nactor_rl = 1e-4\n",
        };
        let e = ConfigBuilder::for_env(Some(bad), profile)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "unknown config key `actor.actor_rl` in the [cpu] tables of the toy preset"
        );
    }
    let e = ConfigBuilder::for_env(
        Some(EnvPreset {
            name: "toy",
            toml: "cpu = 1\n",
        }),
        Profile::Cpu,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("the toy preset") && e.contains("`cpu`"), "{e}");
}

#[test]
fn unknown_key_names_key_and_file() {
    let e = ConfigBuilder::new()
        .layer_str("[actor]\nclip_ratio_hgh = 0.2", "exp.toml")
        .unwrap_err()
        .to_string();
    assert_eq!(e, "unknown config key `actor.clip_ratio_hgh` in exp.toml");
    let e = ConfigBuilder::new()
        .layer_override("rollout.nope=1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("rollout.nope"), "{e}");
    let e = ConfigBuilder::new()
        .layer_override("algorithm.adv_estimator=ppo")
        .unwrap()
        .build()
        .unwrap_err();
    assert!(
        e.to_string().contains("adv_estimator") || e.to_string().contains("ppo"),
        "{e}"
    );
}

#[test]
fn the_think_budget_needs_constrained_thinking() {
    let build = |layer: &str| {
        ConfigBuilder::new()
            .layer_str(layer, "exp.toml")
            .unwrap()
            .build()
    };
    let e = build("[rollout]\nmax_think_tokens = 20\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rollout.max_think_tokens") && e.contains("rollout.constrained_actions"),
        "{e}"
    );
    let e = build(
        "[rollout]\nmax_think_tokens = 20\nconstrained_actions = true\n\
         [agent_proxy]\nenable_think = false\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("agent_proxy.enable_think"), "{e}");
    let c = build("[rollout]\nmax_think_tokens = 20\nconstrained_actions = true\n").unwrap();
    assert_eq!(c.rollout.max_think_tokens, 20);
    // off in the default (RAGEN samples freely)
    assert!(!Config::default_config().rollout.constrained_actions);
}

#[test]
fn min_actions_needs_constrained_decoding_and_fits_the_turn() {
    let build = |layer: &str| {
        ConfigBuilder::new()
            .layer_str(layer, "exp.toml")
            .unwrap()
            .build()
    };
    // 1 by default: RAGEN's freedom to stop after any name.
    assert_eq!(Config::default_config().rollout.constrained_min_actions, 1);
    let e = build("[rollout]\nconstrained_min_actions = 5\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("rollout.constrained_min_actions = 5 needs rollout.constrained_actions = true"),
        "{e}"
    );
    for (min, max) in [(0, 5), (6, 5), (3, 2)] {
        let e = build(&format!(
            "[rollout]\nconstrained_actions = true\nconstrained_min_actions = {min}\n\
             [agent_proxy]\nmax_actions_per_turn = {max}\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!(
                "rollout.constrained_min_actions = {min} must be in \
                 1..=agent_proxy.max_actions_per_turn ({max})"
            )),
            "{e}"
        );
    }
    let c = build("[rollout]\nconstrained_actions = true\nconstrained_min_actions = 5\n").unwrap();
    assert_eq!(c.rollout.constrained_min_actions, 5);
}

#[test]
fn branching_names_the_field_it_rejects() {
    let build = |layer: &str| {
        ConfigBuilder::new()
            .layer_str(layer, "exp.toml")
            .unwrap()
            .build()
    };
    // off by default
    assert!(!Config::default_config().rollout.branch.is_on());
    let err = |layer: &str| build(layer).unwrap_err().to_string();
    let e = err("[rollout.branch]\nafter_turns = [1]\n");
    assert!(e.contains("rollout.branch.count must be >= 1"), "{e}");
    let e = err("[rollout.branch]\ncount = 2\n");
    assert!(
        e.contains("rollout.branch.count = 2") && e.contains("after_turns"),
        "{e}"
    );
    // the default max_turn is 5 (RAGEN): a fork after 5 turns leaves none to play
    let e = err("[rollout.branch]\nafter_turns = [1, 5]\ncount = 2\n");
    assert!(
        e.contains("rollout.branch.after_turns: 5") && e.contains("agent_proxy.max_turn = 5"),
        "{e}"
    );
    let e = err("[rollout.branch]\nafter_turns = [0]\ncount = 2\n");
    assert!(e.contains("rollout.branch.after_turns: 0"), "{e}");
    let c = build("[rollout.branch]\nafter_turns = [1, 4]\ncount = 3\n").unwrap();
    assert!(c.rollout.branch.is_on());
    assert_eq!(
        c.rollout.branch,
        BranchConfig {
            after_turns: vec![1, 4],
            count: 3
        }
    );
}

#[test]
fn shipped_files_are_valid() {
    for (name, text) in [
        ("cpu.toml", CPU_PROFILE_TOML),
        (
            "starpo-ppo.toml",
            include_str!("../../../../configs/starpo-ppo.toml"),
        ),
        (
            "starpo-grpo.toml",
            include_str!("../../../../configs/starpo-grpo.toml"),
        ),
        (
            "starpo-s.toml",
            include_str!("../../../../configs/starpo-s.toml"),
        ),
    ] {
        ConfigBuilder::new()
            .layer_str(text, name)
            .unwrap()
            .build()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}

#[test]
fn huge_numbers_in_any_key_are_errors_or_configs_never_panics() {
    // every integer and float key of the default config, set to values at the edge of its type
    let keys = numeric_keys();
    assert!(keys.len() > 30, "{} numeric keys", keys.len());
    let ints = [
        "9223372036854775807",
        "4611686018427387648",
        "4294967296",
        "-1",
    ];
    let floats = ["1e308", "-1e308", "inf", "nan", "5e-324"];
    let mut errors = 0;
    for (key, is_int) in &keys {
        for v in if *is_int { &ints[..] } else { &floats[..] } {
            let built = ConfigBuilder::new()
                .layer_override(&format!("{key}={v}"))
                .and_then(ConfigBuilder::build);
            if let Err(e) = built {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
    }
    assert!(errors > 0);
    // the case the config proptest found: one group of 2^62 members
    let e = ConfigBuilder::new()
        .layer_override("es_manager.train.group_size=4611686018427387648")
        .and_then(ConfigBuilder::build)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("es_manager.train.env_groups * group_size (8 x 4611686018427387648)")
            && e.contains("cap of 1048576"),
        "{e}"
    );
    let e = ConfigBuilder::new()
        .layer_override("es_manager.val.env_groups=2000000")
        .and_then(ConfigBuilder::build)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("es_manager.val.env_groups * group_size (2000000 x"),
        "{e}"
    );
    // the cap itself is a config
    let c = ConfigBuilder::new()
        .layer_override("es_manager.train.env_groups=65536")
        .and_then(ConfigBuilder::build)
        .unwrap();
    assert_eq!(c.train_batch_size(), 65536 * 16);
}

#[test]
fn every_float_key_refuses_nan_and_infinity_by_name() {
    // TOML and --set accept nan and inf; a NaN learning rate trained every weight to NaN and the
    // run exited 0. Every float key of the default config is refused with its dotted name.
    let keys: Vec<String> = numeric_keys()
        .into_iter()
        .filter_map(|(key, is_int)| (!is_int).then_some(key))
        .collect();
    assert!(keys.len() > 20, "{} float keys", keys.len());
    for key in &keys {
        for (v, shown) in [("nan", "NaN"), ("inf", "inf"), ("-inf", "-inf")] {
            let e = ConfigBuilder::new()
                .layer_override(&format!("{key}={v}"))
                .and_then(ConfigBuilder::build)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(&format!("{key} must be a finite number, got {shown}")),
                "{key}={v}: {e}"
            );
        }
    }
}

#[test]
fn sampling_rates_and_discounts_out_of_range_are_refused_by_name() {
    let build = |o: &str| {
        ConfigBuilder::new()
            .layer_override(o)
            .and_then(ConfigBuilder::build)
    };
    for (o, want) in [
        (
            "rollout.temperature=-1",
            "rollout.temperature must be >= 0, got -1",
        ),
        (
            "rollout.val_temperature=-0.5",
            "rollout.val_temperature must be >= 0, got -0.5",
        ),
        ("rollout.top_p=0", "rollout.top_p must be in (0, 1], got 0"),
        (
            "rollout.top_p=1.5",
            "rollout.top_p must be in (0, 1], got 1.5",
        ),
        (
            "actor.actor_lr=-1e-4",
            "actor.actor_lr must be >= 0, got -0.0001",
        ),
        (
            "critic.critic_lr=-1",
            "critic.critic_lr must be >= 0, got -1",
        ),
        (
            "actor.weight_decay=-0.1",
            "actor.weight_decay must be >= 0, got -0.1",
        ),
        (
            "algorithm.gamma=1.5",
            "algorithm.gamma must be in [0, 1], got 1.5",
        ),
        (
            "algorithm.lam=-0.1",
            "algorithm.lam must be in [0, 1], got -0.1",
        ),
        (
            "rollout.rollout_filter_ratio=0",
            "rollout.rollout_filter_ratio must be in (0, 1], got 0",
        ),
        (
            "failure.max_failure_rate=1.5",
            "failure.max_failure_rate must be in (0, 1], got 1.5",
        ),
        (
            "actor.lr_warmup_steps_ratio=2",
            "actor.lr_warmup_steps_ratio must be in [0, 1], got 2",
        ),
        (
            "critic.lr_warmup_steps_ratio=-0.5",
            "critic.lr_warmup_steps_ratio must be in [0, 1], got -0.5",
        ),
        (
            "rollout.max_model_len=0",
            "rollout.max_model_len must be positive",
        ),
        (
            "rollout.response_length=4294967295",
            "rollout.response_length (4294967295) must be at most rollout.max_model_len (3600)",
        ),
    ] {
        let e = build(o).unwrap_err().to_string();
        assert!(e.contains(want), "{o}: {e}");
    }
    // the edges are accepted: greedy sampling, top-p 1, no decay, gamma 0 and 1
    for o in [
        "rollout.temperature=0",
        "rollout.top_p=1",
        "actor.weight_decay=0",
        "algorithm.gamma=0",
        "algorithm.lam=1",
    ] {
        build(o).unwrap_or_else(|e| panic!("{o}: {e}"));
    }
}

/// Every integer (`true`) and float (`false`) key of the default config, by dotted name.
fn numeric_keys() -> Vec<(String, bool)> {
    default_leaves()
        .into_iter()
        .filter_map(|(key, v)| match v {
            toml::Value::Integer(_) => Some((key, true)),
            toml::Value::Float(_) => Some((key, false)),
            _ => None,
        })
        .collect()
}

/// An error chain (each cause's message after the one before, as the CLI prints it) names the OS
/// error once: "failed to read config file F: No such file or directory (os error 2)" printed it
/// twice, in the message and again as the cause.
#[test]
fn a_missing_config_file_names_its_os_error_once() {
    let missing = "/nonexistent/ragen-gym/layer.toml";
    let Err(e) = ConfigBuilder::new().layer_file(std::path::Path::new(missing)) else {
        panic!("a missing file is an error");
    };
    let mut chain = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        chain.push_str(&format!(": {c}"));
        cause = c.source();
    }
    let os = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
    assert!(
        chain.starts_with(&format!("failed to read config file {missing}")),
        "{chain}"
    );
    assert_eq!(chain.matches("os error 2").count(), 1, "{chain} ({os})");
}
