//! Stop strings: the sampler stops at the first token whose text completes one, and
//! [`StopScan`] finds it where decoding all of a row's tokens after each new one does.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

/// The first index `i` such that the text of `tokens[..=i]` (special tokens skipped) contains a
/// stop string: the rule, by decoding every prefix.
fn first_stop_by_decoding(tok: &Tokenizer, tokens: &[u32], stops: &[String]) -> Option<usize> {
    (0..tokens.len()).find(|&i| {
        let text = tok.decode(&tokens[..=i], true).unwrap();
        stops.iter().any(|s| text.contains(s.as_str()))
    })
}

fn first_stop_by_scan(tok: &Tokenizer, tokens: &[u32], stops: &[String]) -> Option<usize> {
    let mut scan = StopScan::new(tok, stops);
    (0..tokens.len()).find(|&i| scan.push(&tokens[..=i]).unwrap())
}

/// The id of byte `b`'s token in a byte-level vocabulary (GPT-2's `bytes_to_unicode`: printable
/// Latin-1 bytes stand for themselves, the others for 256, 257, ... in byte order).
fn byte_id(tok: &Tokenizer, b: u8) -> u32 {
    let printable = |x: u8| matches!(x, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let c = if printable(b) {
        char::from(b)
    } else {
        char::from_u32(256 + (0..b).filter(|&x| !printable(x)).count() as u32).unwrap()
    };
    tok.inner().token_to_id(&c.to_string()).unwrap()
}

/// Random ids (specials included) with stop-bearing texts spliced in, some of them cut into
/// single bytes, so matches start mid-token, end mid-token and span multi-byte characters.
fn streams(tok: &Tokenizer, seed: u64) -> Vec<Vec<u32>> {
    let vocab = tok.vocab_size() as u32;
    let pieces = [
        "so the move is <answer>Up</answer> then",
        "caf\u{e9}! and na\u{ef}ve",
        "one\n\ntwo",
        "</ans",
        "wer>",
        "\u{1f600}\u{e9}!",
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..60)
        .map(|_| {
            let mut ids = Vec::new();
            for _ in 0..rng.random_range(1..6) {
                for _ in 0..rng.random_range(0..12) {
                    ids.push(rng.random_range(0..vocab));
                }
                let text = pieces[rng.random_range(0..pieces.len())];
                if rng.random_bool(0.5) {
                    ids.extend(tok.encode(text).unwrap());
                } else {
                    ids.extend(text.bytes().map(|b| byte_id(tok, b)));
                }
            }
            ids
        })
        .collect()
}

fn scan_agrees_with_decoding(tok: &Tokenizer, seed: u64) {
    let stops: Vec<String> = ["</answer>", "\u{e9}!", "\n\n"].map(String::from).to_vec();
    let mut stopped = 0;
    for ids in streams(tok, seed) {
        let want = first_stop_by_decoding(tok, &ids, &stops);
        assert_eq!(first_stop_by_scan(tok, &ids, &stops), want, "{ids:?}");
        stopped += usize::from(want.is_some());
    }
    // Most streams hold a stop string, some none (a split "</ans" "wer>" may still join).
    assert!(stopped >= 30, "{stopped} of 60 streams stopped");
    // No stop strings: never stops.
    let ids = &streams(tok, seed)[0];
    assert_eq!(first_stop_by_scan(tok, ids, &[]), None);
}

#[test]
fn stop_scan_agrees_with_decoding_every_prefix_on_byte_and_synthetic_vocabularies() {
    scan_agrees_with_decoding(&tiny_tokenizer(), 1);
    scan_agrees_with_decoding(&Tokenizer::synthetic(151_936).unwrap(), 2);
}

#[test]
fn stop_scan_agrees_with_decoding_every_prefix_on_the_default_tokenizer() {
    let m = load_default().expect("the default model (run scripts/setup.sh)");
    scan_agrees_with_decoding(&m.tokenizer, 3);
}

#[test]
fn stop_scan_stops_at_the_token_that_completes_the_string() {
    // One token per byte: "xx</answer>yy" completes "</answer>" with its 11th byte, index 10.
    let tok = tiny_tokenizer();
    let ids = tok.encode("xx</answer>yy").unwrap();
    assert_eq!(ids.len(), 13);
    let stops = vec!["</answer>".to_string()];
    assert_eq!(first_stop_by_scan(&tok, &ids, &stops), Some(10));
    // Each call adds exactly one token.
    let mut scan = StopScan::new(&tok, &stops);
    let e = scan.push(&ids[..2]).unwrap_err().to_string();
    assert!(
        e.contains("tokens") && e.contains("2 tokens after 0"),
        "{e}"
    );
}

#[test]
fn stop_scan_finds_a_stop_before_an_unfinished_character_in_the_same_token() {
    // One token holds a space and the first two bytes of "\u{2014}" (E2 80 94; GPT-2 spells the
    // token "ĠâĢ"), the next token the last byte. Decoding "a" + that token shows "a \u{fffd}",
    // so "a " is complete at index 1, before the character is.
    let tok = super::byte_tokenizer(|_| true, &["\u{120}\u{e2}\u{122}"]);
    let split = tok.inner().token_to_id("\u{120}\u{e2}\u{122}").unwrap();
    let ids = [byte_id(&tok, b'a'), split, byte_id(&tok, 0x94)];
    assert_eq!(tok.decode(&ids, true).unwrap(), "a \u{2014}");
    let stops = vec!["a ".to_string()];
    assert_eq!(first_stop_by_decoding(&tok, &ids, &stops), Some(1));
    assert_eq!(first_stop_by_scan(&tok, &ids, &stops), Some(1));
    // An empty stop string is in every text: the first token stops, also when it is a lone
    // leading byte or a special token the text skips.
    let empty = vec![String::new()];
    for first in [byte_id(&tok, 0xe2), 2, byte_id(&tok, b'x')] {
        assert_eq!(first_stop_by_decoding(&tok, &[first], &empty), Some(0));
        assert_eq!(first_stop_by_scan(&tok, &[first], &empty), Some(0));
    }
}

#[test]
fn sampler_stops_at_the_first_token_completing_a_stop_string() {
    let loaded = tiny_loaded(tiny_cfg(), 8);
    let model = loaded.frozen_model().unwrap();
    let tok = &loaded.tokenizer;
    let prompt = tok.encode_chat(&[Message::user("go")], true).unwrap();
    let free = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 40,
        seed: 11,
        ..Default::default()
    };
    let mut checked = 0;
    for seed in 0..24 {
        let free = SamplingParams {
            seed,
            ..free.clone()
        };
        let long = &sample(&model, tok, std::slice::from_ref(&prompt), &free).unwrap()[0];
        if long.tokens.len() < 30 {
            continue;
        }
        // A stop string taken from the middle of the free sample's text: three characters
        // without U+FFFD (what lossy decoding shows for bytes that are not yet a character; a
        // stop string never holds it, and the scan waits for the character to complete).
        let text: Vec<char> = tok
            .decode(&long.tokens[20..], true)
            .unwrap()
            .chars()
            .collect();
        let Some(at) = text.windows(3).position(|w| !w.contains(&'\u{fffd}')) else {
            continue;
        };
        let stop: String = text[at..at + 3].iter().collect();
        let stops = vec![stop];
        let end = first_stop_by_decoding(tok, &long.tokens, &stops).unwrap();
        let params = SamplingParams {
            stop: stops,
            ..free.clone()
        };
        let short = &sample(&model, tok, std::slice::from_ref(&prompt), &params).unwrap()[0];
        assert_eq!(short.tokens, long.tokens[..=end], "seed {seed}");
        assert_eq!(short.finish_reason, FinishReason::StopString);
        checked += 1;
    }
    assert!(checked >= 4, "{checked} seeds gave 30 tokens of text");
}
