//! Batched, seeded sampling with a KV cache: temperature, top-k, top-p, stop tokens and strings.

mod device;
mod seeded;
mod stop;

pub use seeded::{RowSeed, sample_seeded};
pub use stop::StopScan;

use candle_core::Tensor;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::constrain::{Constraint, Guide, Next, TokenKind, mask_logits};
use crate::model::{AttentionMask, KvCache, LlamaModel};
use crate::prefix_cache::{PrefixCache, SegId};
use crate::tokenizer::Tokenizer;
use crate::{PolicyError, Result};

/// How to sample (vLLM / Hugging Face `generate` semantics).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f64,
    /// Nucleus sampling: keep the smallest set of tokens whose probability reaches `top_p` (1 = off).
    pub top_p: f64,
    /// Keep only the `top_k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Upper bound on generated tokens per prompt.
    pub max_new_tokens: usize,
    /// Stop once the generated text contains one of these strings (the completing token is kept).
    pub stop: Vec<String>,
    /// Seed; row `i` of a batch draws from ChaCha8 stream `i` of this seed, so a row's sample does
    /// not depend on the rest of the batch.
    pub seed: u64,
}

impl Default for SamplingParams {
    /// Greedy, 256 new tokens, no stop strings, seed 0.
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 256,
            stop: Vec::new(),
            seed: 0,
        }
    }
}

/// Why generation of a row ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-turn token (`<|im_end|>`, `<|endoftext|>`) was generated (it is the last token).
    Stop,
    /// A stop string appeared in the text.
    StopString,
    /// `max_new_tokens` was reached.
    Length,
}

/// One generated continuation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Generated token ids, including a final end-of-turn token when `finish_reason` is `Stop`.
    pub tokens: Vec<u32>,
    /// `log p(token)` of each generated token under the model's distribution at temperature 1
    /// without top-k/top-p, renormalised over the allowed set for a constrained choice and 0 for
    /// a forced token: exactly what [`crate::score`] recomputes with the same `kinds`.
    pub logprobs: Vec<f32>,
    /// How each token was produced (all [`TokenKind::Free`] without a constraint).
    pub kinds: Vec<TokenKind>,
    /// Decoded text without special tokens.
    pub text: String,
    /// Why generation ended.
    pub finish_reason: FinishReason,
}

/// Sample continuations of a batch of prompts.
///
/// Prompts (token ids, any lengths) are left-padded into one batch [B, L], prefilled once, then
/// decoded one token per step with a KV cache; finished rows are dropped from the batch and the
/// cache. Runs on a detached view of the weights, so no autograd graph is recorded.
///
/// # Errors
/// [`PolicyError::InvalidArgument`] for an empty prompt or bad parameters; tensor errors.
pub fn sample(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
) -> Result<Vec<Sample>> {
    sample_constrained(model, tokenizer, prompts, params, None)
}

/// [`sample`], with each row's answer restricted by `constraint` (constrained action decoding,
/// [`crate::constrain`]; `docs/ragen-semantics.md` §5, "Constrained action decoding"): the
/// grammar masks the logits before temperature, top-k and top-p.
///
/// # Errors
/// As [`sample`].
pub fn sample_constrained(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    constraint: Option<&Constraint>,
) -> Result<Vec<Sample>> {
    sample_chunked(
        model,
        tokenizer,
        prompts,
        params,
        constraint,
        PREFILL_SCORE_BYTES,
    )
}

/// Most bytes of f32 attention scores one prefill chunk may hold (see [`sample_chunked`]).
const PREFILL_SCORE_BYTES: usize = 1 << 30;

/// Check the parameters and prompts of a sampling call.
fn validate(prompts: &[Vec<u32>], params: &SamplingParams) -> Result<()> {
    let valid = params.temperature >= 0.0 && params.top_p > 0.0 && params.top_p <= 1.0;
    if !valid {
        return Err(PolicyError::arg(
            "sampling",
            "need temperature >= 0 and 0 < top_p <= 1",
        ));
    }
    if prompts.iter().any(Vec::is_empty) {
        return Err(PolicyError::arg(
            "prompts",
            "every prompt needs at least one token",
        ));
    }
    Ok(())
}

/// An empty sample per row (what a call with no token budget returns).
fn empty_samples(b: usize) -> Vec<Sample> {
    (0..b)
        .map(|_| Sample {
            tokens: vec![],
            logprobs: vec![],
            kinds: vec![],
            text: String::new(),
            finish_reason: FinishReason::Length,
        })
        .collect()
}

