//! Prefix caching (`docs/benchmarks.md`, "`bench iteration`"): sampling with shared and cached
//! prefixes gives the tokens of sampling without them, on a tiny random model, several env groups,
//! several turns, calls that split groups, histories that do not extend the sampled tokens
//! exactly, constrained decoding, and a memory cap that forces the fallback.

use std::sync::Arc;

use crate::constrain::{ActionGrammar, ActionIndex, Constraint, Thinking};
use crate::tests::{tiny_cfg, tiny_loaded};
use crate::{
    LlamaModel, Message, ModelConfig, PrefixCache, Sample, SamplingParams, Tokenizer,
    sample_cached, sample_constrained,
};

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
