//! LoRA (Hu et al. 2021, arXiv 2106.09685): `W x + (alpha / r) · B A x` with `A` random, `B` zero,
//! and a frozen-weight matmul whose backward computes only the input gradient.

use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Shape, Tensor};
use serde::{Deserialize, Serialize};

use crate::config::PROJECTIONS;
use crate::{PolicyError, Result};

/// Which projections get LoRA adapters and how large they are (PEFT's `LoraConfig` fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank r of the update.
    pub rank: usize,
    /// Scaling numerator: the update is multiplied by `alpha / rank`.
    pub alpha: f64,
    /// Module names as in Hugging Face checkpoints: any of `q_proj`, `k_proj`, `v_proj`,
    /// `o_proj`, `gate_proj`, `up_proj`, `down_proj`.
    pub target_modules: Vec<String>,
}

impl Default for LoraConfig {
    /// r = 8, alpha = 16 on every attention and MLP projection.
    fn default() -> Self {
        Self {
            rank: 8,
            alpha: 16.0,
            target_modules: ALL_MODULES.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// Every projection name LoRA can target: `q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`,
/// `up_proj`, `down_proj` (the decoder layer's projections, in its order).
pub const ALL_MODULES: [&str; 7] = {
    let mut names = [""; 7];
    let mut i = 0;
    while i < names.len() {
        names[i] = PROJECTIONS[i].1;
        i += 1;
    }
    names
};

impl LoraConfig {
    /// The `alpha / rank` multiplier.
    pub fn scale(&self) -> f64 {
        self.alpha / self.rank as f64
    }

    /// Check rank and module names.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] naming the bad field.
    pub fn validate(&self) -> Result<()> {
        if self.rank == 0 {
            return Err(PolicyError::arg("lora.rank", "must be at least 1"));
        }
        if self.target_modules.is_empty() {
            return Err(PolicyError::arg("lora.target_modules", "must not be empty"));
        }
        for m in &self.target_modules {
            if !ALL_MODULES.contains(&m.as_str()) {
                return Err(PolicyError::arg(
                    "lora.target_modules",
                    format!("unknown module {m:?}; expected one of {ALL_MODULES:?}"),
                ));
            }
        }
        Ok(())
    }

    /// Whether the projection at a Hugging Face path such as
    /// `model.layers.3.self_attn.q_proj` is targeted.
    pub fn targets(&self, module_path: &str) -> bool {
        let last = module_path.rsplit('.').next().unwrap_or(module_path);
        self.target_modules.iter().any(|m| m == last)
    }
}

/// The trainable low-rank pair of one projection.
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    /// `lora_A`, shape [r, in].
    pub a: Tensor,
    /// `lora_B`, shape [out, r]; zero at initialisation so the adapted model starts equal to the base.
    pub b: Tensor,
    /// `alpha / r`.
    pub scale: f64,
}

/// `y = x Wᵀ` with `W` constant: the forward result is computed outside (detached) and the
/// backward returns only `dy W`, so no gradient for the frozen weight is ever computed
/// (candle's `Matmul` backward always computes both operand gradients: candle-core `backprop.rs`, `Tensor::backward`, the `Op::Matmul` arm).
pub(crate) struct FrozenMatmul {
    /// The frozen weight, shape [out, in], detached.
    pub(crate) weight: Tensor,
    /// The precomputed `x.detach() @ Wᵀ`, shape [N, out], contiguous; taken by the forward so the
    /// graph does not keep a second copy of the activation alive until backward.
    pub(crate) result: std::sync::Mutex<Option<Tensor>>,
}

impl CustomOp1 for FrozenMatmul {
    fn name(&self) -> &'static str {
        "frozen-matmul"
    }

    fn cpu_fwd(
        &self,
        _storage: &CpuStorage,
        _layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let result = self
            .result
            .lock()
            .map_err(|_| candle_core::Error::Msg("frozen-matmul: poisoned lock".into()))?
            .take()
            .ok_or_else(|| candle_core::Error::Msg("frozen-matmul: forward ran twice".into()))?;
        let flat = result.flatten_all()?;
        let storage = match result.dtype() {
            DType::F32 => CpuStorage::F32(flat.to_vec1()?),
            DType::BF16 => CpuStorage::BF16(flat.to_vec1()?),
            DType::F16 => CpuStorage::F16(flat.to_vec1()?),
            DType::F64 => CpuStorage::F64(flat.to_vec1()?),
            dt => {
                return Err(candle_core::Error::UnsupportedDTypeForOp(
                    dt,
                    "frozen-matmul",
                ));
            }
        };
        Ok((storage, result.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _storage: &candle_core::CudaStorage,
        _layout: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        take_result_cuda(&self.result, "frozen-matmul")
    }

    fn bwd(
        &self,
        _arg: &Tensor,
        _res: &Tensor,
        grad_res: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        // dL/dx = dL/dy · W, shape [N, in].
        Ok(Some(grad_res.matmul(&self.weight)?))
    }
}

/// `x Wᵀ` for a frozen `W` [out, in] and a 2-D `x` [N, in] that needs a gradient; [N, out].
pub(crate) fn frozen_matmul(x: &Tensor, weight: &Tensor) -> Result<Tensor> {
    let weight = weight.detach();
    if !supports_fused_ops(x.device()) {
        // The custom op has CPU and CUDA forwards. Elsewhere a plain matmul on the detached weight
        // is correct; it only wastes the weight-gradient product.
        return Ok(x.matmul(&weight.t()?)?);
    }
    let result = x.detach().matmul(&weight.t()?)?.contiguous()?;
    Ok(x.apply_op1(FrozenMatmul {
        weight,
        result: std::sync::Mutex::new(Some(result)),
    })?)
}

/// Whether the fused ops ([`frozen_matmul`], [`lora_matmul`]) have a forward on `device`.
pub(crate) fn supports_fused_ops(device: &candle_core::Device) -> bool {
    device.is_cpu() || device.is_cuda()
}

/// The precomputed tensor as the op's output on CUDA (a device copy; candle's `Storage` cannot
/// be moved out of a tensor).
#[cfg(feature = "cuda")]
fn take_result_cuda(
    slot: &std::sync::Mutex<Option<Tensor>>,
    op: &'static str,
) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
    use candle_core::backend::BackendStorage;
    let result = slot
        .lock()
        .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))?
        .take()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: forward ran twice")))?
        .contiguous()?;
    let (storage, layout) = result.storage_and_layout();
    match &*storage {
        candle_core::Storage::Cuda(s) if layout.start_offset() == 0 => {
            Ok((s.try_clone(layout)?, result.shape().clone()))
        }
        _ => Err(candle_core::Error::Msg(format!(
            "{op}: the precomputed result is not a whole CUDA buffer"
        ))),
    }
}

