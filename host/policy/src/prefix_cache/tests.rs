//! Prefix caching (`docs/ragen-semantics.md`, "Prefix sharing in rollouts"): sampling with shared
//! and cached prefixes gives the tokens of sampling without them, on a tiny random model, several
//! env groups, several turns, calls that split groups, histories that do not extend the sampled
//! tokens exactly, constrained decoding, and a memory cap that forces the fallback; common starts
//! are shared across groups as a tree; and teacher forcing ([`forced_logprobs`]) gives the same
//! per-token log-probs through both samplers' model sides.

use std::sync::Arc;

use candle_core::Tensor;

use crate::constrain::{ActionGrammar, ActionIndex, Constraint, Thinking};
use crate::sampling::{Step, cached_session, log_softmax, padded_session};
use crate::tests::{tiny_cfg, tiny_loaded};
use crate::{
    LlamaModel, Message, ModelConfig, PrefixCache, Sample, SamplingParams, Tokenizer,
    sample_cached, sample_constrained,
};

/// Teacher forcing through a sampler's model side (`first`, the logits of each row's first new
/// token, and `step`, from [`padded_session`] or [`cached_session`]): the log-prob at
/// temperature 1 of each row's `tokens` (non-empty), fed one per step as decoding feeds sampled
/// tokens (a row's last token is not fed).
pub(crate) fn forced_logprobs(
    first: Tensor,
    tokens: &[Vec<u32>],
    step: &mut Step<'_>,
) -> Vec<Vec<f32>> {
    assert!(tokens.iter().all(|t| !t.is_empty()), "nothing to force");
    let mut out: Vec<Vec<f32>> = vec![Vec::new(); tokens.len()];
    let mut active: Vec<usize> = (0..tokens.len()).collect();
    let mut logits = first;
    loop {
        let rows: Vec<Vec<f32>> = logits.to_vec2().unwrap();
        for (&r, row) in active.iter().zip(&rows) {
            let t = tokens[r][out[r].len()];
            out[r].push(log_softmax(row)[t as usize]);
        }
        let keep: Vec<u32> = (0..active.len())
            .filter(|&i| out[active[i]].len() < tokens[active[i]].len())
            .map(|i| i as u32)
            .collect();
        if keep.is_empty() {
            return out;
        }
        let all = keep.len() == active.len();
        active = keep.iter().map(|&i| active[i as usize]).collect();
        let next = active
            .iter()
            .map(|&r| tokens[r][out[r].len() - 1])
            .collect();
        logits = step((!all).then_some(&keep[..]), next).unwrap();
    }
}

/// Per-token log-probs of `tokens` after `prompts` through the padded sampler's model side and
/// through the cached one on `cache` (which keeps its entries for a later turn).
pub(crate) fn forced_both(
    model: &LlamaModel,
    tok: &Tokenizer,
    prompts: &[Vec<u32>],
    tokens: &[Vec<u32>],
    cache: &mut PrefixCache,
) -> (Vec<Vec<f32>>, Vec<Vec<f32>>) {
    let (first, mut step) = padded_session(model, tok, prompts, 1 << 30).unwrap();
    let padded = forced_logprobs(first, tokens, &mut *step);
    let max_new = tokens.iter().map(Vec::len).max().unwrap_or(0);
    let (first, rows, mut step) = cached_session(model, prompts, max_new, cache).unwrap();
    let cached = forced_logprobs(first, tokens, &mut *step);
    drop(step);
    cache.finish(&rows);
    (padded, cached)
}

/// The largest |a - b| over every token of every row.
pub(crate) fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

/// How a multi-turn rollout is sampled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// The left-padded batch sampler, no cache.
    Padded,
    /// The packed sampler with the cache off.
    Off,
    /// The packed sampler with sharing and entries kept up to this many bytes.
    Cached(usize),
}

