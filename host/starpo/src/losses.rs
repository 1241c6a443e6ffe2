//! PPO actor and critic losses on candle tensors (`docs/ragen-semantics.md` §7; verl
//! `verl/trainer/ppo/core_algos.py::{compute_policy_loss, compute_value_loss, kl_penalty,
//! agg_loss}` with `token-mean`).
//!
//! All inputs are `f32` tensors of the same shape (`[batch, positions]` or flat), where a position
//! is a response position (predicting the next token) and `mask` is 1 on assistant targets.
//! The returned loss tensors keep the autograd graph of `logp` / `entropy` / `vpred`.

use crate::config::KlType;
use ragen_gym_policy::{Result, Tensor};

/// Token-mean over the mask: `sum(x * mask) / (sum(mask) + 1e-8)` (verl `masked_mean`).
pub fn masked_mean(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let num = (x * mask)?.sum_all()?;
    let den = (mask.sum_all()? + 1e-8)?;
    Ok((num / den)?)
}

/// Clip settings of the PPO policy loss.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipParams {
    /// `clip_ratio_low` (ratio >= 1 - low).
    pub low: f64,
    /// `clip_ratio_high` (ratio <= 1 + high; Clip-Higher when larger than `low`).
    pub high: f64,
    /// `clip_ratio_c`, the dual-clip cap for negative advantages (> 1).
    pub dual: f64,
}

/// The PPO policy loss and its diagnostics.
#[derive(Debug, Clone)]
pub struct PolicyLoss {
    /// Scalar token-mean clipped surrogate loss (differentiable in `logp`).
    pub pg_loss: Tensor,
    /// `actor/pg_clipfrac`: fraction of masked tokens where the clipped term was taken.
    pub pg_clipfrac: f32,
    /// `actor/pg_clipfrac_lower`: fraction where the dual clip bound was taken.
    pub pg_clipfrac_lower: f32,
    /// `actor/ppo_kl`: masked mean of `old_logp - logp`.
    pub ppo_kl: f32,
}

/// PPO clipped surrogate with Clip-Higher and dual clip (verl `compute_policy_loss`):
/// `ratio = exp(logp - old)`, `l = max(-A*ratio, -A*clip(ratio, 1-low, 1+high))`, and for
/// `A < 0` the loss is `min(l, -A*dual)`; token-mean over the mask.
pub fn policy_loss(
    logp: &Tensor,
    old_logp: &Tensor,
    adv: &Tensor,
    mask: &Tensor,
    clip: ClipParams,
) -> Result<PolicyLoss> {
    let neg_kl = (logp - old_logp)?;
    let ratio = neg_kl.exp()?;
    let ppo_kl = masked_mean(&neg_kl.neg()?, mask)?.to_scalar::<f32>()?;
    let neg_adv = adv.neg()?;
    let l1 = (&neg_adv * &ratio)?;
    let l2 = (&neg_adv * ratio.clamp(1.0 - clip.low, 1.0 + clip.high)?)?;
    let clip1 = l1.maximum(&l2)?;
    let pg_clipfrac =
        masked_mean(&l2.gt(&l1)?.to_dtype(logp.dtype())?, mask)?.to_scalar::<f32>()?;
    let l3 = neg_adv.affine(clip.dual, 0.0)?;
    let clip2 = l3.minimum(&clip1)?;
    let neg = adv.lt(0.0)?;
    let lower = (clip1.gt(&l3)?.to_dtype(logp.dtype())? * neg.to_dtype(logp.dtype())?)?;
    let pg_clipfrac_lower = masked_mean(&lower, mask)?.to_scalar::<f32>()?;
    let pg = neg.where_cond(&clip2, &clip1)?;
    Ok(PolicyLoss {
        pg_loss: masked_mean(&pg, mask)?,
        pg_clipfrac,
        pg_clipfrac_lower,
        ppo_kl,
    })
}

/// Per-token KL(actor || reference) estimate as a tensor: k1 = `logp - ref`; k3 =
/// `exp(ref - logp) - (ref - logp) - 1` clamped to [-10, 10] (verl `kl_penalty`, "low_var_kl").
pub fn kl_tensor(logp: &Tensor, ref_logp: &Tensor, kind: KlType) -> Result<Tensor> {
    match kind {
        KlType::K1 => Ok((logp - ref_logp)?),
        KlType::K3 => {
            let kl = (ref_logp - logp)?;
            Ok(((kl.exp()? - &kl)? - 1.0)?.clamp(-10f32, 10f32)?)
        }
    }
}

/// The critic loss and its diagnostics.
#[derive(Debug, Clone)]
pub struct ValueLoss {
    /// Scalar `0.5 * token-mean(max(unclipped, clipped) squared error)`.
    pub vf_loss: Tensor,
    /// `critic/vf_clipfrac`.
    pub vf_clipfrac: f32,
}

