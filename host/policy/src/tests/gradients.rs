//! Gradients: every trainable tensor gets one, they match finite differences, and a few
//! optimiser steps lower the loss.

use super::*;

#[test]
fn every_trainable_tensor_gets_a_finite_nonzero_gradient() {
    for cfg in [tiny_cfg(), tiny_qwen_cfg()] {
        let loaded = tiny_loaded(cfg.clone(), 1);
        let policy = Policy::new(&loaded, Trainable::Full, 0).unwrap();
        let loss = nll(policy.model(), &tiny_batch());
        // Entropy must also backpropagate.
        let s = score(policy.model(), &tiny_batch()).unwrap();
        let loss = (loss + s.entropy.sum_all().unwrap().affine(0.01, 0.0).unwrap()).unwrap();
        let grads = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
        assert_eq!(policy.params().len(), loaded.weights.len());
        for (i, p) in policy.params().iter().enumerate() {
            let g = grads
                .get(i)
                .unwrap_or_else(|| panic!("{}: no gradient ({})", p.name, cfg.model_type));
            let a = g.abs().unwrap().sum_all().unwrap();
            let a = scalar(&a);
            assert!(a.is_finite() && a > 0.0, "{}: |grad| sum {a}", p.name);
        }
        // The critic: backbone + value head.
        let critic = Critic::new(&loaded, Trainable::Full, 0).unwrap();
        let v = critic.values(&tiny_batch()).unwrap();
        assert_eq!(v.dims(), &[2, 13]);
        let grads = ParamGrads::from_store(
            v.sqr().unwrap().sum_all().unwrap().backward().unwrap(),
            critic.params(),
        );
        for (i, p) in critic.params().iter().enumerate() {
            let g = grads
                .get(i)
                .unwrap_or_else(|| panic!("critic {}: no gradient ({})", p.name, cfg.model_type));
            let a = scalar(&g.abs().unwrap().sum_all().unwrap());
            assert!(a.is_finite() && a > 0.0, "critic {}: {a}", p.name);
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    let loaded = tiny_loaded(tiny_qwen_cfg(), 2);
    let policy = Policy::new(&loaded, Trainable::Full, 0).unwrap();
    let batch = tiny_batch();
    let loss = nll(policy.model(), &batch);
    let grads = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
    let names = [
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.bias",
        "model.layers.1.mlp.down_proj.weight",
        "model.layers.1.input_layernorm.weight",
        "lm_head.weight",
    ];
    let eps = 1e-2f32;
    for name in names {
        let i = policy.params().iter().position(|p| p.name == name).unwrap();
        let p = &policy.params()[i];
        let g: Vec<f32> = grads
            .get(i)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        // The element with the largest gradient, where f32 finite differences are meaningful.
        let k = (0..g.len())
            .max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs()))
            .unwrap();
        let orig: Vec<f32> = p.var.flatten_all().unwrap().to_vec1().unwrap();
        let at = |delta: f32| {
            let mut w = orig.clone();
            w[k] += delta;
            p.var
                .set(&Tensor::from_vec(w, p.var.shape(), &Device::Cpu).unwrap())
                .unwrap();
            scalar(&nll(&policy.sampler(), &batch))
        };
        let fd = (at(eps) - at(-eps)) / (2.0 * eps);
        p.var
            .set(&Tensor::from_vec(orig, p.var.shape(), &Device::Cpu).unwrap())
            .unwrap();
        let err = (fd - g[k]).abs();
        assert!(
            err <= 0.03 * g[k].abs() + 1e-3,
            "{name}[{k}]: analytic {} vs finite difference {fd}",
            g[k]
        );
    }
}

#[test]
fn loss_falls_on_a_fixed_batch() {
    let loaded = tiny_loaded(tiny_cfg(), 3);
    let policy = Policy::new(&loaded, Trainable::Full, 0).unwrap();
    let mut opt = adamw(policy.params(), 1e-2);
    let batch = tiny_batch();
    let mut losses = vec![];
    for _ in 0..6 {
        let loss = nll(policy.model(), &batch);
        losses.push(scalar(&loss));
        let mut g = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
        let norm = clip_grad_norm(&mut g, 1.0).unwrap();
        assert!(norm.is_finite() && norm > 0.0);
        opt.step(&g, 1e-2).unwrap();
    }
    assert!(losses[5] < losses[0] - 0.5, "losses {losses:?}");
    for w in losses.windows(2) {
        assert!(w[1] < w[0], "not decreasing: {losses:?}");
    }
}
