//! Property tests of the bridge's parsing (run by `scripts/test.sh`, as CI): the action parser
//! against a brute-force reading of WebShop's `re.match(r'(.+)\[(.+)\]', action)`, and whole
//! episodes over a transport that mixes real server answers with hostile ones (refused calls,
//! any status, any text, any JSON, well-shaped JSON with arbitrary pages, clickables, rewards
//! and infos). Nothing may panic: each call gives a step result within the contract or a typed
//! [`EnvError`].

use std::collections::VecDeque;
use std::sync::Arc;

use proptest::collection::vec;
use proptest::prelude::*;
use ragen_gym_sdk::EnvError;
use ragen_gym_webshop::testing::json_value;
use ragen_gym_webshop::{Catalog, Shop};
use serde_json::{Value, json};

use crate::env::{WebShopBridge, parse_action};
use crate::protocol::Transport;

/// `re.match(r'(.+)\[(.+)\]', s)` by brute force: `.` stops at `\n`; greedy groups mean the
/// last `[` (at index >= 1) that leaves a non-empty second group, then the last `]` after it.
fn parse_action_reference(s: &str) -> Option<(String, String)> {
    let line: Vec<char> = s.chars().take_while(|&c| c != '\n').collect();
    for open in (1..line.len()).rev() {
        if line[open] != '[' {
            continue;
        }
        for close in (open + 2..line.len()).rev() {
            if line[close] == ']' {
                return Some((
                    line[..open].iter().collect(),
                    line[open + 1..close].iter().collect(),
                ));
            }
        }
    }
    None
}

/// Well-shaped JSON with arbitrary contents, shaped by the route called.
#[derive(Debug, Clone)]
struct Shaped {
    page: String,
    id: Value,
    reward: f64,
    done: bool,
    info: Value,
    search_bar: bool,
    clickables: Vec<String>,
}

impl Shaped {
    fn answer(self, path: &str) -> Value {
        // Non-finite rewards cannot travel in JSON; send the largest finite ones.
        let reward = if self.reward.is_finite() {
            self.reward
        } else {
            f64::MAX.copysign(self.reward)
        };
        match path.split('?').next().unwrap_or("") {
            "/create" => self.id,
            "/reset" => json!([self.page, self.info]),
            "/step" => json!({
                "state": self.page, "reward": reward, "done": self.done, "info": self.info,
            }),
            "/available_actions" => {
                json!({"has_search_bar": self.search_bar, "clickables": self.clickables})
            }
            _ => json!(self.page),
        }
    }
}

/// One hostile answer.
#[derive(Debug, Clone)]
enum Hostile {
    Refused(String),
    Status(u16, String),
    Json(Value),
    Shaped(Shaped),
}

fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        any::<String>().prop_map(Hostile::Refused),
        (any::<u16>(), any::<String>()).prop_map(|(s, b)| Hostile::Status(s, b)),
        json_value().prop_map(Hostile::Json),
        (
            (any::<String>(), json_value(), any::<f64>(), any::<bool>()),
            (json_value(), any::<bool>()),
            vec(any::<String>(), 0..6),
        )
            .prop_map(
                |((page, id, reward, done), (info, search_bar), clickables)| {
                    Hostile::Shaped(Shaped {
                        page,
                        id,
                        reward,
                        done,
                        info,
                        search_bar,
                        clickables,
                    })
                }
            ),
    ]
}

/// Answers from the real shop, except where the plan holds a hostile answer.
struct Mixed {
    shop: Arc<Shop>,
    plan: VecDeque<Option<Hostile>>,
}

impl Transport for Mixed {
    fn request(&mut self, method: &str, url: &str, body: &str) -> Result<(u16, String), String> {
        let path = url.strip_prefix("http://127.0.0.1:3000").unwrap_or(url);
        match self.plan.pop_front().flatten() {
            None => {
                let r = self.shop.handle(method, path, body.as_bytes());
                Ok((r.status, r.body))
            }
            Some(Hostile::Refused(why)) => Err(why),
            Some(Hostile::Status(status, text)) => Ok((status, text)),
            Some(Hostile::Json(v)) => Ok((200, v.to_string())),
            Some(Hostile::Shaped(shaped)) => Ok((200, shaped.answer(path).to_string())),
        }
    }
}

fn action() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "(search|click)\\[\\PC{0,16}\\]\\PC{0,4}",
        proptest::sample::select(
            &[
                "search[cotton spandex]",
                "click[b0ws000001]",
                "click[black]",
                "click[large]",
                "click[buy now]",
                "click[next >]",
                "click[< prev]",
                "click[back to search]",
            ][..]
        )
        .prop_map(String::from),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn parse_action_agrees_with_the_upstream_regex(s in "[a-z\\[\\] \\n\u{e9}\u{4e2d}]{0,12}") {
        let got = parse_action(&s).map(|(a, b)| (a.to_string(), b.to_string()));
        prop_assert_eq!(&got, &parse_action_reference(&s));
        // the host server's copy reads the same
        let host = ragen_gym_webshop::parse_action(&s).map(|(a, b)| (a.to_string(), b.to_string()));
        prop_assert_eq!(got, host);
    }

    #[test]
    fn parse_action_never_panics_on_any_text(s in any::<String>()) {
        if let Some((name, arg)) = parse_action(&s) {
            prop_assert!(!name.is_empty() && !arg.is_empty());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn episodes_over_hostile_answers_end_in_results_or_typed_errors(
        plan in vec(proptest::option::weighted(0.3, hostile()), 0..48),
        seeds in vec(any::<u64>(), 1..3),
        actions in vec(action(), 0..12),
        list_actions in any::<bool>(),
    ) {
        let transport = Mixed {
            shop: Arc::new(Shop::new(Catalog::embedded())),
            plan: plan.into(),
        };
        let config = format!(r#"{{"split":"test","max_turns":6,"list_actions":{list_actions}}}"#);
        let mut env = WebShopBridge::with_transport(&config, transport).unwrap();
        for &seed in &seeds {
            match env.reset_episode(seed) {
                Ok(r) => prop_assert!(r.observation.starts_with(env.page_text())),
                Err(EnvError::Other(e)) => {
                    prop_assert!(e.contains("127.0.0.1:3000"), "{e}");
                    continue;
                }
                Err(e) => prop_assert!(false, "reset: unexpected error kind {e:?}"),
            }
            let mut ended = false;
            for a in &actions {
                match env.step_action(a) {
                    Ok(s) => {
                        prop_assert!(!ended, "a step after the episode ended");
                        prop_assert!(s.reward.is_finite() && (0.0..=1.0).contains(&s.reward));
                        prop_assert!(!(s.terminated && s.truncated));
                        prop_assert!(!s.success || s.terminated);
                        prop_assert!(s.observation.starts_with(env.page_text()));
                        ended = s.terminated || s.truncated;
                    }
                    Err(EnvError::NotReady(_)) => prop_assert!(ended, "not ready mid-episode"),
                    Err(EnvError::Other(e)) => prop_assert!(e.contains("127.0.0.1:3000"), "{e}"),
                    Err(e) => prop_assert!(false, "step: unexpected error kind {e:?}"),
                }
            }
        }
    }
}
