//! Tests of constrained action decoding (`docs/ragen-semantics.md` §5, "Constrained action
//! decoding") on tiny byte-level vocabularies, a tiny random model, and the default model's
//! tokenizer.

use std::sync::Arc;

use candle_core::Tensor;

use super::*;
use crate::tests::{byte_tokenizer, tiny_cfg, tiny_loaded, tiny_tokenizer};
use crate::{
    FinishReason, LoadedModel, Policy, PolicyError, SamplingParams, TokenBatch, Tokenizer,
    Trainable, sample_constrained, score,
};

const MERGED: [&str; 12] = [
    "Left",
    "ĠLeft",
    "Le",
    "ft",
    "left",
    "Up",
    "ĠUp",
    "||",
    "Ġ||",
    "</",
    "answer",
    "</answer>",
];

fn grammar(names: &[&str], max: usize, case_insensitive: bool) -> ActionGrammar {
    ActionGrammar {
        names: names.iter().map(|s| s.to_string()).collect(),
        separator: "||".into(),
        max_actions: max,
        min_actions: 1,
        case_insensitive,
    }
}

/// The constraint of `g` without thinking: the answer starts right after `<answer>`.
fn answer_only(g: &ActionGrammar, tok: &Tokenizer) -> Constraint {
    Constraint {
        index: Arc::new(ActionIndex::new(g, tok).unwrap()),
        thinking: Thinking::Off,
    }
}

/// `grammar(names, max, true)` holding each answer open until `min` names.
fn at_least(names: &[&str], max: usize, min: usize) -> ActionGrammar {
    ActionGrammar {
        min_actions: min,
        ..grammar(names, max, true)
    }
}

fn id(tok: &Tokenizer, s: &str) -> u32 {
    tok.token_to_id(s)
        .unwrap_or_else(|| panic!("no token {s:?}"))
}

fn ids(tok: &Tokenizer, toks: &[&str]) -> Vec<u32> {
    let mut v: Vec<u32> = toks.iter().map(|s| id(tok, s)).collect();
    v.sort_unstable();
    v
}

#[test]
fn first_tokens_are_every_spelling_of_every_name() {
    let tok = byte_tokenizer(|_| true, &MERGED);
    let ix = ActionIndex::new(&grammar(&["Left", "Up"], 2, true), &tok).unwrap();
    // Any case (the host maps names case-insensitively), with or without the leading space,
    // whole or in pieces; nothing that cannot start a name ("ft", "<", "R", "||").
    let want = ids(
        &tok,
        &[
            "L", "l", "U", "u", "Ġ", "Left", "ĠLeft", "Le", "left", "Up", "ĠUp",
        ],
    );
    assert_eq!(ix.first_tokens(), want.as_slice());
    let exact = ActionIndex::new(&grammar(&["Left", "Up"], 2, false), &tok).unwrap();
    let want = ids(&tok, &["L", "U", "Ġ", "Left", "ĠLeft", "Le", "Up", "ĠUp"]);
    assert_eq!(exact.first_tokens(), want.as_slice());
    // "Left" + "</answer>" + end of turn is the shortest answer.
    assert_eq!(ix.min_answer_tokens(), 2);
}