/// [`sample_constrained`] with a given prefill budget (tests force small chunks).
pub(crate) fn sample_chunked(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    constraint: Option<&Constraint>,
    prefill_score_bytes: usize,
) -> Result<Vec<Sample>> {
    validate(prompts, params)?;
    let b = prompts.len();
    if b == 0 || params.max_new_tokens == 0 {
        return Ok(empty_samples(b));
    }
    let t = std::time::Instant::now();
    let (first, mut step) = padded_session(model, tokenizer, prompts, prefill_score_bytes)?;
    tracing::debug!(
        rows = b,
        longest = prompts.iter().map(Vec::len).max().unwrap_or(0),
        prefill_s = t.elapsed().as_secs_f64(),
        "padded prefill"
    );
    let rngs = row_rngs(params.seed, b);
    decode(first, rngs, params, tokenizer, constraint, &mut *step)
}

/// The model side of the padded sampler: prompts left-padded into one batch and prefilled in
/// row chunks, then a [`KvCache`] decoded one token per step. Returns the logits of every row's
/// first new token and the [`Step`] that feeds the next ones.
pub(crate) fn padded_session(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    prefill_score_bytes: usize,
) -> Result<(Tensor, Box<Step<'static>>)> {
    let b = prompts.len();
    // Matrices in the compute dtype once (a bf16 copy on CUDA), not at every decode step.
    let model = model.inference_view()?;
    let cfg = model.config().clone();
    let device = model.device().clone();
    let pad = tokenizer.stop_token_ids()[0];
    let l = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(b * l);
    let mut key_valid: Vec<Vec<bool>> = Vec::with_capacity(b);
    for p in prompts {
        let padn = l - p.len();
        ids.extend(std::iter::repeat_n(pad, padn));
        ids.extend(p);
        key_valid.push((0..l).map(|i| i >= padn).collect());
    }
    // Prefill in row chunks: the attention scores of a chunk are [rows, heads, L, L] f32, which
    // for 128 prompts of 2,500 tokens (a fifth RAGEN turn) would be 45 GB at once.
    let per_row = cfg.num_attention_heads * l * l * std::mem::size_of::<f32>();
    let rows_per_chunk = (prefill_score_bytes / per_row).clamp(1, b);
    let mut cache = KvCache::new(cfg.num_hidden_layers);
    let mut last = Vec::with_capacity(b.div_ceil(rows_per_chunk));
    for start in (0..b).step_by(rows_per_chunk) {
        let n = rows_per_chunk.min(b - start);
        let input = Tensor::from_slice(&ids[start * l..(start + n) * l], (n, l), &device)?;
        let mask = AttentionMask::new(&key_valid[start..start + n], l, &cfg, &device)?;
        let mut part = KvCache::new(cfg.num_hidden_layers);
        let hidden = model.forward_hidden(&input, &mask, Some(&mut part))?;
        last.push(hidden.narrow(1, l - 1, 1)?.squeeze(1)?);
        cache.append_rows(part)?;
    }
    let first = model.lm_logits(&Tensor::cat(&last, 0)?)?;
    let step = move |keep: Option<&[u32]>, next: Vec<u32>| -> Result<Tensor> {
        if let Some(keep) = keep {
            cache.select_rows(keep)?;
            key_valid = keep
                .iter()
                .map(|&i| key_valid[i as usize].clone())
                .collect();
        }
        for kv in &mut key_valid {
            kv.push(true);
        }
        let input = Tensor::from_vec(next, (key_valid.len(), 1), &device)?;
        let mask = AttentionMask::new(&key_valid, 1, &cfg, &device)?;
        let hidden = model.forward_hidden(&input, &mask, Some(&mut cache))?;
        model.lm_logits(&hidden.squeeze(1)?)
    };
    Ok((first, Box::new(step)))
}

