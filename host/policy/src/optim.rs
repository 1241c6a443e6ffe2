//! AdamW (Loshchilov & Hutter 2019; PyTorch `torch.optim.AdamW` update), gradient-norm clipping
//! (PyTorch `clip_grad_norm_`) and learning-rate schedules (Hugging Face `transformers`).

use std::collections::HashMap;
use std::path::Path;

use candle_core::backprop::GradStore;
use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::hf_dir::write_json;
use crate::policy::NamedParam;
use crate::{PolicyError, Result};

/// Gradients of a parameter list, in the list's order (the rest of candle's `GradStore`, which
/// also holds gradients of every intermediate tensor, is dropped as early as possible).
#[derive(Debug, Clone)]
pub struct ParamGrads {
    grads: Vec<Option<Tensor>>,
}

impl ParamGrads {
    /// Take the parameters' gradients out of a `GradStore` (from `loss.backward()`).
    pub fn from_store(mut store: GradStore, params: &[NamedParam]) -> Self {
        Self {
            grads: params
                .iter()
                .map(|p| store.remove(p.var.as_tensor()))
                .collect(),
        }
    }

    /// Add another backward pass (gradient accumulation over micro-batches).
    ///
    /// # Errors
    /// Shape mismatch when `params` differs from the first call's.
    pub fn accumulate(&mut self, store: GradStore, params: &[NamedParam]) -> Result<()> {
        let other = Self::from_store(store, params);
        if other.grads.len() != self.grads.len() {
            return Err(PolicyError::arg("params", "different parameter list"));
        }
        for (a, b) in self.grads.iter_mut().zip(other.grads) {
            *a = match (a.take(), b) {
                (Some(x), Some(y)) => Some((x + y)?),
                (x, y) => x.or(y),
            };
        }
        Ok(())
    }

    /// Gradient of the i-th parameter.
    pub fn get(&self, i: usize) -> Option<&Tensor> {
        self.grads.get(i).and_then(Option::as_ref)
    }

    /// Multiply every gradient by `factor`.
    ///
    /// # Errors
    /// Tensor errors.
    pub fn scale(&mut self, factor: f64) -> Result<()> {
        for g in self.grads.iter_mut().flatten() {
            *g = g.affine(factor, 0.0)?;
        }
        Ok(())
    }

    /// Global L2 norm over all gradients (f64 accumulation).
    ///
    /// # Errors
    /// Tensor errors.
    pub fn global_norm(&self) -> Result<f64> {
        let mut sq = 0.0f64;
        for g in self.grads.iter().flatten() {
            sq += f64::from(
                g.to_dtype(DType::F32)?
                    .sqr()?
                    .sum_all()?
                    .to_scalar::<f32>()?,
            );
        }
        Ok(sq.sqrt())
    }
}

/// Clip gradients to a global L2 norm of `max_norm` like PyTorch `clip_grad_norm_`
/// (factor `max_norm / (norm + 1e-6)` when the norm exceeds it) and return the **pre-clip** norm.
/// A non-finite norm leaves the gradients untouched (the caller should skip the step).
///
/// # Errors
/// Tensor errors.
pub fn clip_grad_norm(grads: &mut ParamGrads, max_norm: f64) -> Result<f64> {
    let norm = grads.global_norm()?;
    if max_norm > 0.0 && norm.is_finite() && norm > max_norm {
        grads.scale(max_norm / (norm + 1e-6))?;
    }
    Ok(norm)
}

/// AdamW hyper-parameters (defaults: verl's actor, lr 1e-6, betas (0.9, 0.999), eps 1e-8, wd 0.01).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdamWConfig {
    /// Base learning rate (a schedule may scale it per step).
    pub lr: f64,
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay, applied to matrices only ([`NamedParam::decays`]).
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-6,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

/// Moments of one parameter: host vectors on the CPU (one fused loop per step), tensors elsewhere.
#[derive(Debug, Clone)]
enum Moments {
    Host { m: Vec<f32>, v: Vec<f32> },
    Device { m: Tensor, v: Tensor },
}

/// AdamW over a fixed parameter list.
#[derive(Debug, Clone)]
pub struct AdamW {
    cfg: AdamWConfig,
    params: Vec<NamedParam>,
    moments: Vec<Moments>,
    step: u64,
}

