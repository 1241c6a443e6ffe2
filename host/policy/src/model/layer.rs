//! One decoder block: its weights ([`DecoderLayer`]) and its forward (RMSNorm, grouped-query
//! attention with RoPE, RMSNorm, SwiGLU MLP; Hugging Face `LlamaDecoderLayer`), with the fused
//! CPU kernels ([`crate::ops`]) in f32 on the CPU and their composed twins elsewhere.

use candle_core::Tensor;

use super::LlamaModel;
use super::kv_cache::KvCache;
use super::linear::{Linear, ModelParts};
use super::mask::AttentionMask;
use crate::Result;
use crate::config::{ModelConfig, PROJECTIONS};
use crate::ops;

/// The Hugging Face module paths of layer `i`'s projections with their names, in the order of
/// [`PROJECTIONS`].
pub(crate) fn layer_projection_paths(i: usize) -> [(String, &'static str); 7] {
    PROJECTIONS.map(|(block, name)| (format!("model.layers.{i}.{block}.{name}"), name))
}

/// The shape of a projection's weight `[output, input]`, and whether it has a bias.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProjectionShape {
    pub(crate) input: usize,
    pub(crate) output: usize,
    pub(crate) bias: bool,
}

/// The shapes of a layer's projections under `cfg`, in the order of [`PROJECTIONS`].
pub(crate) fn projection_shapes(cfg: &ModelConfig) -> [ProjectionShape; 7] {
    let d = cfg.hidden_size;
    let q = cfg.num_attention_heads * cfg.head_dim();
    let kv = cfg.num_kv_heads() * cfg.head_dim();
    let f = cfg.intermediate_size;
    let shape = |input, output, bias| ProjectionShape {
        input,
        output,
        bias,
    };
    [
        shape(d, q, cfg.qkv_bias()),
        shape(d, kv, cfg.qkv_bias()),
        shape(d, kv, cfg.qkv_bias()),
        shape(q, d, cfg.o_bias()),
        shape(d, f, false),
        shape(d, f, false),
        shape(f, d, false),
    ]
}

/// The weights of one decoder block.
#[derive(Debug, Clone)]
pub(crate) struct DecoderLayer {
    pub(crate) input_layernorm: Tensor,
    pub(crate) post_attention_layernorm: Tensor,
    pub(crate) q_proj: Linear,
    pub(crate) k_proj: Linear,
    pub(crate) v_proj: Linear,
    pub(crate) o_proj: Linear,
    pub(crate) gate_proj: Linear,
    pub(crate) up_proj: Linear,
    pub(crate) down_proj: Linear,
}

impl DecoderLayer {
    /// Layer `i` from `parts`, every shape checked against `cfg`.
    pub(super) fn load(parts: &ModelParts<'_>, cfg: &ModelConfig, i: usize) -> Result<Self> {
        let d = cfg.hidden_size;
        let norm = |name: &str| parts.get(&format!("model.layers.{i}.{name}.weight"), &[d]);
        let input_layernorm = norm("input_layernorm")?;
        let post_attention_layernorm = norm("post_attention_layernorm")?;
        let linears: Vec<Linear> = layer_projection_paths(i)
            .into_iter()
            .zip(projection_shapes(cfg))
            .map(|((path, _), s)| parts.linear(&path, s.input, s.output, s.bias))
            .collect::<Result<_>>()?;
        let [
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            gate_proj,
            up_proj,
            down_proj,
        ]: [Linear; 7] = linears.try_into().expect("one linear per projection");
        Ok(Self {
            input_layernorm,
            post_attention_layernorm,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            gate_proj,
            up_proj,
            down_proj,
        })
    }

    /// The projections in the order of [`PROJECTIONS`].
    pub(crate) fn projections(&self) -> [&Linear; 7] {
        [
            &self.q_proj,
            &self.k_proj,
            &self.v_proj,
            &self.o_proj,
            &self.gate_proj,
            &self.up_proj,
            &self.down_proj,
        ]
    }

    /// The two norm weights and the projections (in the order of [`PROJECTIONS`]), mutably.
    fn split_mut(&mut self) -> ([&mut Tensor; 2], [&mut Linear; 7]) {
        let Self {
            input_layernorm,
            post_attention_layernorm,
            q_proj,
            k_proj,
            v_proj,
            o_proj,
            gate_proj,
            up_proj,
            down_proj,
        } = self;
        (
            [input_layernorm, post_attention_layernorm],
            [
                q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj,
            ],
        )
    }

    /// The projections in the order of [`PROJECTIONS`], mutably.
    pub(crate) fn projections_mut(&mut self) -> [&mut Linear; 7] {
        self.split_mut().1
    }