/// [`sample_constrained`] with prefix caching (`docs/ragen-semantics.md`, "Prefix sharing in
/// rollouts"): prompt parts that rows of this call share, or that an earlier call on `cache`
/// already encoded (the history of a multi-turn trajectory), are not prefilled again; each row's
/// keys and values are read in place from the shared and cached segments ([`crate::prefix_cache`]).
/// The distributions sampled from are those of [`sample_constrained`] up to float rounding
/// (per-token log-probs within 1e-4 on the default model, `tests::real_model`), so with the same
/// seed the samples are the same except where a uniform draw falls within that rounding of the
/// boundary between two tokens. Fused CPU f32 models only ([`LlamaModel::shares_prefixes`]): the
/// caller decides whether to share prefixes, and runs [`sample_constrained`] when it cannot.
///
/// # Errors
/// As [`sample`]; [`crate::PolicyError::InvalidArgument`] for a model that cannot share prefixes.
pub fn sample_cached(
    model: &LlamaModel,
    tokenizer: &Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    constraint: Option<&Constraint>,
    cache: &mut PrefixCache,
) -> Result<Vec<Sample>> {
    if !model.shares_prefixes() {
        return Err(PolicyError::arg(
            "model",
            "prefix sharing needs the fused CPU f32 model (LlamaModel::shares_prefixes)",
        ));
    }
    validate(prompts, params)?;
    let b = prompts.len();
    if b == 0 || params.max_new_tokens == 0 {
        return Ok(empty_samples(b));
    }
    let (first, rows, mut step) = cached_session(model, prompts, params.max_new_tokens, cache)?;
    let rngs = row_rngs(params.seed, b);
    let out = decode(first, rngs, params, tokenizer, constraint, &mut *step);
    drop(step);
    cache.finish(&rows);
    out
}

/// The model side of the cached sampler: `prompts` planned on `cache` (room for `max_new`
/// tokens per row), their new parts prefilled packed, then one token per row and step. Returns
/// the logits of every row's first new token, the rows' own segments (for
/// [`PrefixCache::finish`] once the [`Step`] is dropped) and the step.
pub(crate) fn cached_session<'c>(
    model: &LlamaModel,
    prompts: &[Vec<u32>],
    max_new: usize,
    cache: &'c mut PrefixCache,
) -> Result<(Tensor, Vec<SegId>, Box<Step<'c>>)> {
    let model = model.detached();
    let plan = cache.plan(model.config(), prompts, max_new);
    let store = cache.store_mut();
    // Prefill in chunks of whole sequences (shared segments before the rows that read them).
    let rows_at: Vec<usize> = plan.rows.iter().map(|r| r.1).collect();
    let mut last = Vec::new();
    let mut start = 0;
    while start < plan.seqs.len() {
        let mut end = start;
        let mut tokens = 0;
        while end < plan.seqs.len() && (end == start || tokens < PREFILL_TOKENS) {
            tokens += plan.seqs[end].1.len();
            end += 1;
        }
        let seqs: Vec<(SegId, &[u32])> = plan.seqs[start..end]
            .iter()
            .map(|(seg, t)| (*seg, t.as_slice()))
            .collect();
        let want: Vec<usize> = rows_at
            .iter()
            .filter(|&&i| (start..end).contains(&i))
            .map(|&i| i - start)
            .collect();
        let hidden = model.forward_packed(store, &seqs, &want)?;
        if !want.is_empty() {
            last.push(hidden);
        }
        start = end;
    }
    let first = model.lm_logits(&Tensor::cat(&last, 0)?)?;
    let rows: Vec<SegId> = plan.rows.iter().map(|r| r.0).collect();
    let mut leaves = rows.clone();
    let step = move |keep: Option<&[u32]>, next: Vec<u32>| -> Result<Tensor> {
        if let Some(keep) = keep {
            leaves = keep.iter().map(|&i| leaves[i as usize]).collect();
        }
        let seqs: Vec<(SegId, &[u32])> = leaves
            .iter()
            .zip(&next)
            .map(|(&seg, t)| (seg, std::slice::from_ref(t)))
            .collect();
        let want: Vec<usize> = (0..seqs.len()).collect();
        let hidden = model.forward_packed(store, &seqs, &want)?;
        model.lm_logits(&hidden)
    };
    Ok((first, rows, Box::new(step)))
}

/// New tokens of one packed prefill forward (whole sequences; one longer sequence goes alone).
const PREFILL_TOKENS: usize = 4096;

/// The model side of a decode loop: given the rows to keep (indices into the active rows, when
/// some finished) and the token chosen for each kept row, the logits `[rows, V]` of their next
/// tokens.
pub(crate) type Step<'a> = dyn FnMut(Option<&[u32]>, Vec<u32>) -> Result<Tensor> + 'a;

