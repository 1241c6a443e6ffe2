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
