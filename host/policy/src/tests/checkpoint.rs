//! Checkpoints: a saved run resumes bit-identically, also across compute dtypes.

use super::*;

fn params_bits(p: &[NamedParam]) -> Vec<Vec<u32>> {
    p.iter()
        .map(|p| {
            p.var
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

fn train_steps(policy: &Policy, opt: &mut AdamW, n: usize) {
    for _ in 0..n {
        let loss = nll(policy.model(), &tiny_batch());
        let mut g = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
        clip_grad_norm(&mut g, 1.0).unwrap();
        opt.step(&g, 1e-3).unwrap();
    }
}

/// One critic step on the mean squared value over the tiny batch.
fn critic_step(critic: &Critic, opt: &mut AdamW, lr: f64) {
    let v = critic.values(&tiny_batch()).unwrap();
    let g = ParamGrads::from_store(
        v.sqr().unwrap().mean_all().unwrap().backward().unwrap(),
        critic.params(),
    );
    opt.step(&g, lr).unwrap();
}

/// Save the policy, the critic and both optimisers with `state` at `ckpt`.
fn save(
    ckpt: &std::path::Path,
    (policy, opt): (&Policy, &AdamW),
    (critic, copt): (&Critic, &AdamW),
    state: &serde_json::Value,
) {
    save_checkpoint(
        ckpt,
        &CheckpointParts {
            policy,
            policy_optimizer: Some(opt),
            critic: Some(critic),
            critic_optimizer: Some(copt),
            trainer_state: state,
        },
    )
    .unwrap();
}

/// The critic of a checkpoint, the way the trainer resumes it.
fn resume_critic(ckpt: &std::path::Path, trainable: &Trainable, seed: u64) -> Critic {
    let cl = load_on(&critic_dir(ckpt), &Device::Cpu).unwrap();
    let critic = Critic::new(&cl, trainable.clone(), seed).unwrap();
    critic.load_trainable(&critic_dir(ckpt)).unwrap();
    critic
}

#[test]
fn checkpoint_round_trip_continues_exactly() {
    for trainable in [
        Trainable::Full,
        Trainable::Lora(LoraConfig {
            rank: 2,
            alpha: 4.0,
            target_modules: vec!["q_proj".into(), "up_proj".into()],
        }),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = dir.path().join("ckpt");
        let loaded = tiny_loaded(tiny_qwen_cfg(), 6);
        let policy = Policy::new(&loaded, trainable.clone(), 1).unwrap();
        let mut opt = AdamW::new(policy.params(), AdamWConfig::default()).unwrap();
        train_steps(&policy, &mut opt, 2);
        let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(9);
        let _: u64 = rand::Rng::random(&mut rng);
        let state = serde_json::json!({ "iteration": 2, "rng": RngState::capture(&rng) });
        // A critic trained one step, saved alongside.
        let critic = Critic::new(&loaded, trainable.clone(), 2).unwrap();
        let mut copt = adamw(critic.params(), 1e-2);
        for _ in 0..2 {
            critic_step(&critic, &mut copt, 1e-2);
        }
        let values: Vec<Vec<f32>> = critic.values(&tiny_batch()).unwrap().to_vec2().unwrap();
        save(&ckpt, (&policy, &opt), (&critic, &copt), &state);
        // Saving again replaces atomically.
        save(&ckpt, (&policy, &opt), (&critic, &copt), &state);
        assert!(!dir.path().join("ckpt.tmp").exists() && !dir.path().join("ckpt.old").exists());
        train_steps(&policy, &mut opt, 2);
        let never_stopped = params_bits(policy.params());

        let resumed = Policy::from_pretrained(&policy_dir(&ckpt), 12345).unwrap();
        assert_eq!(resumed.trainable(), &trainable);
        let mut opt2 = AdamW::new(resumed.params(), AdamWConfig::default()).unwrap();
        opt2.load(&policy_dir(&ckpt)).unwrap();
        assert_eq!(opt2.step_count(), 2);
        train_steps(&resumed, &mut opt2, 2);
        assert_eq!(
            params_bits(resumed.params()),
            never_stopped,
            "{trainable:?}"
        );
        // The critic comes back the way the trainer resumes it.
        let critic2 = resume_critic(&ckpt, &trainable, 99);
        let mut copt2 = AdamW::new(critic2.params(), AdamWConfig::default()).unwrap();
        copt2.load(&critic_dir(&ckpt)).unwrap();
        assert_eq!(copt2.step_count(), 2);
        let values2: Vec<Vec<f32>> = critic2.values(&tiny_batch()).unwrap().to_vec2().unwrap();
        assert_eq!(values, values2, "{trainable:?}");
        let st = read_trainer_state(&ckpt).unwrap();
        let mut r2 = serde_json::from_value::<RngState>(st["rng"].clone())
            .unwrap()
            .restore()
            .unwrap();
        assert_eq!(
            rand::Rng::random::<u64>(&mut r2),
            rand::Rng::random::<u64>(&mut rng)
        );
    }
}

/// The values rounded to bf16 (round to nearest even, as candle converts), back in f32.
fn round_to_bf16(v: &[f32]) -> Vec<f32> {
    Tensor::new(v, &Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap()
        .to_vec1()
        .unwrap()
}

/// The CUDA configuration (bf16 compute, f32 master weights and optimiser state) run on the CPU:
/// an update smaller than bf16's resolution survives in the f32 masters; the checkpoint holds f32
/// tensors only and says so; it resumes in f32 (the CPU's dtype) with bit-identical weights and
/// moments, and in bf16 again with identical log-probs; bf16 and f32 log-probs agree to 0.05 nats.
#[test]
fn checkpoint_written_in_bf16_compute_resumes_in_f32_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let loaded = tiny_loaded(tiny_qwen_cfg(), 21);
    let policy = Policy::new(&loaded, Trainable::Full, 0)
        .unwrap()
        .with_compute_dtype(DType::BF16);
    assert_eq!(policy.model().compute_dtype(), DType::BF16);
    let critic = Critic::new(&loaded, Trainable::Full, 0)
        .unwrap()
        .with_compute_dtype(DType::BF16);
    let before = params_bits(policy.params());
    // verl's actor learning rate: 1e-6, far below a bf16 ulp of weights around 0.02 (1.2e-4).
    let mut opt = AdamW::new(policy.params(), AdamWConfig::default()).unwrap();
    let loss = nll(policy.model(), &tiny_batch());
    let g = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
    opt.step(&g, 1e-6).unwrap();
    let after = params_bits(policy.params());
    assert_update_kept_only_in_f32(&before, &after);
    let mut copt = AdamW::new(critic.params(), AdamWConfig::default()).unwrap();
    critic_step(&critic, &mut copt, 1e-3);
    let state = serde_json::json!({ "iteration": 1 });
    save(&ckpt, (&policy, &opt), (&critic, &copt), &state);
    assert_f32_on_disk(&ckpt);

    let resumed = Policy::from_pretrained_on(&policy_dir(&ckpt), 0, &Device::Cpu).unwrap();
    assert_eq!(resumed.model().compute_dtype(), DType::F32);
    assert_eq!(params_bits(resumed.params()), after);
    let mut opt2 = AdamW::new(resumed.params(), AdamWConfig::default()).unwrap();
    opt2.load(&policy_dir(&ckpt)).unwrap();
    // Same moments: one more identical step from both gives identical weights.
    let step = |p: &Policy, o: &mut AdamW| {
        let loss = nll(p.model(), &tiny_batch());
        let g = ParamGrads::from_store(loss.backward().unwrap(), p.params());
        o.step(&g, 1e-3).unwrap();
        params_bits(p.params())
    };
    let resumed_bf16 = Policy::from_pretrained_on(&policy_dir(&ckpt), 0, &Device::Cpu)
        .unwrap()
        .with_compute_dtype(DType::BF16);
    let lp = |m: &LlamaModel| -> Vec<Vec<f32>> {
        score(m, &tiny_batch()).unwrap().logprobs.to_vec2().unwrap()
    };
    assert_eq!(lp(resumed_bf16.model()), lp(policy.model()));
    let (f32_lp, bf16_lp) = (lp(resumed.model()), lp(policy.model()));
    let worst = f32_lp
        .iter()
        .flatten()
        .zip(bf16_lp.iter().flatten())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst > 0.0 && worst < 0.05,
        "bf16 vs f32 log-probs: {worst}"
    );
    let mut opt_bf16 = AdamW::new(resumed_bf16.params(), AdamWConfig::default()).unwrap();
    opt_bf16.load(&policy_dir(&ckpt)).unwrap();
    let mut opt_orig = opt;
    assert_eq!(
        step(&resumed_bf16, &mut opt_bf16),
        step(&policy, &mut opt_orig)
    );
    step(&resumed, &mut opt2);

    let critic2 = resume_critic(&ckpt, &Trainable::Full, 5);
    assert_eq!(params_bits(critic2.params()), params_bits(critic.params()));
}

/// An update (weights as bits, `before` and `after`) moved most weights, and nine in ten of the
/// moves are smaller than bf16's resolution: only f32 master weights keep them.
fn assert_update_kept_only_in_f32(before: &[Vec<u32>], after: &[Vec<u32>]) {
    let flat = |bits: &[Vec<u32>]| -> Vec<f32> {
        bits.iter().flatten().map(|b| f32::from_bits(*b)).collect()
    };
    let (b, a) = (flat(before), flat(after));
    let (b16, a16) = (round_to_bf16(&b), round_to_bf16(&a));
    let total = b.len();
    let moved = (0..total).filter(|&i| a[i] != b[i]).count();
    let lost_in_bf16 = (0..total)
        .filter(|&i| a[i] != b[i] && a16[i] == b16[i])
        .count();
    // Everything with a gradient moves (embedding rows of unused tokens do not).
    assert!(moved * 2 > total, "{moved} of {total} weights moved");
    assert!(
        lost_in_bf16 * 10 > moved * 9,
        "a bf16 master copy would keep {} of {moved} updates",
        moved - lost_in_bf16
    );
}

/// Every weight and optimiser tensor of the checkpoint's policy and critic is f32, and their
/// configs say `float32`.
fn assert_f32_on_disk(ckpt: &std::path::Path) {
    for sub in [policy_dir(ckpt), critic_dir(ckpt)] {
        for file in ["model.safetensors", "optimizer.safetensors"] {
            let tensors = candle_core::safetensors::load(sub.join(file), &Device::Cpu).unwrap();
            for (name, t) in &tensors {
                assert_eq!(t.dtype(), DType::F32, "{file} {name}");
            }
        }
        let cfg: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(sub.join("config.json")).unwrap())
                .unwrap();
        assert_eq!(cfg["torch_dtype"], "float32");
    }
}
