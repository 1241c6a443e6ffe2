//! LoRA: base weights stay bit-identical and the frozen-weight matmul gives the plain
//! matmul's gradients.

use super::*;

#[test]
fn lora_keeps_base_weights_bit_identical_and_frozen_op_matches_plain_matmul() {
    let loaded = tiny_loaded(tiny_qwen_cfg(), 5);
    let lora = LoraConfig {
        rank: 4,
        alpha: 8.0,
        target_modules: vec!["q_proj".into(), "v_proj".into(), "down_proj".into()],
    };
    let policy = Policy::new(&loaded, Trainable::Lora(lora.clone()), 7).unwrap();
    assert_eq!(policy.params().len(), 2 * 3 * 2);
    // At initialisation B = 0: the adapted model equals the base.
    let base = loaded.frozen_model().unwrap();
    let batch = tiny_batch();
    assert!((scalar(&nll(&base, &batch)) - scalar(&nll(policy.model(), &batch))).abs() < 1e-6);
    let mut opt = adamw(policy.params(), 1e-2);
    for step in 0..3 {
        let loss = nll(policy.model(), &batch);
        let store = loss.backward().unwrap();
        let g = ParamGrads::from_store(store, policy.params());
        for (i, p) in policy.params().iter().enumerate() {
            let a = scalar(&g.get(i).unwrap().abs().unwrap().sum_all().unwrap());
            // A's gradient is B-weighted, so it is zero only before the first step.
            if step > 0 || p.name.contains("lora_B") {
                assert!(a.is_finite() && a > 0.0, "step {step} {}: {a}", p.name);
            }
        }
        opt.step(&g, 1e-2).unwrap();
    }
    // Base weights: bit-identical to the loaded ones; the reference policy equals the base.
    let after = policy.reference().unwrap().hf_weights().unwrap();
    for (name, w) in &loaded.weights {
        let a: Vec<f32> = w.flatten_all().unwrap().to_vec1().unwrap();
        let b: Vec<f32> = after[name].flatten_all().unwrap().to_vec1().unwrap();
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()),
            "{name} changed"
        );
    }
    assert!(scalar(&nll(policy.model(), &batch)) < scalar(&nll(&base, &batch)));
    // The frozen-weight matmul gives the same adapter gradients as a plain matmul.
    let lp = policy.model().clone();
    let loss_frozen = nll(&lp, &batch);
    let g_frozen = ParamGrads::from_store(loss_frozen.backward().unwrap(), policy.params());
    let plain = lp.with_frozen_base(false);
    let loss_plain = nll(&plain, &batch);
    let g_plain = ParamGrads::from_store(loss_plain.backward().unwrap(), policy.params());
    for i in 0..policy.params().len() {
        let d = max_abs(&(g_frozen.get(i).unwrap() - g_plain.get(i).unwrap()).unwrap());
        assert!(
            d < 1e-5,
            "{}: frozen vs plain grad differ by {d}",
            policy.params()[i].name
        );
    }
}

/// The rollout model of a LoRA policy merges each adapter into its base weight: its log-probs
/// equal the unmerged model's within 1e-5 (and differ from the base model's, so the adapters are
/// in), it holds no adapter, and it keeps the weights it was made with after an optimiser step.
#[test]
fn rollout_model_merges_lora_and_scores_as_the_unmerged_model() {
    for cfg in [tiny_cfg(), tiny_qwen_cfg()] {
        let loaded = tiny_loaded(cfg, 11);
        let lora = LoraConfig {
            rank: 4,
            alpha: 8.0,
            target_modules: vec![
                "q_proj".into(),
                "k_proj".into(),
                "v_proj".into(),
                "o_proj".into(),
                "gate_proj".into(),
                "up_proj".into(),
                "down_proj".into(),
            ],
        };
        let policy = Policy::new(&loaded, Trainable::Lora(lora), 7).unwrap();
        set_lora_b(&policy, |i| ((i % 7) as f32 - 3.0) * 0.05);
        let batch = tiny_batch();
        let lp = |m: &LlamaModel| score(m, &batch).unwrap().logprobs;
        let merged = policy.rollout_model().unwrap();
        assert!(
            merged
                .layers
                .iter()
                .all(|l| l.projections().iter().all(|p| p.lora.is_none())),
            "an adapter is left unmerged"
        );
        let unmerged = lp(policy.model());
        let d = max_abs(&(lp(&merged) - &unmerged).unwrap());
        assert!(d < 1e-5, "merged vs unmerged log-probs differ by {d}");
        let base = loaded.frozen_model().unwrap();
        let from_base = max_abs(&(lp(&base) - &unmerged).unwrap());
        assert!(from_base > 1e-3, "the adapters change nothing: {from_base}");
        // An optimiser step moves the policy, not the rollout model made before it.
        let before = lp(&merged);
        let mut opt = adamw(policy.params(), 1e-2);
        let g = ParamGrads::from_store(
            nll(policy.model(), &batch).backward().unwrap(),
            policy.params(),
        );
        opt.step(&g, 1e-2).unwrap();
        assert_eq!(max_abs(&(lp(&merged) - &before).unwrap()), 0.0);
        let moved = max_abs(&(lp(policy.model()) - &unmerged).unwrap());
        assert!(moved > 1e-4, "the step moved nothing: {moved}");
    }
}

