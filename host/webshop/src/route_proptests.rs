//! Property tests over the AgentGym routes of [`Shop::handle`] (run by `scripts/test.sh`, as CI):
//! sequences of arbitrary requests (methods, paths, query strings, JSON and form bodies, raw
//! bytes, session ids, unicode actions, and actions picked from the live page) against one
//! shop, checked against a model of the env ids. No request may panic; every answer is a JSON
//! body with status 200 and the route's shape, or 404/422 with FastAPI's `{"detail": str}`.

use std::collections::BTreeSet;

use proptest::collection::vec;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::catalog::Catalog;
use crate::server::{MAX_ENV_ID, Shop};
use crate::testing::json_value;

/// Which env a request names: one the model knows (by position), or any JSON value.
#[derive(Debug, Clone)]
enum EnvRef {
    Known(usize),
    Raw(Value),
}

/// What a `/step` sends: a clickable of the current page (by position), or any text.
#[derive(Debug, Clone)]
enum Action {
    Clickable(usize),
    Text(String),
}

#[derive(Debug, Clone)]
enum Request {
    Create,
    Reset(EnvRef, Option<Value>),
    Step(EnvRef, Action),
    Close(EnvRef),
    Get(&'static str, EnvRef),
    GetWithQuery(&'static str, String),
    JsonTo(String, String, Value),
    Form(String, String),
    Raw(String, String, Vec<u8>),
}

const ROUTES: [&str; 9] = [
    "/",
    "/list_envs",
    "/create",
    "/reset",
    "/step",
    "/close",
    "/available_actions",
    "/observation",
    "/state",
];

fn env_ref() -> impl Strategy<Value = EnvRef> {
    prop_oneof![
        12 => (0usize..8).prop_map(EnvRef::Known),
        1 => json_value().prop_map(EnvRef::Raw),
    ]
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => (0usize..64).prop_map(Action::Clickable),
        1 => any::<String>().prop_map(Action::Text),
        1 => "search\\[.{0,24}\\]".prop_map(Action::Text),
        1 => "click\\[.{0,16}\\]\\PC{0,4}".prop_map(Action::Text),
        1 => "(search|click)\\[[ a-z0-9\\[\\]]{0,12}\\]\n.{0,8}".prop_map(Action::Text),
    ]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("GET".to_string()),
        Just("POST".to_string()),
        "[A-Z]{0,7}",
        ".{0,6}",
    ]
}

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(&ROUTES[..]).prop_map(String::from),
        ".{0,24}",
        "/[a-z_/?=&%0-9.-]{0,24}",
    ]
}

fn request() -> impl Strategy<Value = Request> {
    let get_route = proptest::sample::select(
        &[
            "/available_actions",
            "/observation",
            "/instruction_text",
            "/state",
        ][..],
    );
    prop_oneof![
        3 => Just(Request::Create),
        3 => (env_ref(), proptest::option::of(json_value())).prop_map(|(e, s)| Request::Reset(e, s)),
        3 => (env_ref(), (0u64..80).prop_map(Value::from)).prop_map(|(e, s)| Request::Reset(e, Some(s))),
        24 => (env_ref(), action()).prop_map(|(e, a)| Request::Step(e, a)),
        1 => env_ref().prop_map(Request::Close),
        3 => (get_route.clone(), env_ref()).prop_map(|(r, e)| Request::Get(r, e)),
        1 => (get_route, ".{0,32}").prop_map(|(r, q)| Request::GetWithQuery(r, q)),
        2 => (method(), path(), json_value()).prop_map(|(m, p, v)| Request::JsonTo(m, p, v)),
        1 => (path(), "[a-z_]{1,8}=[^&]{0,12}(&[a-z_]{1,8}=[^&]{0,8}){0,3}")
            .prop_map(|(p, b)| Request::Form(p, b)),
        1 => (method(), path(), vec(any::<u8>(), 0..64)).prop_map(|(m, p, b)| Request::Raw(m, p, b)),
    ]
}

/// The model's env ids, in creation order.
struct Model {
    ids: Vec<i64>,
}

impl Model {
    fn resolve(&self, e: &EnvRef) -> Value {
        match e {
            EnvRef::Known(i) if !self.ids.is_empty() => json!(self.ids[i % self.ids.len()]),
            EnvRef::Known(i) => json!(*i as i64),
            EnvRef::Raw(v) => v.clone(),
        }
    }
}