/// The token-choice loop shared by both samplers: `first` holds the logits `[b, V]` of every
/// row's first new token, row `i` draws from `rngs[i]`; rows leave when they stop.
fn decode(
    first: Tensor,
    mut rngs: Vec<ChaCha8Rng>,
    params: &SamplingParams,
    tokenizer: &Tokenizer,
    constraint: Option<&Constraint>,
    step: &mut Step<'_>,
) -> Result<Vec<Sample>> {
    let b = rngs.len();
    let mut out = empty_samples(b);
    let stop_ids = tokenizer.stop_token_ids().to_vec();
    // Constrained decoding hook ([`crate::constrain`]): one grammar state machine per row.
    let mut guides: Vec<Option<Guide>> = (0..b).map(|_| constraint.map(Guide::new)).collect();
    let mut scans: Vec<StopScan> = (0..b)
        .map(|_| StopScan::new(tokenizer, &params.stop))
        .collect();
    let mut logits = first; // [n_active, V]
    let mut active: Vec<usize> = (0..b).collect();
    let mut done = vec![false; b];
    // Where a call's time goes, for `RAGEN_LOG=ragen_gym_policy::sampling=debug`: choosing
    // tokens (on a GPU this waits for the step's kernels), the host's per-row work, the model's
    // step (on a GPU mostly kernel launches).
    let (mut choose_s, mut host_s, mut step_s, mut steps) = (0.0, 0.0, 0.0, 0usize);
    loop {
        let t = std::time::Instant::now();
        // Without a constraint every row is free: on a GPU the tokens are chosen next to the
        // logits (sampling/device.rs). Constrained rows mask host copies of their logits.
        let (free, rows): (Option<Picked>, Vec<Vec<f32>>) = match constraint {
            None => (
                Some(next_tokens(&logits, params, &mut rngs, &active)?),
                Vec::new(),
            ),
            Some(_) => (None, logits.to_vec2()?),
        };
        choose_s += t.elapsed().as_secs_f64();
        let t = std::time::Instant::now();
        steps += 1;
        let mut next = Vec::with_capacity(active.len());
        for (i, &row) in active.iter().enumerate() {
            // Constrained decoding hook ([`crate::constrain`]): the row's guide may force the
            // token or restrict the choice to an allowed set (the masked logits feed the usual
            // sampler).
            let remaining = params.max_new_tokens - out[row].tokens.len();
            let rule = guides[row]
                .as_mut()
                .map_or(Next::Free, |g| g.next(remaining));
            let free_pick = free
                .as_ref()
                .map(|(tokens, logprobs)| (tokens[i], logprobs[i]));
            let (tok, lp) = pick_token(
                &rule,
                free_pick,
                rows.get(i).map(Vec::as_slice),
                params,
                &mut rngs[row],
            );
            if let Some(g) = guides[row].as_mut() {
                g.advance(tok);
            }
            let s = &mut out[row];
            s.tokens.push(tok);
            s.logprobs.push(lp);
            s.kinds.push(rule.kind());
            if let Some(reason) = finish_reason(s, &stop_ids, params, &mut scans[row])? {
                s.finish_reason = reason;
                done[row] = true;
            }
            next.push(tok);
        }
        let keep: Vec<u32> = (0..active.len())
            .filter(|&i| !done[active[i]])
            .map(|i| i as u32)
            .collect();
        host_s += t.elapsed().as_secs_f64();
        if keep.is_empty() {
            break;
        }
        let t = std::time::Instant::now();
        if keep.len() < active.len() {
            active = keep.iter().map(|&i| active[i as usize]).collect();
            next = keep.iter().map(|&i| next[i as usize]).collect();
            logits = step(Some(&keep), next)?;
        } else {
            logits = step(None, next)?;
        }
        step_s += t.elapsed().as_secs_f64();
    }
    let t = std::time::Instant::now();
    for s in &mut out {
        s.text = tokenizer.decode(&s.tokens, true)?;
    }
    tracing::debug!(
        rows = b,
        steps,
        choose_s,
        host_s,
        step_s,
        text_s = t.elapsed().as_secs_f64(),
        "decode"
    );
    Ok(out)
}

/// One random stream per row: the seed's ChaCha8 stream `i` for row `i`, so a row's samples do
/// not depend on the other rows of the batch.
fn row_rngs(seed: u64, rows: usize) -> Vec<ChaCha8Rng> {
    (0..rows)
        .map(|i| {
            let mut r = ChaCha8Rng::seed_from_u64(seed);
            r.set_stream(i as u64);
            r
        })
        .collect()
}

