//! The per-layer key/value cache of padded sampling ([`crate::sample`]).

use candle_core::Tensor;

use crate::{PolicyError, Result};

/// Per-layer key/value cache for sampling: `k`, `v` of shape [B, Tk, KV, head_dim] (the fused
/// CPU kernels' layout) or [B, KV, Tk, head_dim] (the composed ops' layout).
///
/// Prefix-cached sampling in f32 on the CPU ([`crate::sample_cached`]) does not use it:
/// [`crate::prefix_cache`] keeps segments that the packed forward reads in place
/// (`docs/ragen-semantics.md`, "Prefix sharing in rollouts").
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
    /// The key-position dimension of the cached tensors (1 fused, 2 composed).
    seq_dim: usize,
}

impl KvCache {
    /// An empty cache for `num_layers` layers.
    pub fn new(num_layers: usize) -> Self {
        Self {
            layers: vec![None; num_layers],
            seq_dim: 1,
        }
    }

    /// Cached key positions Tk (0 when empty).
    pub fn seq_len(&self) -> usize {
        self.layers
            .first()
            .and_then(|l| l.as_ref())
            .map_or(0, |(k, _)| k.dim(self.seq_dim).unwrap_or(0))
    }

    /// Ready the cache for a forward over `num_layers` layers whose attention keeps keys along
    /// `seq_dim`: a cache sized for another model starts over empty.
    pub(crate) fn fit(&mut self, num_layers: usize, seq_dim: usize) {
        if self.layers.len() != num_layers {
            *self = KvCache::new(num_layers);
        }
        self.seq_dim = seq_dim;
    }

    /// Append the new keys and values of `layer` after its cached ones, along the key-position
    /// dimension, and return all of them (cached, then new).
    ///
    /// # Errors
    /// Fails when `layer` is out of range or the shapes do not concatenate.
    pub(crate) fn append(
        &mut self,
        layer: usize,
        k: Tensor,
        v: Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let slot = self
            .layers
            .get_mut(layer)
            .ok_or_else(|| PolicyError::arg("cache", format!("no layer {layer}")))?;
        let (k, v) = match slot.take() {
            Some((pk, pv)) => (
                Tensor::cat(&[&pk, &k], self.seq_dim)?,
                Tensor::cat(&[&pv, &v], self.seq_dim)?,
            ),
            None => (k, v),
        };
        *slot = Some((k.clone(), v.clone()));
        Ok((k, v))
    }

    /// Append the rows of `other` (same layers and key length) after this cache's rows; an
    /// empty cache takes `other` as it is.
    ///
    /// # Errors
    /// Fails when layer counts or shapes differ.
    pub fn append_rows(&mut self, other: KvCache) -> Result<()> {
        if self.layers.iter().all(Option::is_none) {
            *self = other;
            return Ok(());
        }
        if other.layers.len() != self.layers.len() {
            return Err(PolicyError::arg("cache", "different layer counts"));
        }
        for (mine, theirs) in self.layers.iter_mut().zip(other.layers) {
            *mine = match (mine.take(), theirs) {
                (Some((k, v)), Some((k2, v2))) => {
                    Some((Tensor::cat(&[&k, &k2], 0)?, Tensor::cat(&[&v, &v2], 0)?))
                }
                (a, b) => a.or(b),
            };
        }
        Ok(())
    }

    /// Keep only the given batch rows (in this order), e.g. to drop finished sequences.
    ///
    /// # Errors
    /// Fails when an index is out of range.
    pub fn select_rows(&mut self, rows: &[u32]) -> Result<()> {
        for (k, v) in self.layers.iter_mut().flatten() {
            let idx = Tensor::new(rows, k.device())?;
            *k = k.index_select(&idx, 0)?;
            *v = v.index_select(&idx, 0)?;
        }
        Ok(())
    }
}