/// Clipped value loss (verl `compute_value_loss`): `vclip = old + clip(vpred - old, -c, c)`,
/// `0.5 * masked_mean(max((vpred - ret)^2, (vclip - ret)^2))`.
pub fn value_loss(
    vpred: &Tensor,
    old_values: &Tensor,
    returns: &Tensor,
    mask: &Tensor,
    cliprange: f64,
) -> Result<ValueLoss> {
    let vclip = (old_values + (vpred - old_values)?.clamp(-cliprange, cliprange)?)?;
    let l1 = (vpred - returns)?.sqr()?;
    let l2 = (&vclip - returns)?.sqr()?;
    let vf_clipfrac =
        masked_mean(&l2.gt(&l1)?.to_dtype(vpred.dtype())?, mask)?.to_scalar::<f32>()?;
    let vf_loss = (masked_mean(&l1.maximum(&l2)?, mask)? * 0.5)?;
    Ok(ValueLoss {
        vf_loss,
        vf_clipfrac,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ragen_gym_policy::{Device, Var};

    fn t(v: &[f32]) -> Tensor {
        Tensor::new(v, &Device::Cpu).unwrap()
    }

    const CLIP: ClipParams = ClipParams {
        low: 0.2,
        high: 0.28,
        dual: 3.0,
    };

    #[test]
    fn policy_loss_hand_computed() {
        // ratios e^0.5=1.6487 (A=+1: clipped to 1.28), e^-0.5=0.6065 (A=+1: unclipped min is
        // max(-0.6065, -0.8) = -0.6065), e^2=7.389 (A=-1: max(7.389, 1.28)=7.389, dual cap 3 -> 3),
        // e^0=1 (A=2, masked out).
        let old = t(&[0.0, 0.0, 0.0, 0.0]);
        let lp = Var::from_tensor(&t(&[0.5, -0.5, 2.0, 0.0])).unwrap();
        let adv = t(&[1.0, 1.0, -1.0, 2.0]);
        let mask = t(&[1.0, 1.0, 1.0, 0.0]);
        let out = policy_loss(lp.as_tensor(), &old, &adv, &mask, CLIP).unwrap();
        let want = (-1.28 - (-0.5f32).exp() + 3.0) / 3.0;
        let got = out.pg_loss.to_scalar::<f32>().unwrap();
        assert!((got - want).abs() < 1e-5, "{got} vs {want}");
        // clipped term taken at position 0 only (position 2: l2=1.28 < l1)
        assert!((out.pg_clipfrac - 1.0 / 3.0).abs() < 1e-6);
        assert!((out.pg_clipfrac_lower - 1.0 / 3.0).abs() < 1e-6);
        assert!((out.ppo_kl - (-(0.5 - 0.5 + 2.0) / 3.0)).abs() < 1e-6);
        // gradient flows only through the unclipped, masked position 1: d/dlp(-ratio)/3
        let g = out.pg_loss.backward().unwrap();
        let g = g.get(lp.as_tensor()).unwrap().to_vec1::<f32>().unwrap();
        assert!(
            g[0].abs() < 1e-7 && g[2].abs() < 1e-7 && g[3].abs() < 1e-7,
            "{g:?}"
        );
        assert!((g[1] + (-0.5f32).exp() / 3.0).abs() < 1e-5, "{g:?}");
    }

    #[test]
    fn symmetric_clip_changes_the_bound() {
        let out = policy_loss(
            &t(&[0.5]),
            &t(&[0.0]),
            &t(&[1.0]),
            &t(&[1.0]),
            ClipParams { high: 0.2, ..CLIP },
        )
        .unwrap();
        assert!((out.pg_loss.to_scalar::<f32>().unwrap() + 1.2).abs() < 1e-6);
    }

    #[test]
    fn kl_k1_k3() {
        let k1 = kl_tensor(&t(&[-1.0]), &t(&[-1.5]), KlType::K1)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(k1, vec![0.5]);
        let k3 = kl_tensor(&t(&[-1.0]), &t(&[-1.5]), KlType::K3)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert!((k3[0] - ((-0.5f32).exp() + 0.5 - 1.0)).abs() < 1e-6);
    }

    #[test]
    fn value_loss_hand_computed() {
        // pos0: vpred 2, old 0 -> clipped 0.5; ret 1: l1 = 1, l2 = 0.25 -> 1
        // pos1: vpred 0.2, old 0 -> clip 0.2; ret 1: l1 = l2 = 0.64 -> 0.64
        // pos2: vpred -1, old 1 -> clipped 0.5; ret 3: l1 = 16, l2 = 6.25 -> 16 (masked out)
        let out = value_loss(
            &t(&[2.0, 0.2, -1.0]),
            &t(&[0.0, 0.0, 1.0]),
            &t(&[1.0, 1.0, 3.0]),
            &t(&[1.0, 1.0, 0.0]),
            0.5,
        )
        .unwrap();
        let want = 0.5 * (1.0 + 0.64) / 2.0;
        assert!((out.vf_loss.to_scalar::<f32>().unwrap() - want).abs() < 1e-6);
        assert!(out.vf_clipfrac.abs() < 1e-6);
        // ret 0 at pos0: l1 = 4, l2 = 0.25 -> unclipped; with vpred 0.9, old 0, ret -1: l1 = 3.61, l2 = 2.25
        let out = value_loss(&t(&[0.9]), &t(&[0.0]), &t(&[5.0]), &t(&[1.0]), 0.5).unwrap();
        // l1 = 16.81, l2 = 20.25 -> clipped taken
        assert!((out.vf_loss.to_scalar::<f32>().unwrap() - 0.5 * 20.25).abs() < 1e-4);
        assert!((out.vf_clipfrac - 1.0).abs() < 1e-6);
    }
}
