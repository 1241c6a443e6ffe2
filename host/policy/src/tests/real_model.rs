//! Tests on the default model (SmolLM2-135M-Instruct); `scripts/setup.sh` installs it.
use super::*;

fn loaded() -> LoadedModel {
    load_default().expect("the default model (run scripts/setup.sh)")
}

#[test]
fn greedy_answer_to_two_plus_three_contains_five_and_logprobs_match_the_scorer() {
    let m = loaded();
    assert_eq!(m.weights.len(), 272);
    let tok = &m.tokenizer;
    let sys = tok.default_system_prompt().unwrap();
    assert!(sys.contains("SmolLM"), "{sys}");
    let prompt = tok
        .encode_chat(&[Message::system(sys), Message::user("What is 2+3?")], true)
        .unwrap();
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let params = SamplingParams {
        max_new_tokens: 24,
        ..Default::default()
    };
    let out = &sample(
        &policy.sampler(),
        tok,
        std::slice::from_ref(&prompt),
        &params,
    )
    .unwrap()[0];
    assert!(out.text.contains('5'), "answer: {:?}", out.text);
    let ids: Vec<u32> = prompt.iter().chain(&out.tokens).copied().collect();
    let mask: Vec<u8> = (0..ids.len())
        .map(|i| u8::from(i >= prompt.len()))
        .collect();
    let batch = TokenBatch::right_padded(&[(ids, mask)], 2).unwrap();
    let lp: Vec<f32> = score(policy.model(), &batch)
        .unwrap()
        .logprobs
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap();
    for (j, x) in out.logprobs.iter().enumerate() {
        let y = lp[prompt.len() - 1 + j];
        assert!((x - y).abs() < 1e-4, "token {j}: sampler {x} scorer {y}");
    }
}

/// Prefix caching (`docs/ragen-semantics.md`, "Prefix sharing in rollouts") on the real model:
/// groups of identical prompts sampled at temperature 1 give the tokens of the padded sampler,
/// log-probs within 1e-4.
#[test]
fn cached_sampling_gives_the_tokens_of_padded_sampling() {
    let m = loaded();
    let tok = &m.tokenizer;
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let model = policy.sampler();
    let prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| {
            let user = format!("You are at arm {}. Pull Left or Right. Think first.", i / 2);
            tok.encode_chat(&[Message::system("You play."), Message::user(user)], true)
                .unwrap()
        })
        .collect();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 40,
        seed: 3,
        ..Default::default()
    };
    let padded = sample(&model, tok, &prompts, &params).unwrap();
    let mut cache = crate::PrefixCache::new(1 << 30);
    let cached = crate::sample_cached(&model, tok, &prompts, &params, None, &mut cache).unwrap();
    let mut worst = 0.0f32;
    for (row, (a, b)) in padded.iter().zip(&cached).enumerate() {
        assert_eq!(
            a.tokens, b.tokens,
            "row {row}: {:?} vs {:?}",
            a.text, b.text
        );
        for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
            worst = worst.max((x - y).abs());
        }
    }
    assert!(worst < 1e-4, "log-probs differ by up to {worst}");
    let st = cache.stats();
    assert!(st.prefilled_tokens * 5 < st.prompt_tokens * 3, "{st:?}");
}

/// A Bandit-shaped first-turn prompt (RAGEN's layout, `docs/ragen-semantics.md` §3) with the
/// arms in the given order.
fn bandit_prompt(tok: &Tokenizer, first: &str, second: &str) -> Vec<u32> {
    let user = format!(
        "You are playing a bandit game. Goal: maximize your total reward by choosing which arm \
         to pull. Game rules: 1. There are 2 arms. 2. Each arm has its own reward distribution. \
         You have 1 action left. Always output: <answer> [your answer] </answer> with no extra \
         text. Max response length: 16 words (tokens).\nTurn 1:\nState:\nYou stand before two \
         slot machines, one called {first} and one called {second}. You may pull one of them, \
         once. Each machine has its own payout distribution, and its name is a hint about how it \
         behaves: think about what the names suggest, then pull the machine you expect to pay \
         more on average. Reply with the machine's name as <answer> NAME </answer>, for example \
         <answer> {first} </answer>.\nYou have 1 actions left."
    );
    let mut ids = tok
        .encode_chat(
            &[
                Message::system("You are a helpful assistant."),
                Message::user(user),
            ],
            true,
        )
        .unwrap();
    ids.extend(tok.encode("<answer>").unwrap());
    ids
}