/// Copy a precomputed tensor into a fresh `CpuStorage` (the forward of the fused ops).
fn take_result(
    slot: &std::sync::Mutex<Option<Tensor>>,
    op: &'static str,
) -> candle_core::Result<(CpuStorage, Shape)> {
    let result = slot
        .lock()
        .map_err(|_| candle_core::Error::Msg(format!("{op}: poisoned lock")))?
        .take()
        .ok_or_else(|| candle_core::Error::Msg(format!("{op}: forward ran twice")))?;
    let flat = result.flatten_all()?;
    let storage = match result.dtype() {
        DType::F32 => CpuStorage::F32(flat.to_vec1()?),
        DType::BF16 => CpuStorage::BF16(flat.to_vec1()?),
        DType::F16 => CpuStorage::F16(flat.to_vec1()?),
        DType::F64 => CpuStorage::F64(flat.to_vec1()?),
        dt => return Err(candle_core::Error::UnsupportedDTypeForOp(dt, op)),
    };
    Ok((storage, result.shape().clone()))
}

/// `y = x Wᵀ + s · (x Aᵀ) Bᵀ` with `W` constant, as one graph node on (x, A, B): the graph keeps
/// only its output alive (not the base product, the low-rank product and their sum), and the
/// backward computes `dx = dy W + s (dy B) A`, `dA = s (dy B)ᵀ x`, `dB = s dyᵀ (x Aᵀ)` and never
/// the frozen weight's gradient.
pub(crate) struct LoraMatmul {
    /// [out, in], detached.
    pub(crate) weight: Tensor,
    pub(crate) scale: f64,
    /// The precomputed output [N, out], taken by the forward.
    pub(crate) result: std::sync::Mutex<Option<Tensor>>,
}

impl CustomOp3 for LoraMatmul {
    fn name(&self) -> &'static str {
        "lora-matmul"
    }

    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        take_result(&self.result, "lora-matmul")
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, Shape)> {
        take_result_cuda(&self.result, "lora-matmul")
    }

    fn bwd(
        &self,
        x: &Tensor,
        a: &Tensor,
        b: &Tensor,
        _res: &Tensor,
        g: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (x, a, b) = (x.detach(), a.detach(), b.detach());
        let gb = g.matmul(&b)?.affine(self.scale, 0.0)?; // [N, r]
        let dx = (g.matmul(&self.weight)? + gb.matmul(&a)?)?; // [N, in]
        let da = gb.t()?.matmul(&x)?; // [r, in]
        let xa = x.matmul(&a.t()?)?; // [N, r]
        let db = g.t()?.matmul(&xa)?.affine(self.scale, 0.0)?; // [out, r]
        Ok((Some(dx), Some(da), Some(db)))
    }
}

/// `x Wᵀ + scale · x Aᵀ Bᵀ` for a frozen `W` [out, in], adapters `A` [r, in], `B` [out, r] and a
/// 2-D `x` [N, in]; [N, out]. CPU and CUDA ([`supports_fused_ops`]; the caller falls back to
/// separate ops elsewhere).
pub(crate) fn lora_matmul(
    x: &Tensor,
    weight: &Tensor,
    a: &Tensor,
    b: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let weight = weight.detach();
    let xd = x.detach();
    let base = xd.matmul(&weight.t()?)?;
    let low = xd
        .matmul(&a.detach().t()?)?
        .matmul(&b.detach().t()?)?
        .affine(scale, 0.0)?;
    let result = (base + low)?.contiguous()?;
    Ok(x.apply_op3(
        a,
        b,
        LoraMatmul {
            weight,
            scale,
            result: std::sync::Mutex::new(Some(result)),
        },
    )?)
}