#[test]
fn replay_follows_the_grammar_and_caps_the_number_of_actions() {
    let tok = byte_tokenizer(|_| true, &MERGED);
    let c = answer_only(&grammar(&["Left", "Up"], 2, true), &tok);
    let eot = tok.im_end_id();
    let seq = |toks: &[&str]| -> Vec<u32> { toks.iter().map(|s| id(&tok, s)).collect() };
    // " Left || up</answer>" then the end of turn.
    let good = seq(&["ĠLeft", "Ġ||", "Ġ", "u", "p", "</", "answer", ">"]);
    let mut with_eot = good.clone();
    with_eot.push(eot);
    let kinds = c.replay(&with_eot).unwrap();
    assert!(matches!(kinds[0], TokenKind::Choice(_)));
    // After "</answer" only ">" continues: forced; then the end-of-turn token: forced.
    assert_eq!(kinds[7], TokenKind::Forced);
    assert_eq!(kinds[8], TokenKind::Forced);
    // After two names (the cap) the separator is not allowed; nor is anything after `</answer>`
    // but the end of turn.
    let e = c
        .replay(&seq(&["Left", "||", "Up", "||"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("position 3"), "{e}");
    let mut extra = good.clone();
    extra.push(id(&tok, "L"));
    assert!(c.replay(&extra).is_err());
    // A name that is not an action, and a double space, are refused.
    assert!(c.replay(&seq(&["R"])).is_err());
    assert!(c.replay(&seq(&["Ġ", "Ġ"])).is_err());
}

#[test]
fn min_actions_holds_the_answer_open_until_that_many_names() {
    let tok = byte_tokenizer(|_| true, &MERGED);
    let [c1, c2, c3] = [1, 2, 3].map(|min| answer_only(&at_least(&["Left", "Up"], 3, min), &tok));
    let eot = tok.im_end_id();
    let seq = |toks: &[&str]| -> Vec<u32> {
        let mut v: Vec<u32> = toks.iter().map(|s| id(&tok, s)).collect();
        v.push(eot);
        v
    };
    let one = seq(&["Up", "</answer>"]);
    let two = seq(&["Up", "||", "Left", "</answer>"]);
    let three = seq(&["Up", "||", "Left", "||", "Up", "</answer>"]);
    // min 1 (RAGEN's freedom): any count from 1 to 3.
    for s in [&one, &two, &three] {
        assert!(c1.replay(s).is_ok());
    }
    // min 2: closing after one name is refused at the close (position 1), two or three pass.
    let e = c2.replay(&one).unwrap_err().to_string();
    assert!(e.contains("position 1"), "{e}");
    assert!(c2.replay(&two).is_ok() && c2.replay(&three).is_ok());
    // min 3 = max: only the whole turn. Closing after two names is refused at the close
    // (position 3), and after the third name only the close is allowed.
    let e = c3.replay(&two).unwrap_err().to_string();
    assert!(e.contains("position 3"), "{e}");
    assert!(c3.replay(&three).is_ok());
    assert!(
        c3.replay(&seq(&["Up", "||", "Left", "||", "Up", "||"]))
            .is_err()
    );
    // The shortest answer grows by a separator and a name per required name: "Up" +
    // "</answer>" is 2 tokens; "Up" + "||" + "Up" + "||" + "Up" + "</answer>" is 6.
    assert_eq!(c1.index.min_answer_tokens(), 2);
    assert_eq!(c2.index.min_answer_tokens(), 4);
    assert_eq!(c3.index.min_answer_tokens(), 6);
}

#[test]
fn thinking_forces_the_answer_tag_after_think_and_when_the_budget_runs_out() {
    let mut extra = MERGED.to_vec();
    extra.extend([">Ċ", "><"]);
    let tok = byte_tokenizer(|_| true, &extra);
    let index = Arc::new(ActionIndex::new(&grammar(&["Left", "Up"], 1, true), &tok).unwrap());
    let b = |c: char| id(&tok, &c.to_string());
    let c = Constraint {
        index: index.clone(),
        thinking: Thinking::On {
            max_think_tokens: None,
        },
    };
    // The model closes its thought itself: the rest of "<answer>" is forced, after whitespace
    // or a "<" in the token that closed the thought (RAGEN: `</think>\s*<answer>`).
    for (last, want) in [(">", "<answer>"), (">Ċ", "<answer>"), ("><", "answer>")] {
        let mut g = Guide::new(&c);
        for ch in "hm</think".chars() {
            assert_eq!(g.next(100), Next::Free);
            g.advance(b(ch));
        }
        assert_eq!(g.next(100), Next::Free);
        g.advance(id(&tok, last));
        let mut forced = Vec::new();
        while let Next::Forced(t) = g.next(100) {
            forced.push(t);
            g.advance(t);
        }
        assert_eq!(tok.decode(&forced, false).unwrap(), want, "{last:?}");
        assert!(matches!(g.next(100), Next::Choice(_)));
    }
    // The budget of 2 free tokens runs out: "</think><answer>" is forced.
    let c = Constraint {
        index,
        thinking: Thinking::On {
            max_think_tokens: Some(2),
        },
    };
    let mut g = Guide::new(&c);
    for ch in "ab".chars() {
        assert_eq!(g.next(100), Next::Free);
        g.advance(b(ch));
    }
    let mut forced = Vec::new();
    while let Next::Forced(t) = g.next(100) {
        forced.push(t);
        g.advance(t);
    }
    assert_eq!(tok.decode(&forced, false).unwrap(), "</think><answer>");
    // Without a think budget the thought is closed when only the forced tags, the shortest
    // answer and the end of turn still fit: 16 single-byte tags + 2 + 1 = 19 tokens.
    let unbudgeted = Constraint {
        index: c.index.clone(),
        thinking: Thinking::On {
            max_think_tokens: None,
        },
    };
    let mut g = Guide::new(&unbudgeted);
    assert_eq!(g.next(20), Next::Free);
    g.advance(b('a'));
    assert!(matches!(g.next(19), Next::Forced(_)));
}

#[test]
fn an_action_the_vocabulary_cannot_spell_is_an_error_naming_it() {
    // No 'J' or 'j' byte token at all.
    let tok = byte_tokenizer(|c| !matches!(c, 'J' | 'j'), &[]);
    let e = ActionIndex::new(&grammar(&["Left", "Jump"], 1, true), &tok).unwrap_err();
    assert!(
        matches!(&e, PolicyError::UnspellableAction { name } if name == "Jump"),
        "{e}"
    );
    assert!(e.to_string().contains("\"Jump\""), "{e}");
    // Case-sensitive, "jump" cannot stand for "Jump" when only lowercase 'j' exists.
    let tok = byte_tokenizer(|c| c != 'J', &[]);
    assert!(ActionIndex::new(&grammar(&["Jump"], 1, true), &tok).is_ok());
    let e = ActionIndex::new(&grammar(&["Jump"], 1, false), &tok).unwrap_err();
    assert!(matches!(e, PolicyError::UnspellableAction { .. }), "{e}");
    // Grammar errors name the problem.
    for (g, frag) in [
        (grammar(&[], 1, true), "no action names"),
        (grammar(&["a||b"], 1, true), "separator"),
        (grammar(&[" Up"], 1, true), "whitespace"),
        (grammar(&["Up"], 0, true), "max_actions_per_turn"),
        (
            at_least(&["Up"], 2, 3),
            "min_actions 3 is outside 1..=max_actions_per_turn (2)",
        ),
        (at_least(&["Up"], 2, 0), "min_actions 0"),
    ] {
        let e = ActionIndex::new(&g, &tiny_tokenizer())
            .unwrap_err()
            .to_string();
        assert!(e.contains(frag), "{e}");
    }
}

/// A tiny random model over the byte vocabulary (`tiny_tokenizer`).
fn tiny() -> LoadedModel {
    tiny_loaded(tiny_cfg(), 7)
}

fn prompts(tok: &Tokenizer, n: usize) -> Vec<Vec<u32>> {
    (0..n)
        .map(|i| {
            let mut p = tok
                .encode_chat(&[crate::Message::user(format!("state {i}"))], true)
                .unwrap();
            p.extend(tok.encode("<answer>").unwrap());
            p
        })
        .collect()
}

/// The actions of `text` (after the forced `<answer>`), parsed as RAGEN's `_parse_response`
/// with the host's case-insensitive name mapping, or `None` when it does not parse.
fn parse(text: &str, names: &[&str], max: usize) -> Option<Vec<String>> {
    let answer = &text[..text.find("</answer>")?];
    let actions: Vec<String> = answer
        .split("||")
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect();
    let known = actions
        .iter()
        .all(|a| names.iter().any(|n| n.eq_ignore_ascii_case(a)));
    (known && (1..=max).contains(&actions.len())).then_some(actions)
}

#[test]
fn constrained_samples_always_parse() {
    let m = tiny();
    let tok = &m.tokenizer;
    let names = ["Left", "Down", "Right", "Up"];
    let index = Arc::new(ActionIndex::new(&grammar(&names, 3, true), tok).unwrap());
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    for (thinking, max_new) in [
        (Thinking::Off, 60),
        // A budget so tight that only the shortest answers fit: "Up" + "</answer>" + end of
        // turn is 12 byte tokens.
        (Thinking::Off, 13),
        (
            Thinking::On {
                max_think_tokens: Some(5),
            },
            80,
        ),
        (
            Thinking::On {
                max_think_tokens: None,
            },
            30,
        ),
    ] {
        let c = Constraint {
            index: index.clone(),
            thinking,
        };
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: max_new,
            seed: 3,
            ..Default::default()
        };
        let out = sample_constrained(&policy.sampler(), tok, &prompts(tok, 24), &params, Some(&c))
            .unwrap();
        let mut parsed = 0;
        for s in &out {
            assert_eq!(s.kinds.len(), s.tokens.len());
            for (k, lp) in s.kinds.iter().zip(&s.logprobs) {
                match k {
                    TokenKind::Forced => assert_eq!(*lp, 0.0),
                    _ => assert!(*lp < 0.0 && lp.is_finite()),
                }
            }
            assert_eq!(s.finish_reason, FinishReason::Stop, "{:?}", s.text);
            let answer = match thinking {
                Thinking::Off => s.text.as_str(),
                Thinking::On { .. } => match s.text.find("</think>") {
                    Some(at) => s.text[at + "</think>".len()..]
                        .trim_start()
                        .strip_prefix("<answer>")
                        .expect("<answer> after </think>"),
                    None => {
                        // The thought is free: the model may end its turn inside it (a format
                        // penalty, as in RAGEN).
                        assert!(s.kinds.iter().all(|k| *k == TokenKind::Free));
                        continue;
                    }
                },
            };
            assert!(
                parse(answer, &names, 3).is_some(),
                "{thinking:?} {max_new}: {:?}",
                s.text
            );
            assert_eq!(s.kinds.last(), Some(&TokenKind::Forced));
            parsed += 1;
        }
        assert!(parsed >= 20, "{thinking:?} {max_new}: {parsed}/24 answered");
    }
}

#[test]
fn sampled_answers_hold_min_actions_names() {
    // A tiny random model samples freely how many names it writes (1 to 3 here); with
    // `min_actions` = 3 every answer has exactly 3, and with 2 at least 2.
    let m = tiny();
    let tok = &m.tokenizer;
    let names = ["Left", "Down", "Right", "Up"];
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let counts = |min: usize| -> Vec<usize> {
        let c = answer_only(&at_least(&names, 3, min), tok);
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: 80,
            seed: 5,
            ..Default::default()
        };
        sample_constrained(&policy.sampler(), tok, &prompts(tok, 32), &params, Some(&c))
            .unwrap()
            .iter()
            .map(|s| {
                assert_eq!(s.finish_reason, FinishReason::Stop, "{:?}", s.text);
                parse(&s.text, &names, 3)
                    .unwrap_or_else(|| panic!("{:?} does not parse", s.text))
                    .len()
            })
            .collect()
    };
    let free = counts(1);
    assert!(free.contains(&1) && free.iter().any(|&n| n > 1), "{free:?}");
    let two = counts(2);
    assert!(two.iter().all(|&n| n >= 2) && two.contains(&2), "{two:?}");
    assert_eq!(counts(3), vec![3; 32]);
}