/// Prefix sharing (`docs/ragen-semantics.md`, "Prefix sharing in rollouts") on the real model, by
/// teacher forcing: the tokens the padded sampler drew at temperature 1 for 8 Bandit-shaped prompts
/// (two arm orders, so the rows share a start across groups), then a second turn continuing each
/// row's history, fed through the padded sampler's model side and through the cached one. The
/// per-token log-probs agree within 1e-4: the two paths compute the same distributions, and a
/// sampled token can differ only where the uniform draw falls within that rounding of a boundary
/// between two tokens.
#[test]
fn teacher_forced_logprobs_with_and_without_prefix_sharing_agree() {
    use crate::prefix_cache::tests::{forced_both, max_abs_diff};
    let m = loaded();
    let tok = &m.tokenizer;
    let policy = Policy::new(&m, Trainable::Full, 0).unwrap();
    let model = policy.sampler();
    let mut prompts: Vec<Vec<u32>> = (0..8)
        .map(|i| match i % 2 {
            0 => bandit_prompt(tok, "Dragon", "Phoenix"),
            _ => bandit_prompt(tok, "Phoenix", "Dragon"),
        })
        .collect();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 16,
        seed: 11,
        ..Default::default()
    };
    let mut cache = crate::PrefixCache::new(1 << 30);
    let mut worst = Vec::new();
    for turn in 0..2 {
        let drawn = sample(&model, tok, &prompts, &params).unwrap();
        let tokens: Vec<Vec<u32>> = drawn.iter().map(|s| s.tokens.clone()).collect();
        let (padded, cached) = forced_both(&model, tok, &prompts, &tokens, &mut cache);
        // Teacher forcing through the padded side reproduces the sampler's own log-probs.
        let own: Vec<Vec<f32>> = drawn.iter().map(|s| s.logprobs.clone()).collect();
        assert!(max_abs_diff(&own, &padded) < 1e-5, "turn {turn}");
        worst.push(max_abs_diff(&padded, &cached));
        for (p, s) in prompts.iter_mut().zip(&drawn) {
            p.extend(&s.tokens);
            let next = format!(
                "Reward:\n0.1\nTurn {}:\nState:\nPhoenix: 0.1 points",
                turn + 2
            );
            p.extend(tok.encode_chat(&[Message::user(next)], true).unwrap());
        }
    }
    let st = cache.stats();
    eprintln!("max |delta logp| per turn: {worst:?}; {st:?}");
    assert!(worst.iter().all(|w| *w < 1e-4), "{worst:?}");
    // Turn 1 shares the common start and each order's rest; turn 2 continues each row's entry.
    assert!(st.prefilled_tokens * 5 < st.prompt_tokens, "{st:?}");
}

/// Shared-prefix training (`shared_prefix.rs`) on the real model: Bandit's update shape, two
/// groups (arm orders) of three members whose responses share the prompt and, some, their first
/// tokens; log-probs, entropy, values, the loss and every LoRA gradient of the policy and the
/// critic agree with the per-sequence path within 1e-4. About a minute on 2 cores.
#[test]
fn shared_prefix_training_equals_the_per_sequence_path_on_the_default_model() {
    let m = loaded();
    let tok = &m.tokenizer;
    let answers = [" Dragon </answer>", " Phoenix </answer>", " Dragon"];
    let seqs: Vec<(Vec<u32>, Vec<u8>)> = (0..6)
        .map(|i| {
            let prompt = match i / 3 {
                0 => bandit_prompt(tok, "Dragon", "Phoenix"),
                _ => bandit_prompt(tok, "Phoenix", "Dragon"),
            };
            let mut ids = prompt.clone();
            ids.extend(tok.encode(answers[i % 3]).unwrap());
            let mask = (0..ids.len())
                .map(|j| u8::from(j >= prompt.len()))
                .collect();
            (ids, mask)
        })
        .collect();
    let batch = TokenBatch::right_padded(&seqs, tok.im_end_id()).unwrap();
    let tree = crate::shared_prefix::PrefixTree::new(&batch);
    assert!(tree.len() * 2 < batch.num_tokens(), "{} nodes", tree.len());
    let policy = Policy::new(&m, Trainable::Lora(LoraConfig::default()), 1).unwrap();
    set_lora_b(&policy, |i| ((i % 5) as f32 - 2.0) * 1e-3);
    let critic = Critic::new(&m, Trainable::Lora(LoraConfig::default()), 2).unwrap();
    super::shared_prefix::assert_shared_equals_padded(
        policy.model(),
        Some(&critic),
        policy.params(),
        &batch,
        1e-4,
    );
}

#[test]
fn tokenizer_matches_the_hugging_face_chatml_ids_and_round_trips() {
    let m = loaded();
    let tok = &m.tokenizer;
    // Tail of the ChatML ids the Hugging Face SmolLM2 tokenizer gives (HuggingFaceTB/SmolLM2-135M-Instruct `tokenizer.json`).
    let ids = tok
        .encode_chat(&[Message::user("What is 2+3?")], true)
        .unwrap();
    assert_eq!(
        ids,
        vec![
            1, 4093, 198, 1780, 314, 216, 34, 27, 35, 47, 2, 198, 1, 520, 9531, 198
        ]
    );
    for text in [
        "Hello world! 12345 apples cost $3.50.\n\n  indented\tTab",
        "héllo wörld 你好 🙂 <|im_end|> trailing",
    ] {
        assert_eq!(tok.decode(&tok.encode(text).unwrap(), false).unwrap(), text);
    }
    let obs = "state: <|im_end|> and <|im_start|>";
    let ids = tok.encode(obs).unwrap();
    assert!(!ids.contains(&tok.im_end_id()) && !ids.contains(&tok.im_start_id()));
}
