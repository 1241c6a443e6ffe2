//! The optimiser's helpers: gradient clipping and the learning-rate schedules.

use super::*;

#[test]
fn clip_returns_pre_clip_norm_and_scales_to_max() {
    let loaded = tiny_loaded(tiny_cfg(), 4);
    let policy = Policy::new(&loaded, Trainable::Full, 0).unwrap();
    let loss = nll(policy.model(), &tiny_batch())
        .affine(100.0, 0.0)
        .unwrap();
    let mut g = ParamGrads::from_store(loss.backward().unwrap(), policy.params());
    let before = g.global_norm().unwrap();
    let returned = clip_grad_norm(&mut g, 0.5).unwrap();
    assert_eq!(before, returned);
    assert!(before > 0.5);
    let after = g.global_norm().unwrap();
    assert!((after - 0.5).abs() < 1e-4, "after clipping: {after}");
}

#[test]
fn schedules_follow_hugging_face() {
    let s = LrSchedule::WarmupConstant {
        lr: 1.0,
        warmup_steps: 4,
    };
    assert_eq!(
        [0, 1, 2, 4, 9].map(|t| s.lr_at(t)),
        [0.0, 0.25, 0.5, 1.0, 1.0]
    );
    assert_eq!(LrSchedule::Constant { lr: 0.3 }.lr_at(7), 0.3);
    let c = LrSchedule::WarmupCosine {
        lr: 1.0,
        warmup_steps: 2,
        total_steps: 6,
    };
    assert!((c.lr_at(4) - 0.5).abs() < 1e-12);
    assert!(c.lr_at(6).abs() < 1e-12);
}