/// One row's token under `rule` and its log-prob: the forced token (log-prob 0), the token
/// already picked for a free row (`free`), or one chosen on the host from the row's `logits`,
/// masked to the allowed set of a choice.
fn pick_token(
    rule: &Next,
    free: Option<(u32, f32)>,
    logits: Option<&[f32]>,
    params: &SamplingParams,
    rng: &mut ChaCha8Rng,
) -> (u32, f32) {
    match (rule, free) {
        (Next::Forced(t), _) => (*t, 0.0),
        (Next::Free, Some(picked)) => picked,
        (Next::Free | Next::Choice(_), _) => {
            let logits = logits.expect("constrained rows come with host logits");
            let masked;
            let logit = match rule {
                Next::Choice(set) => {
                    masked = mask_logits(logits, set);
                    &masked[..]
                }
                _ => logits,
            };
            let tok = choose(logit, params, rng);
            (tok, log_softmax(logit)[tok as usize])
        }
    }
}

/// Why a row stops after its latest token, if it does: a stop token, a stop string in its
/// text (`scan`, fed every token of the row once), or the token budget.
fn finish_reason(
    s: &Sample,
    stop_ids: &[u32],
    params: &SamplingParams,
    scan: &mut StopScan<'_>,
) -> Result<Option<FinishReason>> {
    let last = s.tokens.last().copied();
    // The scan sees every token, a stop token too, so its text stays the row's.
    let stop_string = scan.push(&s.tokens)?;
    if last.is_some_and(|t| stop_ids.contains(&t)) {
        return Ok(Some(FinishReason::Stop));
    }
    if stop_string {
        return Ok(Some(FinishReason::StopString));
    }
    Ok((s.tokens.len() >= params.max_new_tokens).then_some(FinishReason::Length))
}

/// Tokens chosen for the active rows and their log-probs.
type Picked = (Vec<u32>, Vec<f32>);

/// The next token of each active row (`active` ascending; `rngs` indexed by row) and its
/// log-prob: on the device when the logits live on a GPU (`sampling/device.rs`), else on the host.
fn next_tokens(
    logits: &Tensor,
    params: &SamplingParams,
    rngs: &mut [ChaCha8Rng],
    active: &[usize],
) -> Result<Picked> {
    if device::applies(logits.device(), params) {
        let mut rows: Vec<&mut ChaCha8Rng> = rngs
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| active.binary_search(i).is_ok())
            .map(|(_, r)| r)
            .collect();
        return device::choose_tokens(logits, params.temperature, &mut rows);
    }
    let rows: Vec<Vec<f32>> = logits.to_vec2()?;
    Ok(active
        .iter()
        .zip(&rows)
        .map(|(&row, logit)| {
            let tok = choose(logit, params, &mut rngs[row]);
            (tok, log_softmax(logit)[tok as usize])
        })
        .unzip())
}

/// Log-softmax of one row in f64 accumulation.
pub(crate) fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let lse = sum.ln() as f32 + max;
    logits.iter().map(|&x| x - lse).collect()
}

/// Pick the next token: argmax when greedy, else temperature + top-k + top-p sampling.
pub(crate) fn choose(logits: &[f32], p: &SamplingParams, rng: &mut ChaCha8Rng) -> u32 {
    let argmax = || {
        let mut best = 0;
        for (i, &x) in logits.iter().enumerate() {
            if x > logits[best] {
                best = i;
            }
        }
        best as u32
    };
    if p.temperature == 0.0 {
        return argmax();
    }
    let t = p.temperature as f32;
    let mut cand: Vec<(u32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &x)| (i as u32, x / t))
        .collect();
    let truncate = p.top_k > 0 || p.top_p < 1.0;
    if truncate {
        cand.sort_unstable_by(|a, b| b.1.total_cmp(&a.1));
        if p.top_k > 0 {
            cand.truncate(p.top_k);
        }
    }
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let mut probs: Vec<f64> = cand.iter().map(|c| f64::from(c.1 - max).exp()).collect();
    let total: f64 = probs.iter().sum();
    for q in &mut probs {
        *q /= total;
    }
    if p.top_p < 1.0 {
        let mut acc = 0.0;
        let mut keep = probs.len();
        for (i, q) in probs.iter().enumerate() {
            acc += q;
            if acc >= p.top_p {
                keep = i + 1;
                break;
            }
        }
        probs.truncate(keep);
        cand.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut u = rng.random::<f64>() * total;
    for (c, q) in cand.iter().zip(&probs) {
        u -= q;
        if u <= 0.0 {
            return c.0;
        }
    }
    cand.last().map_or_else(argmax, |c| c.0)
}