struct Rollout {
    /// Samples per turn, per row (`None` once the row stopped).
    samples: Vec<Vec<Option<Sample>>>,
    /// Prompt and prefilled tokens (cache modes).
    prompt_tokens: u64,
    prefilled_tokens: u64,
    evicted: u64,
}

/// `groups` env groups of `size` members: members of a group start from the same prompt; each
/// turn appends the row's response (its sampled tokens, the last one dropped for odd rows, as
/// a re-tokenised history may differ), an observation of its own and the assistant header.
/// Prompts are sampled in calls of `call` rows, so calls split groups.
fn rollout(
    model: &LlamaModel,
    tok: &Tokenizer,
    constraint: Option<&Constraint>,
    mode: Mode,
) -> Rollout {
    let (groups, size, turns, call) = (3, 4, 3, 5);
    let mut cache = match mode {
        Mode::Cached(bytes) => PrefixCache::new(bytes),
        _ => PrefixCache::disabled(),
    };
    let mut prompts: Vec<Vec<u32>> = (0..groups * size)
        .map(|i| {
            let state = format!("group {} starts here: ###..#", i / size);
            let mut p = tok
                .encode_chat(&[Message::system("You play."), Message::user(state)], true)
                .unwrap();
            p.extend(tok.encode("<think>").unwrap());
            p
        })
        .collect();
    let mut alive: Vec<bool> = vec![true; prompts.len()];
    let mut samples = Vec::new();
    for turn in 0..turns {
        let active: Vec<usize> = (0..prompts.len()).filter(|&i| alive[i]).collect();
        let mut out: Vec<Option<Sample>> = vec![None; prompts.len()];
        for (c, rows) in active.chunks(call).enumerate() {
            let batch: Vec<Vec<u32>> = rows.iter().map(|&i| prompts[i].clone()).collect();
            let params = SamplingParams {
                temperature: 1.0,
                max_new_tokens: 10,
                seed: 100 * turn as u64 + c as u64,
                ..Default::default()
            };
            let got = match mode {
                Mode::Padded => sample_constrained(model, tok, &batch, &params, constraint),
                _ => sample_cached(model, tok, &batch, &params, constraint, &mut cache),
            }
            .unwrap();
            for (&i, s) in rows.iter().zip(got) {
                out[i] = Some(s);
            }
        }
        for &i in &active {
            let s = out[i].as_ref().unwrap();
            // Row 5 stops after the first turn: its entry is never continued.
            if i == 5 {
                alive[i] = false;
                continue;
            }
            let keep = if i % 2 == 1 {
                s.tokens.len().saturating_sub(1)
            } else {
                s.tokens.len()
            };
            prompts[i].extend_from_slice(&s.tokens[..keep]);
            prompts[i].push(tok.im_end_id());
            let obs = format!("Reward: {}\nTurn {}: row {i} sees .#{}", i % 3, turn + 2, i);
            prompts[i].extend(tok.encode_chat(&[Message::user(obs)], true).unwrap());
        }
        samples.push(out);
    }
    let st = cache.stats();
    Rollout {
        samples,
        prompt_tokens: st.prompt_tokens,
        prefilled_tokens: st.prefilled_tokens,
        evicted: st.evicted_entries,
    }
}

fn assert_same(a: &Rollout, b: &Rollout, what: &str) {
    for (turn, (ra, rb)) in a.samples.iter().zip(&b.samples).enumerate() {
        for (row, (x, y)) in ra.iter().zip(rb).enumerate() {
            let (Some(x), Some(y)) = (x, y) else {
                assert_eq!(x.is_some(), y.is_some(), "{what}: turn {turn} row {row}");
                continue;
            };
            assert_eq!(x.tokens, y.tokens, "{what}: turn {turn} row {row}");
            assert_eq!(x.kinds, y.kinds, "{what}: turn {turn} row {row}");
            for (p, q) in x.logprobs.iter().zip(&y.logprobs) {
                assert!(
                    (p - q).abs() < 1e-5,
                    "{what}: turn {turn} row {row}: {p} vs {q}"
                );
            }
        }
    }
}