    /// Every tensor of the layer (norms, weights, biases, adapters) in a fixed order.
    pub(crate) fn tensors_mut(&mut self) -> Vec<&mut Tensor> {
        let (norms, projections) = self.split_mut();
        let mut out: Vec<&mut Tensor> = norms.into_iter().collect();
        for lin in projections {
            out.push(&mut lin.weight);
            if let Some(b) = &mut lin.bias {
                out.push(b);
            }
            if let Some(l) = &mut lin.lora {
                out.push(&mut l.a);
                out.push(&mut l.b);
            }
        }
        out
    }

    /// The same layer with `f` applied to every tensor.
    pub(super) fn map(&self, f: &impl Fn(&Tensor) -> Result<Tensor>) -> Result<Self> {
        let mut out = self.clone();
        let (norms, projections) = out.split_mut();
        for t in norms {
            *t = f(t)?;
        }
        for lin in projections {
            *lin = lin.map(f)?;
        }
        Ok(out)
    }
}

impl LlamaModel {
    /// Layer `i`.
    pub(crate) fn layer(&self, i: usize) -> &DecoderLayer {
        &self.layers[i]
    }

    /// One decoder block on x [B, T, D]; `cache` is the model's KV cache and this layer's index
    /// in it, appended to when given.
    pub(crate) fn layer_forward(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        mask: &AttentionMask,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Result<Tensor> {
        let h = self.rms_norm(x, &l.input_layernorm)?.to_dtype(self.dtype)?;
        let attn = if self.fuse(&h) {
            self.attention_fused(l, &h, mask, cache)?
        } else {
            self.attention_composed(l, &h, mask, cache)?
        };
        let x = (x + attn)?;
        self.mlp_block(l, &x)
    }

    /// The second half of a decoder block: `x + down(swiglu(gate(h), up(h)))` with `h` the
    /// post-attention RMSNorm of `x`.
    pub(super) fn mlp_block(&self, l: &DecoderLayer, x: &Tensor) -> Result<Tensor> {
        let h = self
            .rms_norm(x, &l.post_attention_layernorm)?
            .to_dtype(self.dtype)?;
        let gate = l.gate_proj.forward(&h)?;
        let up = l.up_proj.forward(&h)?;
        let act = if self.fuse(&gate) {
            ops::swiglu(&gate, &up)?
        } else {
            (gate.silu()? * up)?
        };
        let mlp = l.down_proj.forward(&act)?;
        Ok((x + mlp)?)
    }

    /// Attention with the fused kernels, x: [B, T, D] -> [B, T, D]. The projections'
    /// [B, T, heads·hd] is already [B, T, heads, hd], so nothing is transposed; the cache holds
    /// [B, Tk, KV, hd].
    fn attention_fused(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        mask: &AttentionMask,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (h, kv, hd) = self.heads();
        let q = ops::rope(&l.q_proj.forward(x)?.reshape((b, t, h, hd))?, &mask.rope)?;
        let k = ops::rope(&l.k_proj.forward(x)?.reshape((b, t, kv, hd))?, &mask.rope)?;
        let v = l.v_proj.forward(x)?.reshape((b, t, kv, hd))?;
        let (k, v) = match cache {
            Some((c, i)) => c.append(i, k, v)?,
            None => (k, v),
        };
        let out = ops::attention(&q, &k, &v, &mask.bias_host, 1.0 / (hd as f64).sqrt())?;
        l.o_proj.forward(&out)
    }

    /// Attention from composed candle ops, x: [B, T, D] -> [B, T, D], heads first
    /// ([B, heads, T, hd]); the cache holds [B, KV, Tk, hd].
    fn attention_composed(
        &self,
        l: &DecoderLayer,
        x: &Tensor,
        mask: &AttentionMask,
        cache: Option<(&mut KvCache, usize)>,
    ) -> Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let (h, kv, hd) = self.heads();
        let heads_first = |lin: &Linear, n: usize| -> Result<Tensor> {
            Ok(lin.forward(x)?.reshape((b, t, n, hd))?.transpose(1, 2)?)
        };
        let q = ops::rope_composed(&heads_first(&l.q_proj, h)?, &mask.cos, &mask.sin)?;
        let k = ops::rope_composed(&heads_first(&l.k_proj, kv)?, &mask.cos, &mask.sin)?;
        let v = heads_first(&l.v_proj, kv)?.contiguous()?;
        let (k, v) = match cache {
            Some((c, i)) => c.append(i, k, v)?,
            None => (k, v),
        };
        let out = ops::sdpa_composed(&q, &k, &v, &mask.bias, h / kv, self.dtype)?;
        l.o_proj.forward(&out)
    }

    /// Query heads, key/value heads and the head dimension.
    pub(super) fn heads(&self) -> (usize, usize, usize) {
        (
            self.cfg.num_attention_heads,
            self.cfg.num_kv_heads(),
            self.cfg.head_dim(),
        )
    }
}