/// A fully fine-tuned policy has no adapters: its rollout model holds copies of the trained
/// projections (stored for sampling, [`LlamaModel::for_sampling`]) and scores as the policy does,
/// up to float rounding; one made after an optimiser step scores as the stepped policy.
#[test]
fn rollout_model_of_a_full_policy_scores_as_the_policy() {
    let loaded = tiny_loaded(tiny_cfg(), 12);
    let policy = Policy::new(&loaded, Trainable::Full, 7).unwrap();
    let batch = tiny_batch();
    let lp = |m: &LlamaModel| score(m, &batch).unwrap().logprobs;
    let d = |a: &Tensor, b: &Tensor| max_abs(&(a - b).unwrap());
    let before = lp(policy.model());
    assert!(d(&lp(&policy.rollout_model().unwrap()), &before) < 1e-5);
    let mut opt = adamw(policy.params(), 1e-2);
    let g = ParamGrads::from_store(
        nll(policy.model(), &batch).backward().unwrap(),
        policy.params(),
    );
    opt.step(&g, 1e-2).unwrap();
    let after = lp(policy.model());
    assert!(d(&after, &before) > 1e-4, "the step moved nothing");
    assert!(d(&lp(&policy.rollout_model().unwrap()), &after) < 1e-5);
}

/// A LoRA rank past a projection's smaller side is refused by name before any adapter is
/// allocated (`lora_rank = 4294967295` aborted on the allocation), from a config and from a
/// checkpoint's `adapter_config.json` (then naming that file). The tiny model's smallest
/// projections are k_proj and v_proj: 32 in, 2 KV heads x head dim 8 = 16 out.
#[test]
fn a_lora_rank_past_a_projections_side_is_refused_by_name() {
    let loaded = tiny_loaded(tiny_cfg(), 3);
    let lora = |rank: usize| {
        Trainable::Lora(LoraConfig {
            rank,
            ..LoraConfig::default()
        })
    };
    assert!(Policy::new(&loaded, lora(16), 1).is_ok());
    for rank in [17, u32::MAX as usize] {
        let e = Policy::new(&loaded, lora(rank), 1)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("lora.rank")
                && e.contains(&format!("{rank} is above 16, the smaller side of k_proj")),
            "{e}"
        );
    }
    // the same from a checkpoint: r out of range names adapter_config.json
    let dir = tempfile::tempdir().unwrap();
    Policy::new(&loaded, lora(4), 1)
        .unwrap()
        .save_pretrained(dir.path())
        .unwrap();
    let cfg_path = dir.path().join("adapter_config.json");
    let text = std::fs::read_to_string(&cfg_path).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for (r, want) in [
        (0u64, "must be at least 1"),
        (1 << 32, "above 16, the smaller side of k_proj"),
    ] {
        v["r"] = r.into();
        std::fs::write(&cfg_path, v.to_string()).unwrap();
        let e = Policy::from_pretrained_on(dir.path(), 1, &Device::Cpu)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("adapter_config.json") && e.contains(want),
            "{r}: {e}"
        );
    }
}