fn qwen_cfg() -> ModelConfig {
    let mut c = tiny_cfg();
    c.model_type = "qwen2".into();
    c.architectures = vec!["Qwen2ForCausalLM".into()];
    c.tie_word_embeddings = false;
    c
}

#[test]
fn cached_sampling_gives_the_tokens_of_uncached_sampling() {
    for cfg in [tiny_cfg(), qwen_cfg()] {
        let loaded = tiny_loaded(cfg, 41);
        let model = loaded.frozen_model().unwrap();
        let tok = &loaded.tokenizer;
        let padded = rollout(&model, tok, None, Mode::Padded);
        let off = rollout(&model, tok, None, Mode::Off);
        let cached = rollout(&model, tok, None, Mode::Cached(1 << 30));
        assert_same(&padded, &off, "padded vs packed without sharing");
        assert_same(&padded, &cached, "padded vs packed with sharing");
        // Without sharing every prompt token is prefilled; with it, each group's first prompt
        // once and then only what each turn adds.
        assert_eq!(off.prefilled_tokens, off.prompt_tokens);
        assert!(
            cached.prefilled_tokens * 3 < cached.prompt_tokens,
            "{} of {} prompt tokens prefilled",
            cached.prefilled_tokens,
            cached.prompt_tokens
        );
        assert_eq!(cached.evicted, 0);
        // A cap below one turn's caches: entries are dropped and prompts prefilled again, with
        // the same tokens.
        let capped = rollout(&model, tok, None, Mode::Cached(4_000));
        assert_same(&padded, &capped, "padded vs packed with a small cap");
        assert!(capped.evicted > 0);
        assert!(capped.prefilled_tokens > cached.prefilled_tokens);
        assert!(capped.prefilled_tokens < capped.prompt_tokens);
    }
}

#[test]
fn cached_sampling_keeps_each_rows_constraint() {
    // Constrained decoding ([`crate::constrain`]) with thinking on: every row runs its own
    // grammar state over the shared prefix.
    let loaded = tiny_loaded(tiny_cfg(), 43);
    let model = loaded.frozen_model().unwrap();
    let tok = &loaded.tokenizer;
    let grammar = ActionGrammar {
        names: vec!["Left".into(), "Up".into()],
        separator: "||".into(),
        max_actions: 2,
        min_actions: 1,
        case_insensitive: true,
    };
    let c = Constraint {
        index: Arc::new(ActionIndex::new(&grammar, tok).unwrap()),
        thinking: Thinking::On {
            max_think_tokens: Some(3),
        },
    };
    let padded = rollout(&model, tok, Some(&c), Mode::Padded);
    let cached = rollout(&model, tok, Some(&c), Mode::Cached(1 << 30));
    assert_same(&padded, &cached, "constrained: padded vs cached");
    let forced = padded
        .samples
        .iter()
        .flatten()
        .flatten()
        .flat_map(|s| &s.kinds)
        .filter(|k| **k == crate::TokenKind::Forced)
        .count();
    assert!(forced > 0, "the constraint forced no token");
}

/// Prompts of `groups` groups of `size` identical rows: a common instruction, then a group's own
/// state (the shape of RAGEN's env groups; Bandit's differ only in the arm order).
fn grouped_prompts(tok: &Tokenizer, groups: usize, size: usize) -> Vec<Vec<u32>> {
    (0..groups * size)
        .map(|i| {
            let user = format!(
                "Pick one of two arms; the reward is paid at once. State: group {} of many.",
                i / size
            );
            tok.encode_chat(&[Message::system("You play."), Message::user(user)], true)
                .unwrap()
        })
        .collect()
}

