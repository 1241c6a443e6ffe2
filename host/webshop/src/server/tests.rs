use super::*;

fn post(shop: &Shop, path: &str, body: Value) -> (u16, Value) {
    let r = shop.handle("POST", path, body.to_string().as_bytes());
    (r.status, serde_json::from_str(&r.body).unwrap())
}

fn get(shop: &Shop, url: &str) -> (u16, Value) {
    let r = shop.handle("GET", url, b"");
    (r.status, serde_json::from_str(&r.body).unwrap())
}

#[test]
fn agentgym_routes_and_shapes() {
    let shop = Shop::new(Catalog::embedded());
    assert_eq!(get(&shop, "/"), (200, json!("ok")));
    let (s, id) = post(&shop, "/create", Value::Null);
    assert_eq!(s, 200);
    let id = id.as_i64().unwrap();
    assert!((0..=MAX_ENV_ID as i64).contains(&id));
    assert_eq!(get(&shop, "/list_envs"), (200, json!([id])));

    let instr = &shop.catalog().goals[3].instruction_text;
    let (s, reset) = post(&shop, "/reset", json!({"env_idx": id, "session_id": 3}));
    assert_eq!(s, 200);
    assert_eq!(
        reset,
        json!([
            format!("WebShop [SEP] Instruction: [SEP] {instr} [SEP] Search"),
            null
        ])
    );
    assert_eq!(
        get(&shop, &format!("/available_actions?env_idx={id}")),
        (
            200,
            json!({"has_search_bar": true, "clickables": ["search"]})
        )
    );
    assert_eq!(
        get(&shop, &format!("/instruction_text?env_idx={id}")),
        (200, json!(format!("Instruction: {instr}")))
    );

    let (s, step) = post(
        &shop,
        "/step",
        json!({"env_idx": id, "action": "search[tee]"}),
    );
    assert_eq!(s, 200);
    assert_eq!(step["reward"], json!(0.0));
    assert_eq!(step["done"], json!(false));
    assert_eq!(step["info"], Value::Null);
    assert_eq!(
        get(&shop, &format!("/observation?env_idx={id}")).1,
        step["state"]
    );
    let (_, state) = get(&shop, &format!("/state?env_idx={id}"));
    assert_eq!(
        state["instruction_text"],
        json!(format!("Instruction: {instr}"))
    );

    // Errors: unknown env 404, bad body 422, both in FastAPI's {"detail": ...} shape.
    let (s, e) = post(&shop, "/step", json!({"env_idx": id + 1, "action": "x"}));
    assert_eq!(s, 404);
    assert!(e["detail"].as_str().unwrap().contains("does not exist"));
    assert_eq!(shop.handle("POST", "/step", b"{not json").status, 422);
    assert_eq!(
        post(&shop, "/reset", json!({"env_idx": id, "session_id": -1})).0,
        422
    );
    assert_eq!(get(&shop, "/available_actions").0, 422);
    assert_eq!(
        post(&shop, "/close", json!({"env_idx": id})),
        (200, json!(true))
    );
    assert_eq!(get(&shop, "/list_envs"), (200, json!([])));
}

#[test]
fn goal_indices_wrap_and_ids_are_deterministic() {
    let a = Shop::new(Catalog::embedded());
    let b = Shop::new(Catalog::embedded());
    let ids_a: Vec<Value> = (0..3).map(|_| post(&a, "/create", Value::Null).1).collect();
    let ids_b: Vec<Value> = (0..3).map(|_| post(&b, "/create", Value::Null).1).collect();
    assert_eq!(ids_a, ids_b);
    let n = a.catalog().goals.len() as u64;
    let id = ids_a[0].clone();
    let r1 = post(&a, "/reset", json!({"env_idx": id, "session_id": 5})).1;
    let r2 = post(
        &a,
        "/reset",
        json!({"env_idx": id, "session_id": 5 + 2 * n}),
    )
    .1;
    assert_eq!(r1, r2);
}

#[test]
fn env_ids_are_never_reused() {
    let ids: std::collections::HashSet<i64> = (0..200_000).map(env_id).collect();
    assert_eq!(ids.len(), 200_000);
    assert!(ids.iter().all(|&id| (0..=MAX_ENV_ID as i64).contains(&id)));
    // The stride is a unit modulo MAX_ENV_ID + 1, so the map is a permutation.
    let (mut a, mut b) = (ENV_ID_STRIDE, MAX_ENV_ID + 1);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    assert_eq!(a, 1);
}

#[test]
fn idle_sessions_close_and_the_cap_closes_the_least_recently_used() {
    let limits = SessionLimits {
        idle_timeout: Duration::from_secs(10),
        max_sessions: 3,
    };
    let shop = Shop::with_limits(Catalog::embedded(), limits);
    let t0 = Instant::now();
    let at = |s: u64| t0 + Duration::from_secs(s);
    let create = |s| {
        let r = shop.handle_at("POST", "/create", b"", at(s));
        r.body.parse::<i64>().unwrap()
    };
    let reset = |id: i64, s| {
        let body = json!({"env_idx": id, "session_id": 0}).to_string();
        shop.handle_at("POST", "/reset", body.as_bytes(), at(s))
            .status
    };
    let (a, b) = (create(0), create(1));
    // `a` stays in use; `b` is left alone past the idle timeout.
    assert_eq!(reset(a, 9), 200);
    assert_eq!(reset(a, 18), 200);
    assert_eq!(reset(b, 11), 404, "idle for 10 s");
    assert_eq!(shop.expired_count(), 1);
    // At the cap of 3, a 4th session closes the least recently used (c, used at 19).
    let c = create(19);
    let d = create(20);
    assert_eq!(reset(a, 21), 200);
    let e = create(22);
    assert_eq!(reset(c, 23), 404, "least recently used at the cap");
    assert_eq!((reset(d, 23), reset(e, 23)), (200, 200));
    let listed = shop.handle_at("GET", "/list_envs", b"", at(23)).body;
    let mut want = vec![a, d, e];
    want.sort_unstable();
    assert_eq!(listed, json!(want).to_string());
    // Everything idles out; the count goes back to zero.
    assert_eq!(shop.handle_at("GET", "/list_envs", b"", at(40)).body, "[]");
    assert_eq!(shop.expired_count(), 5);
}

/// A minimal HTTP/1.1 exchange over a std socket, to check the server end to end.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out[9..12].parse().unwrap();
    let body = out.split_once("\r\n\r\n").unwrap().1.to_string();
    (status, body)
}

#[test]
fn serves_over_http_and_stops() {
    let server = WebShopServer::start(Catalog::embedded(), "127.0.0.1:0").unwrap();
    let addr = server.addr();
    let (s, id) = http(addr, "POST", "/create", "");
    assert_eq!(s, 200);
    let (s, obs) = http(
        addr,
        "POST",
        "/reset",
        &format!(r#"{{"env_idx":{id},"session_id":0}}"#),
    );
    assert_eq!(s, 200);
    assert!(
        obs.starts_with(r#"["WebShop [SEP] Instruction: [SEP] "#),
        "{obs}"
    );
    server.stop();
    // tiny_http closes its listener from its own accept thread once the server is dropped,
    // which can lag `stop()` by a moment on a loaded machine: poll for up to 5 s.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut closed = false;
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(closed, "listener still open 5 s after stop");
}