impl AdamW {
    /// Zero moments for `params`.
    ///
    /// # Errors
    /// Allocation failures.
    pub fn new(params: &[NamedParam], cfg: AdamWConfig) -> Result<Self> {
        let moments = params
            .iter()
            .map(|p| {
                let t = p.var.as_tensor();
                Ok(if t.device().is_cpu() {
                    Moments::Host {
                        m: vec![0.0; t.elem_count()],
                        v: vec![0.0; t.elem_count()],
                    }
                } else {
                    Moments::Device {
                        m: t.zeros_like()?,
                        v: t.zeros_like()?,
                    }
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            cfg,
            params: params.to_vec(),
            moments,
            step: 0,
        })
    }

    /// Steps taken so far.
    pub fn step_count(&self) -> u64 {
        self.step
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &AdamWConfig {
        &self.cfg
    }

    /// One update with learning rate `lr` (from an [`LrSchedule`]); parameters without a
    /// gradient are skipped, as in PyTorch.
    ///
    /// `p ← p − lr·wd·p; m ← β1 m + (1−β1) g; v ← β2 v + (1−β2) g²;
    ///  p ← p − lr · (m / (1−β1ᵗ)) / (√(v / (1−β2ᵗ)) + ε)`.
    ///
    /// # Errors
    /// Tensor errors.
    pub fn step(&mut self, grads: &ParamGrads, lr: f64) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let (b1, b2, eps) = (self.cfg.beta1, self.cfg.beta2, self.cfg.eps);
        let bc1 = 1.0 - b1.powi(t);
        let bc2 = 1.0 - b2.powi(t);
        for (i, (p, mom)) in self.params.iter().zip(self.moments.iter_mut()).enumerate() {
            let Some(g) = grads.get(i) else { continue };
            let wd = if p.decays() {
                self.cfg.weight_decay
            } else {
                0.0
            };
            match mom {
                Moments::Host { m, v } => {
                    let mut w: Vec<f32> = p.var.as_tensor().detach().flatten_all()?.to_vec1()?;
                    let g: Vec<f32> = g.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
                    adamw_host(&mut w, &g, m, v, [lr, wd, b1, b2, eps, bc1, bc2]);
                    let new = Tensor::from_vec(w, p.var.shape(), p.var.device())?;
                    p.var.set(&new)?;
                }
                Moments::Device { m, v } => {
                    let g = g.to_dtype(DType::F32)?;
                    let w = p.var.as_tensor().detach();
                    *m = ((m.affine(b1, 0.0))? + g.affine(1.0 - b1, 0.0)?)?;
                    *v = ((v.affine(b2, 0.0))? + g.sqr()?.affine(1.0 - b2, 0.0)?)?;
                    let denom = (v.affine(1.0 / bc2, 0.0)?.sqrt()? + eps)?;
                    let upd = m.affine(1.0 / bc1, 0.0)?.div(&denom)?;
                    let new = (w.affine(1.0 - lr * wd, 0.0)? - upd.affine(lr, 0.0)?)?;
                    p.var.set(&new)?;
                }
            }
        }
        Ok(())
    }

    /// Write `optimizer.safetensors` (`exp_avg.{name}`, `exp_avg_sq.{name}`) and
    /// `optimizer.json` (step, config) into `dir`.
    ///
    /// # Errors
    /// I/O errors naming the file.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut tensors = HashMap::new();
        for (p, mom) in self.params.iter().zip(&self.moments) {
            let (m, v) = match mom {
                Moments::Host { m, v } => (
                    Tensor::from_slice(m, p.var.shape(), p.var.device())?,
                    Tensor::from_slice(v, p.var.shape(), p.var.device())?,
                ),
                Moments::Device { m, v } => (m.clone(), v.clone()),
            };
            tensors.insert(format!("exp_avg.{}", p.name), m);
            tensors.insert(format!("exp_avg_sq.{}", p.name), v);
        }
        let path = dir.join("optimizer.safetensors");
        candle_core::safetensors::save(&tensors, &path)?;
        let json = serde_json::json!({ "step": self.step, "config": self.cfg });
        write_json(&dir.join("optimizer.json"), &json)
    }

    /// Restore moments and step count written by [`AdamW::save`] for the same parameter list.
    ///
    /// # Errors
    /// [`PolicyError::Checkpoint`] naming the file when a tensor is missing or mis-shaped.
    pub fn load(&mut self, dir: &Path) -> Result<()> {
        let bad = |path: &Path, reason: String| PolicyError::Checkpoint {
            path: path.to_path_buf(),
            reason,
        };
        let jpath = dir.join("optimizer.json");
        let text = std::fs::read_to_string(&jpath).map_err(|e| PolicyError::io(&jpath, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| bad(&jpath, e.to_string()))?;
        let step = v["step"]
            .as_u64()
            .ok_or_else(|| bad(&jpath, "missing step".into()))?;
        let path = dir.join("optimizer.safetensors");
        let device = self.params.first().map(|p| p.var.device().clone());
        let Some(device) = device else {
            self.step = step;
            return Ok(());
        };
        let tensors = candle_core::safetensors::load(&path, &device)
            .map_err(|e| bad(&path, e.to_string()))?;
        for (p, mom) in self.params.iter().zip(self.moments.iter_mut()) {
            let get = |k: String| -> Result<Tensor> {
                let t = tensors
                    .get(&k)
                    .ok_or_else(|| bad(&path, format!("missing {k}")))?;
                if t.shape() != p.var.shape() {
                    return Err(bad(
                        &path,
                        format!("{k} has shape {:?}, expected {:?}", t.dims(), p.var.dims()),
                    ));
                }
                Ok(t.to_dtype(DType::F32)?)
            };
            let m = get(format!("exp_avg.{}", p.name))?;
            let v = get(format!("exp_avg_sq.{}", p.name))?;
            *mom = match mom {
                Moments::Host { .. } => Moments::Host {
                    m: m.flatten_all()?.to_vec1()?,
                    v: v.flatten_all()?.to_vec1()?,
                },
                Moments::Device { .. } => Moments::Device { m, v },
            };
        }
        self.step = step;
        Ok(())
    }
}

/// The fused AdamW update on host slices; `h` = [lr, wd, β1, β2, ε, 1−β1ᵗ, 1−β2ᵗ].
fn adamw_host(w: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], h: [f64; 7]) {
    let [lr, wd, b1, b2, eps, bc1, bc2] = h.map(|x| x as f32);
    let decay = 1.0 - lr * wd;
    let step = lr / bc1;
    let inv_bc2 = 1.0 / bc2;
    let chunk = w.len().div_ceil(2).max(1 << 16);
    std::thread::scope(|s| {
        for (((w, g), m), v) in w
            .chunks_mut(chunk)
            .zip(g.chunks(chunk))
            .zip(m.chunks_mut(chunk))
            .zip(v.chunks_mut(chunk))
        {
            s.spawn(move || {
                for i in 0..w.len() {
                    let gi = g[i];
                    m[i] = b1 * m[i] + (1.0 - b1) * gi;
                    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                    w[i] = w[i] * decay - step * m[i] / ((v[i] * inv_bc2).sqrt() + eps);
                }
            });
        }
    });
}

/// Learning-rate schedules (Hugging Face `get_constant_schedule[_with_warmup]`,
/// `get_cosine_schedule_with_warmup`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
pub enum LrSchedule {
    /// Always `lr`.
    Constant {
        /// Learning rate.
        lr: f64,
    },
    /// `lr · step / warmup_steps` for `step < warmup_steps`, then `lr` (step counts from 0).
    WarmupConstant {
        /// Peak learning rate.
        lr: f64,
        /// Linear warm-up length in optimiser steps.
        warmup_steps: u64,
    },
    /// Linear warm-up, then cosine decay to 0 at `total_steps`.
    WarmupCosine {
        /// Peak learning rate.
        lr: f64,
        /// Linear warm-up length in optimiser steps.
        warmup_steps: u64,
        /// Total optimiser steps.
        total_steps: u64,
    },
}

impl LrSchedule {
    /// Learning rate of optimiser step `step` (0-based).
    pub fn lr_at(&self, step: u64) -> f64 {
        match *self {
            LrSchedule::Constant { lr } => lr,
            LrSchedule::WarmupConstant { lr, warmup_steps } => {
                if step < warmup_steps {
                    lr * step as f64 / warmup_steps.max(1) as f64
                } else {
                    lr
                }
            }
            LrSchedule::WarmupCosine {
                lr,
                warmup_steps,
                total_steps,
            } => {
                if step < warmup_steps {
                    return lr * step as f64 / warmup_steps.max(1) as f64;
                }
                let progress = (step - warmup_steps) as f64
                    / (total_steps.saturating_sub(warmup_steps)).max(1) as f64;
                lr * (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
            }
        }
    }
}