#[test]
fn common_starts_are_shared_across_groups_as_a_tree() {
    // 3 groups of 4: the instruction up to the group number is common to all 12 rows, the rest
    // of a group's prompt to its 4 rows. Each part is prefilled once: the common part, then per
    // group its own part less its last token, then one token per row.
    let loaded = tiny_loaded(tiny_cfg(), 47);
    let model = loaded.frozen_model().unwrap();
    let tok = &loaded.tokenizer;
    let prompts = grouped_prompts(tok, 3, 4);
    let len = prompts[0].len();
    let common = prompts[0]
        .iter()
        .zip(&prompts[4])
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common > 20 && prompts.iter().all(|p| p.len() == len));
    let mut cache = PrefixCache::new(1 << 30);
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 6,
        seed: 5,
        ..Default::default()
    };
    let cached = sample_cached(&model, tok, &prompts, &params, None, &mut cache).unwrap();
    let st = cache.stats();
    assert_eq!(st.prompt_tokens, (12 * len) as u64);
    assert_eq!(
        st.prefilled_tokens,
        (common + 3 * (len - common - 1) + 12) as u64
    );
    let padded = sample_constrained(&model, tok, &prompts, &params, None).unwrap();
    for (row, (a, b)) in padded.iter().zip(&cached).enumerate() {
        assert_eq!(a.tokens, b.tokens, "row {row}");
    }
}

#[test]
fn teacher_forced_logprobs_agree_with_and_without_sharing() {
    // The same token sequences through the padded sampler and through the cached one (shared
    // starts across groups in turn 1, then each row continuing its turn-1 entry in turn 2):
    // equal per-token log-probs up to float rounding.
    for cfg in [tiny_cfg(), qwen_cfg()] {
        let loaded = tiny_loaded(cfg, 53);
        let model = loaded.frozen_model().unwrap();
        let tok = &loaded.tokenizer;
        let mut prompts = grouped_prompts(tok, 2, 3);
        let tokens: Vec<Vec<u32>> = (0..prompts.len())
            .map(|i| {
                (0..5 + i as u32)
                    .map(|j| 40 + (7 * i as u32 + j) % 50)
                    .collect()
            })
            .collect();
        let mut cache = PrefixCache::new(1 << 30);
        let (a, b) = forced_both(&model, tok, &prompts, &tokens, &mut cache);
        assert!(
            max_abs_diff(&a, &b) < 1e-5,
            "turn 1: {}",
            max_abs_diff(&a, &b)
        );
        for (i, p) in prompts.iter_mut().enumerate() {
            p.extend(&tokens[i]);
            let obs = format!("Reward: 0.{i}\nTurn 2: row {i}");
            p.extend(tok.encode_chat(&[Message::user(obs)], true).unwrap());
        }
        let before = cache.stats();
        let (a, b) = forced_both(&model, tok, &prompts, &tokens, &mut cache);
        assert!(
            max_abs_diff(&a, &b) < 1e-5,
            "turn 2: {}",
            max_abs_diff(&a, &b)
        );
        let st = cache.stats();
        assert!(st.reused_tokens > before.reused_tokens, "{st:?}");
    }
}

#[test]
fn a_model_that_cannot_share_prefixes_is_refused_not_sampled_without_sharing() {
    // bf16 compute (what a CUDA device computes in) stands in for a GPU model on the CPU.
    let loaded = tiny_loaded(tiny_cfg(), 59);
    let model = loaded.frozen_model().unwrap();
    assert!(model.shares_prefixes());
    let gpu_like = model.with_compute_dtype(candle_core::DType::BF16);
    assert!(!gpu_like.shares_prefixes());
    let tok = &loaded.tokenizer;
    let prompts = grouped_prompts(tok, 1, 2);
    let params = SamplingParams {
        max_new_tokens: 4,
        ..Default::default()
    };
    let mut cache = PrefixCache::new(1 << 20);
    let err = sample_cached(&gpu_like, tok, &prompts, &params, None, &mut cache).unwrap_err();
    assert!(err.to_string().contains("shares_prefixes"), "{err}");
    assert_eq!(cache.stats().prompt_tokens, 0);
}