/// Prompts and their constrained samples as a batch to score, the responses' token kinds
/// attached (prompt tokens free).
fn scored_batch(prompts: &[Vec<u32>], samples: &[crate::Sample]) -> TokenBatch {
    let mut seqs = Vec::new();
    let mut kinds = Vec::new();
    for (p, s) in prompts.iter().zip(samples) {
        let ids: Vec<u32> = p.iter().chain(&s.tokens).copied().collect();
        let mask: Vec<u8> = (0..ids.len()).map(|i| u8::from(i >= p.len())).collect();
        seqs.push((ids, mask));
        kinds.push(
            std::iter::repeat_n(TokenKind::Free, p.len())
                .chain(s.kinds.iter().cloned())
                .collect(),
        );
    }
    TokenBatch::right_padded(&seqs, 0)
        .unwrap()
        .with_constraints(kinds)
        .unwrap()
}

/// 1 at the scored positions ([B, T-1], shifted like the scores) whose token was forced.
fn forced_positions(batch: &TokenBatch, dims: &[usize]) -> Tensor {
    let forced: Vec<f32> = batch
        .kinds
        .iter()
        .zip(&batch.loss_mask)
        .flat_map(|(k, m)| {
            k[1..]
                .iter()
                .zip(&m[1..])
                .map(|(k, &m)| f32::from(m != 0 && *k == TokenKind::Forced))
                .collect::<Vec<_>>()
        })
        .collect();
    Tensor::from_vec(forced, dims, &candle_core::Device::Cpu).unwrap()
}

