//! Activation (gradient) checkpointing of decoder layers (Chen et al. 2016, arXiv 1604.06174;
//! Hugging Face's `gradient_checkpointing_enable`).
//!
//! A checkpointed layer is one graph node on `(x, packed)`, where `packed` is the concatenation
//! of the layer's trainable tensors (all of them for full fine-tuning, the LoRA adapters
//! otherwise). The forward runs the layer without recording a graph, so only `x` (and the small
//! `packed`) stay alive until the backward. The backward runs the layer again from `x` with a
//! graph on fresh copies of `x` and of the trainable tensors, backpropagates the incoming
//! gradient through it, and hands candle `dx` and the packed parameter gradients, which the
//! `cat` node splits back onto each parameter. The recomputation uses the same ops in the same
//! order, so the gradients equal the un-checkpointed ones.

use std::sync::Mutex;

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor, Var};

use crate::model::{AttentionMask, LlamaModel};
use crate::{PolicyError, Result};

struct Checkpoint {
    model: LlamaModel,
    layer: usize,
    mask: AttentionMask,
    /// Indices (into `DecoderLayer::tensors_mut`) of the trainable tensors packed into arg 2.
    trainable: Vec<usize>,
    /// The layer's output, computed without a graph before the node is made; taken by the
    /// forward.
    result: Mutex<Option<Tensor>>,
}

impl CustomOp2 for Checkpoint {
    fn name(&self) -> &'static str {
        "checkpointed-layer"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = self
            .result
            .lock()
            .map_err(|_| candle_core::Error::Msg("checkpointed-layer: poisoned lock".into()))?
            .take()
            .ok_or_else(|| {
                candle_core::Error::Msg("checkpointed-layer: forward ran twice".into())
            })?;
        let v: Vec<f32> = y.flatten_all()?.to_vec1()?;
        Ok((CpuStorage::F32(v), y.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        _packed: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let err = |e: PolicyError| candle_core::Error::Msg(format!("checkpointed-layer: {e}"));
        let mut layer = self.model.layer(self.layer).clone();
        let xv = Var::from_tensor(&x.detach())?;
        let mut vars = Vec::with_capacity(self.trainable.len());
        {
            let mut tensors = layer.tensors_mut();
            for &i in &self.trainable {
                let v = Var::from_tensor(&tensors[i].detach())?;
                *tensors[i] = v.as_tensor().clone();
                vars.push(v);
            }
        }
        let y = self
            .model
            .layer_forward(&layer, xv.as_tensor(), &self.mask, None)
            .map_err(err)?;
        let grads = (y * g)?.sum_all()?.backward()?;
        let dx = grads.get(xv.as_tensor()).cloned();
        let mut flat = Vec::with_capacity(vars.len());
        for v in &vars {
            let t = match grads.get(v.as_tensor()) {
                Some(gr) => gr.flatten_all()?,
                None => Tensor::zeros(v.elem_count(), DType::F32, v.device())?,
            };
            flat.push(t);
        }
        let dpacked = if flat.is_empty() {
            None
        } else {
            Some(Tensor::cat(&flat, 0)?)
        };
        Ok((dx, dpacked))
    }
}

/// Layer `i` of `model` on `x` as a checkpointed node (see the module docs). Falls back to the
/// plain layer when nothing in it needs a gradient (sampling, a frozen reference).
pub(crate) fn checkpointed_layer(
    model: &LlamaModel,
    i: usize,
    x: &Tensor,
    mask: &AttentionMask,
) -> Result<Tensor> {
    let mut layer = model.layer(i).clone();
    let tensors = layer.tensors_mut();
    let trainable: Vec<usize> = (0..tensors.len())
        .filter(|&k| tensors[k].is_variable())
        .collect();
    if trainable.is_empty() && !x.track_op() {
        return model.layer_forward(model.layer(i), x, mask, None);
    }
    let mut flat = Vec::with_capacity(trainable.len() + 1);
    for &k in &trainable {
        flat.push(tensors[k].to_dtype(DType::F32)?.flatten_all()?);
    }
    if flat.is_empty() {
        // Nothing trainable in the layer: a 1-element constant keeps the node's arity.
        flat.push(Tensor::zeros(1, DType::F32, x.device())?);
    }
    let packed = Tensor::cat(&flat, 0)?;
    // The output without a graph: detached input, detached layer.
    let y = {
        let mut detached = model.layer(i).clone();
        for t in detached.tensors_mut() {
            *t = t.detach();
        }
        model.layer_forward(&detached, &x.detach(), mask, None)?
    };
    Ok(x.contiguous()?.apply_op2(
        &packed,
        Checkpoint {
            model: model.clone(),
            layer: i,
            mask: mask.clone(),
            trainable,
            result: Mutex::new(Some(y)),
        },
    )?)
}