/// [`PrefixCache::plan`] and [`PrefixCache::finish`] with the sampler stood in for: each planned
/// sequence's tokens, then the row's `sampled` tokens, are written to their segments with zero
/// keys and values. Returns the call's reused prompt tokens.
fn fake_call(
    cache: &mut PrefixCache,
    cfg: &ModelConfig,
    prompt: &[u32],
    sampled: &[u32],
    max_new: usize,
) -> u64 {
    let before = cache.stats().reused_tokens;
    let plan = cache.plan(cfg, &[prompt.to_vec()], max_new);
    let kvd = cfg.num_kv_heads() * cfg.head_dim();
    let store = cache.store_mut();
    let mut write = |seg, toks: &[u32]| {
        let s = store.get_mut(seg);
        s.tokens.extend_from_slice(toks);
        for buf in s.k.iter_mut().chain(s.v.iter_mut()) {
            buf.extend(std::iter::repeat_n(0.0f32, toks.len() * kvd));
        }
    };
    for (seg, toks) in &plan.seqs {
        write(*seg, toks);
    }
    write(plan.rows[0].0, sampled);
    cache.finish(&[plan.rows[0].0]);
    cache.stats().reused_tokens - before
}

/// Two turns of four episodes, one row a call, in the same order each turn (a rollout's turn
/// loop), under a cap of about 2.5 first-turn entries (12 positions each: a 10-token prompt and
/// 2 sampled tokens). Least recently used (no hint): turn 0 keeps the entries of rows 2 and 3,
/// and in turn 1 rows 0 and 1 drop them before rows 2 and 3 read them, so turn 1 reuses
/// nothing. With each turn's prompts announced ([`PrefixCache::expect`]): turn 0 drops the newest
/// entry when it needs room and keeps rows 0 and 3; in turn 1 row 0 continues its entry (12
/// tokens), rows 1 and 2 make room by dropping the entries the turn itself made, never row 3's
/// pending one, and row 3 continues its entry (12 tokens): 24 reused tokens.
#[test]
fn announced_turns_keep_the_entries_a_cyclic_turn_needs_next() {
    let cfg = tiny_cfg();
    let per_position = 2 * cfg.num_hidden_layers * cfg.num_kv_heads() * cfg.head_dim() * 4 + 4;
    let cap = 30 * per_position + per_position / 2;
    let first: Vec<Vec<u32>> = (0..4u32)
        .map(|i| (0..10).map(|t| 100 * (i + 1) + t).collect())
        .collect();
    let sampled = |i: u32, turn: u32| vec![10 + 2 * i + 20 * turn, 11 + 2 * i + 20 * turn];
    let run = |announce: bool| -> (u64, u64) {
        let mut cache = PrefixCache::new(cap);
        let mut prompts = first.clone();
        let mut reused = [0u64; 2];
        for (turn, reused) in reused.iter_mut().enumerate() {
            if announce {
                cache.expect(&prompts);
            }
            for (i, p) in prompts.iter_mut().enumerate() {
                let s = sampled(i as u32, turn as u32);
                *reused += fake_call(&mut cache, &cfg, p, &s, 2);
                p.extend_from_slice(&s);
                p.extend([90, 91, 92 + i as u32]);
            }
        }
        assert_eq!(reused[0], 0, "nothing to reuse in the first turn");
        (reused[1], cache.stats().evicted_entries)
    };
    let (lru, lru_evicted) = run(false);
    let (hinted, hinted_evicted) = run(true);
    assert_eq!(
        lru, 0,
        "least recently used drops each entry before its row reads it"
    );
    assert_eq!(hinted, 24, "rows 0 and 3 continue their 12-token entries");
    assert!(
        hinted_evicted <= lru_evicted,
        "{hinted_evicted} vs {lru_evicted}"
    );
}
