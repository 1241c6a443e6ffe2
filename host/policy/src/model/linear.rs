//! A linear projection with optional bias and LoRA adapter, and [`ModelParts`], where
//! [`super::LlamaModel::new`] takes its tensors from (by Hugging Face name).

use std::collections::HashMap;

use candle_core::Tensor;

use crate::lora::{LoraAdapter, frozen_matmul, lora_matmul, supports_fused_ops};
use crate::{PolicyError, Result};

/// Named weight tensors with Hugging Face names (`model.layers.0.self_attn.q_proj.weight`, ...).
pub type Weights = HashMap<String, Tensor>;

/// A linear projection `y = x Wᵀ (+ b) (+ scale · x Aᵀ Bᵀ)`.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    /// [out, in]
    pub(crate) weight: Tensor,
    /// [out]
    pub(crate) bias: Option<Tensor>,
    pub(crate) lora: Option<LoraAdapter>,
    /// The base weight is constant: use the frozen matmul so its gradient is never computed.
    pub(crate) frozen_base: bool,
}

impl Linear {
    /// x: [..., in] -> [..., out]
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dims = x.dims().to_vec();
        let in_dim = *dims
            .last()
            .ok_or_else(|| PolicyError::arg("x", "scalar input to linear"))?;
        let n = x.elem_count() / in_dim;
        let x2 = x.reshape((n, in_dim))?;
        let w = self.weight.to_dtype(x.dtype())?;
        let adapters = self
            .lora
            .as_ref()
            .map(|l| {
                Ok::<_, PolicyError>((l.a.to_dtype(x.dtype())?, l.b.to_dtype(x.dtype())?, l.scale))
            })
            .transpose()?;
        let mut y = match &adapters {
            // Frozen base + adapters in a training graph: one fused node (CPU and CUDA).
            Some((a, b, scale))
                if self.frozen_base
                    && supports_fused_ops(x2.device())
                    && (x2.track_op() || a.track_op() || b.track_op()) =>
            {
                lora_matmul(&x2, &w, a, b, *scale)?
            }
            _ => {
                let mut y = if self.frozen_base && x2.track_op() {
                    frozen_matmul(&x2, &w)?
                } else {
                    x2.matmul(&w.t()?)?
                };
                if let Some((a, b, scale)) = &adapters {
                    let delta = x2.matmul(&a.t()?)?.matmul(&b.t()?)?.affine(*scale, 0.0)?;
                    y = (y + delta)?;
                }
                y
            }
        };
        if let Some(b) = &self.bias {
            y = y.broadcast_add(&b.to_dtype(y.dtype())?)?;
        }
        let mut out_dims = dims;
        *out_dims.last_mut().unwrap() = self.weight.dim(0)?;
        Ok(y.reshape(out_dims)?)
    }

    pub(super) fn map(&self, f: &impl Fn(&Tensor) -> Result<Tensor>) -> Result<Self> {
        Ok(Self {
            weight: f(&self.weight)?,
            bias: self.bias.as_ref().map(f).transpose()?,
            lora: match &self.lora {
                Some(l) => Some(LoraAdapter {
                    a: f(&l.a)?,
                    b: f(&l.b)?,
                    scale: l.scale,
                }),
                None => None,
            },
            frozen_base: self.frozen_base,
        })
    }

    /// The same projection for sampling ([`super::LlamaModel::for_sampling`]): the merged weight
    /// in [`Layout::ColumnMajor`], with no adapter.
    pub(super) fn column_major(&self) -> Result<Self> {
        Ok(Self {
            weight: self.merged_weight(Layout::ColumnMajor)?,
            bias: self.bias.clone(),
            lora: None,
            frozen_base: self.frozen_base,
        })
    }

    /// The merged weight `W + scale · B A`, shape [out, in], detached, stored as `layout` says.
    /// Without an adapter, [`Layout::RowMajor`] shares `W`'s storage.
    pub(super) fn merged_weight(&self, layout: Layout) -> Result<Tensor> {
        let w = self.weight.detach();
        match layout {
            Layout::RowMajor => match &self.lora {
                None => Ok(w),
                Some(l) => Ok((w + l.b.detach().matmul(&l.a.detach())?.affine(l.scale, 0.0)?)?),
            },
            Layout::ColumnMajor => {
                let wt = w.t()?;
                let wt = match &self.lora {
                    None => wt.contiguous()?,
                    Some(l) => {
                        let delta = l.a.detach().t()?.matmul(&l.b.detach().t()?)?;
                        (wt + delta.affine(l.scale, 0.0)?)?
                    }
                };
                Ok(wt.t()?)
            }
        }
    }
}

/// How [`Linear::merged_weight`] stores its [out, in] result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Row by row: the weight a Hugging Face checkpoint holds, and the one training reads.
    RowMajor,
    /// The transpose view of a contiguous [in, out] buffer, `Wᵀ + scale · Aᵀ Bᵀ` computed as
    /// such: the right-hand side the `gemm` crate reads in place at a decode step
    /// ([`super::LlamaModel::for_sampling`] says why).
    ColumnMajor,
}

/// Where [`LlamaModel::new`] takes its tensors from.
pub struct ModelParts<'a> {
    /// Base weights by Hugging Face name; Var-backed tensors train, plain tensors stay constant.
    pub weights: &'a Weights,
    /// LoRA adapters keyed by module path (`model.layers.0.self_attn.q_proj`).
    pub adapters: &'a HashMap<String, LoraAdapter>,
    /// Whether base weights are constants (LoRA, reference policy): enables the frozen matmul.
    pub frozen_base: bool,
}

impl ModelParts<'_> {
    pub(super) fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let t = self
            .weights
            .get(name)
            .ok_or_else(|| PolicyError::MissingTensor {
                name: name.to_string(),
            })?;
        if t.dims() != shape {
            return Err(PolicyError::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                found: t.dims().to_vec(),
            });
        }
        Ok(t.clone())
    }

    pub(super) fn linear(
        &self,
        path: &str,
        in_dim: usize,
        out_dim: usize,
        bias: bool,
    ) -> Result<Linear> {
        Ok(Linear {
            weight: self.get(&format!("{path}.weight"), &[out_dim, in_dim])?,
            bias: if bias {
                Some(self.get(&format!("{path}.bias"), &[out_dim])?)
            } else {
                None
            },
            lora: self.adapters.get(path).cloned(),
            frozen_base: self.frozen_base,
        })
    }
}
