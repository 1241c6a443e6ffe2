//! The FLOP counters of `crate::flops` see every forward, split by whether it records a graph.

use std::collections::HashMap;

use candle_core::{Device, Tensor, Var};

use super::{tiny_cfg, tiny_loaded};
use crate::flops::{FlopCount, head_flops, layer_flops};
use crate::{AttentionMask, LlamaModel, ModelParts};

#[test]
fn a_forward_adds_its_layers_and_head_to_the_inference_counter() {
    let cfg = tiny_cfg();
    let model = tiny_loaded(cfg.clone(), 3).frozen_model().unwrap();
    assert!(!model.records_graph());
    let ids = Tensor::new(&[[1u32, 2, 3, 4, 5], [6, 7, 8, 9, 10]], &Device::Cpu).unwrap();
    let mask = AttentionMask::new(&[vec![true; 5], vec![true; 5]], 5, &cfg, &Device::Cpu).unwrap();
    let before = FlopCount::now();
    let h = model.forward_hidden(&ids, &mask, None).unwrap();
    model
        .lm_logits(&h.narrow(1, 4, 1).unwrap().squeeze(1).unwrap())
        .unwrap();
    let counted = FlopCount::now().since(before);
    // 10 tokens over 5 keys, then the head on 2 rows. Other tests run beside this one and add to
    // the same process-wide counters, so this one's share is a lower bound of the difference.
    let expected = layer_flops(&cfg, 10, 5) + head_flops(&cfg, 2);
    assert!(counted.inference >= expected, "{counted:?} < {expected}");
}

#[test]
fn a_model_with_variables_counts_as_training() {
    let cfg = tiny_cfg();
    let loaded = tiny_loaded(cfg.clone(), 4);
    let vars: HashMap<String, Tensor> = loaded
        .weights
        .iter()
        .map(|(k, t)| (k.clone(), Var::from_tensor(t).unwrap().as_tensor().clone()))
        .collect();
    let model = LlamaModel::new(
        &cfg,
        &ModelParts {
            weights: &vars,
            adapters: &HashMap::new(),
            frozen_base: false,
        },
    )
    .unwrap();
    assert!(model.records_graph());
    assert!(!model.detached().records_graph());
}