/// Send `request`; returns (method, path, status, body) after checking the generic contract.
fn send(
    shop: &Shop,
    model: &Model,
    request: &Request,
) -> Result<(String, String, u16, Value), TestCaseError> {
    let (method, url, body): (String, String, Vec<u8>) = match request {
        Request::Create => ("POST".into(), "/create".into(), Vec::new()),
        Request::Reset(e, session) => {
            let mut b = json!({ "env_idx": model.resolve(e) });
            if let Some(s) = session {
                b["session_id"] = s.clone();
            }
            ("POST".into(), "/reset".into(), b.to_string().into_bytes())
        }
        Request::Step(e, a) => {
            let env = model.resolve(e);
            let action = match a {
                Action::Text(t) => t.clone(),
                Action::Clickable(i) => {
                    let url = format!("/available_actions?env_idx={env}");
                    let r = shop.handle("GET", &url, b"");
                    let v: Value = serde_json::from_str(&r.body).unwrap_or(Value::Null);
                    let clickables: Vec<String> = v["clickables"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|c| c.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default();
                    if clickables.is_empty() {
                        "search[cotton spandex]".to_string()
                    } else if clickables[i % clickables.len()] == "search" {
                        "search[black large]".to_string()
                    } else {
                        format!("click[{}]", clickables[i % clickables.len()])
                    }
                }
            };
            let b = json!({ "env_idx": env, "action": action });
            ("POST".into(), "/step".into(), b.to_string().into_bytes())
        }
        Request::Close(e) => {
            let b = json!({ "env_idx": model.resolve(e) });
            ("POST".into(), "/close".into(), b.to_string().into_bytes())
        }
        Request::Get(route, e) => {
            let env = model.resolve(e);
            let q = match env {
                Value::Number(n) => n.to_string(),
                Value::String(s) => s,
                other => other.to_string(),
            };
            ("GET".into(), format!("{route}?env_idx={q}"), Vec::new())
        }
        Request::GetWithQuery(route, q) => ("GET".into(), format!("{route}?{q}"), Vec::new()),
        Request::JsonTo(m, p, v) => (m.clone(), p.clone(), v.to_string().into_bytes()),
        Request::Form(p, b) => ("POST".into(), p.clone(), b.clone().into_bytes()),
        Request::Raw(m, p, b) => (m.clone(), p.clone(), b.clone()),
    };
    let reply = shop.handle(&method, &url, &body);
    let parsed: Value = serde_json::from_str(&reply.body).map_err(|e| {
        TestCaseError::fail(format!(
            "{method} {url}: body is not JSON ({e}): {}",
            reply.body
        ))
    })?;
    prop_assert!(
        matches!(reply.status, 200 | 404 | 422),
        "{method} {url}: status {}",
        reply.status
    );
    if reply.status != 200 {
        prop_assert!(
            parsed["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{method} {url}: error without detail: {parsed}"
        );
    }
    let path = url
        .split_once('?')
        .map_or(url.as_str(), |(p, _)| p)
        .to_string();
    Ok((method, path, reply.status, parsed))
}

/// The shape of a successful answer, per route.
fn check_shape(method: &str, path: &str, v: &Value) -> Result<(), TestCaseError> {
    match (method, path) {
        ("GET", "/") => prop_assert_eq!(v, &json!("ok")),
        ("GET", "/list_envs") => {
            prop_assert!(v.as_array().is_some_and(|a| a.iter().all(Value::is_i64)))
        }
        ("POST", "/create") => prop_assert!(
            v.as_i64()
                .is_some_and(|id| (0..=MAX_ENV_ID as i64).contains(&id))
        ),
        ("POST", "/reset") => {
            prop_assert!(
                v[0].as_str()
                    .is_some_and(|s| s.starts_with("WebShop [SEP] Instruction:")),
                "{v}"
            );
            prop_assert!(v[1].is_null());
        }
        ("POST", "/step") => {
            prop_assert!(v["state"].is_string(), "{v}");
            let reward = v["reward"].as_f64().unwrap_or(f64::NAN);
            prop_assert!((0.0..=1.0).contains(&reward), "{v}");
            let done = v["done"].as_bool();
            prop_assert!(done.is_some(), "{v}");
            if done == Some(true) {
                prop_assert_eq!(v["info"]["reward"].as_f64(), Some(reward));
            } else {
                prop_assert!(v["info"].is_null() && reward == 0.0, "{v}");
            }
        }
        ("POST", "/close") => prop_assert_eq!(v, &json!(true)),
        ("GET", "/available_actions") => {
            prop_assert!(v["has_search_bar"].is_boolean());
            prop_assert!(
                v["clickables"]
                    .as_array()
                    .is_some_and(|a| a.iter().all(Value::is_string))
            );
        }
        ("GET", "/observation") => prop_assert!(v.is_string()),
        ("GET", "/instruction_text") => {
            prop_assert!(v.as_str().is_some_and(|s| s.starts_with("Instruction: ")));
        }
        ("GET", "/state") => {
            prop_assert!(
                v["url"].is_string() && v["html"].is_string() && v["instruction_text"].is_string()
            );
        }
        _ => prop_assert!(false, "200 for {method} {path}: {v}"),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_request_sequences_never_panic_and_keep_the_contract(
        requests in vec(request(), 1..40)
    ) {
        let shop = Shop::new(Catalog::embedded());
        let mut model = Model { ids: Vec::new() };
        for request in std::iter::once(&Request::Create).chain(&requests) {
            let (method, path, status, v) = send(&shop, &model, request)?;
            if status == 200 {
                check_shape(&method, &path, &v)?;
                match (method.as_str(), path.as_str()) {
                    ("POST", "/create") => {
                        let id = v.as_i64().unwrap();
                        prop_assert!(!model.ids.contains(&id), "id {id} handed out twice");
                        model.ids.push(id);
                    }
                    ("POST", "/close") => {
                        let Request::Close(e) = request else {
                            prop_assert!(false, "close from {request:?}");
                            unreachable!()
                        };
                        let id = model.resolve(e).as_i64().unwrap();
                        model.ids.retain(|&x| x != id);
                    }
                    _ => {}
                }
            }
            let listed: BTreeSet<i64> = serde_json::from_str::<Vec<i64>>(
                &shop.handle("GET", "/list_envs", b"").body,
            )
            .unwrap()
            .into_iter()
            .collect();
            prop_assert_eq!(listed, model.ids.iter().copied().collect::<BTreeSet<_>>());
        }
    }
}

/// Raw bytes over a real socket to [`crate::WebShopServer`]: whatever arrives (a malformed
/// request line, bad headers, a truncated body, binary noise), the server answers or drops
/// that connection and keeps serving the next client.
mod over_http {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpStream};
    use std::time::Duration;

    use proptest::collection::vec;
    use proptest::prelude::*;

    use crate::catalog::Catalog;
    use crate::server::WebShopServer;

    fn exchange(addr: std::net::SocketAddr, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(2)))?;
        s.write_all(bytes)?;
        s.shutdown(Shutdown::Write)?;
        let mut out = Vec::new();
        // A reset or a timeout is an answer too (the connection was dropped); only the
        // server's survival matters here.
        let _ = s.read_to_end(&mut out);
        Ok(out)
    }

    fn request_bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            vec(any::<u8>(), 0..256),
            (
                "[A-Z]{0,8}",
                "/\\PC{0,40}",
                "(HTTP/1\\.[01]|HTTP/2|.{0,8})",
                vec("[A-Za-z-]{1,16}: \\PC{0,24}", 0..4),
                vec(any::<u8>(), 0..64),
            )
                .prop_map(|(m, p, v, headers, body)| {
                    let mut r = format!("{m} {p} {v}\r\n").into_bytes();
                    for h in headers {
                        r.extend_from_slice(h.as_bytes());
                        r.extend_from_slice(b"\r\n");
                    }
                    r.extend_from_slice(
                        format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes(),
                    );
                    r.extend_from_slice(&body);
                    r
                }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn malformed_http_never_stops_the_server(requests in vec(request_bytes(), 1..4)) {
            let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
            let addr = server.addr();
            for bytes in &requests {
                let _ = exchange(addr, bytes);
                let ok = exchange(addr, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .unwrap();
                let text = String::from_utf8_lossy(&ok);
                prop_assert!(text.starts_with("HTTP/1.1 200") && text.ends_with("\"ok\""), "{text}");
            }
            server.stop();
        }
    }
}