#[test]
fn first_ppo_ratio_is_one_with_the_mask_and_forced_tokens_have_no_gradient() {
    let m = tiny();
    let tok = &m.tokenizer;
    let names = ["Left", "Down", "Right", "Up"];
    let index = Arc::new(ActionIndex::new(&grammar(&names, 2, true), tok).unwrap());
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let c = Constraint {
        index,
        thinking: Thinking::On {
            max_think_tokens: Some(3),
        },
    };
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 60,
        seed: 11,
        ..Default::default()
    };
    let ps = prompts(tok, 6);
    let out = sample_constrained(&policy.sampler(), tok, &ps, &params, Some(&c)).unwrap();
    let batch = scored_batch(&ps, &out);
    let scores = score(policy.model(), &batch).unwrap();
    let lp: Vec<Vec<f32>> = scores.logprobs.to_vec2().unwrap();
    let ent: Vec<Vec<f32>> = scores.entropy.to_vec2().unwrap();
    let (mut n_free, mut n_forced, mut n_choice) = (0, 0, 0);
    for (r, (p, s)) in ps.iter().zip(&out).enumerate() {
        for (j, (k, old)) in s.kinds.iter().zip(&s.logprobs).enumerate() {
            let new = lp[r][p.len() - 1 + j];
            let ratio = (new - old).exp();
            assert!(
                (ratio - 1.0).abs() < 1e-5,
                "row {r} token {j} {k:?}: ratio {ratio}"
            );
            match k {
                TokenKind::Free => n_free += 1,
                TokenKind::Forced => {
                    n_forced += 1;
                    assert_eq!((new, ent[r][p.len() - 1 + j]), (0.0, 0.0));
                }
                TokenKind::Choice(set) => {
                    n_choice += 1;
                    assert!(set.len() >= 2 && set.binary_search(&s.tokens[j]).is_ok());
                    // Normalised over the allowed set: the entropy is at most ln |set|.
                    let e = ent[r][p.len() - 1 + j];
                    assert!(e > 0.0 && e <= (set.len() as f32).ln() + 1e-5, "{e}");
                }
            }
        }
    }
    assert!(
        n_free > 0 && n_forced > 0 && n_choice > 0,
        "{n_free} {n_forced} {n_choice}"
    );
    // The forced positions' log-probs have no gradient: d(sum over forced positions)/dθ = 0.
    let forced = forced_positions(&batch, scores.logprobs.dims());
    let loss = (&scores.logprobs * &forced).unwrap().sum_all().unwrap();
    let grads = loss.backward().unwrap();
    let mut checked = 0;
    for p in policy.params() {
        if let Some(g) = grads.get(p.var.as_tensor()) {
            let a: f32 = g.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
            assert_eq!(a, 0.0, "{}", p.name);
            checked += 1;
        }
    }
    // ...while the choice and free positions do have one.
    let grads = scores.logprobs.sum_all().unwrap().backward().unwrap();
    let g = grads.get(policy.params()[0].var.as_tensor()).unwrap();
    let a: f32 = g.abs().unwrap().sum_all().unwrap().to_scalar().unwrap();
    assert!(a > 0.0 && checked <= policy.params().len());
}

#[test]
fn replaying_a_sample_gives_its_recorded_kinds() {
    let m = tiny();
    let tok = &m.tokenizer;
    let c = answer_only(&grammar(&["Left", "Up"], 3, true), tok);
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 200,
        seed: 5,
        ..Default::default()
    };
    let out =
        sample_constrained(&policy.sampler(), tok, &prompts(tok, 8), &params, Some(&c)).unwrap();
    for s in &out {
        assert_eq!(c.replay(&s.tokens).unwrap(), s.kinds, "{:?}", s.text);
    }
}

#[test]
fn the_default_tokenizer_spells_the_builtin_actions() {
    let path = crate::default_model_path();
    let mut f = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("{} (run scripts/setup.sh): {e}", path.display()));
    let ct = candle_core::quantized::gguf_file::Content::read(&mut f).unwrap();
    let tok = Tokenizer::from_gguf(&ct).unwrap();
    for names in [
        &["Left", "Down", "Right", "Up"][..],
        &["Librarian", "Trader"][..],
    ] {
        let t0 = std::time::Instant::now();
        let ix = ActionIndex::new(&grammar(names, 5, true), &tok).unwrap();
        eprintln!(
            "{names:?}: {} states, {} first tokens, built in {:?}",
            ix.num_states(),
            ix.first_tokens().len(),
            t0.elapsed()
        );
        for n in names {
            // However the tokenizer spells the bare and the spaced name, its first token is
            // allowed.
            for text in [n.to_string(), format!(" {n}"), n.to_lowercase()] {
                let first = tok.encode(&text).unwrap()[0];
                assert!(ix.first_tokens().contains(&first), "{text:?}");
            }
        }
    }
}
