//! The bounds of [`Client`] against raw HTTP/1.1 servers on loopback, each serving a fixed
//! number of connections: an endless body hits the byte cap, a trickle hits the minimum rate
//! and then the deadline, a lying Content-Length is refused before reading, and a redirect to
//! an ungranted port is not followed.

use ragen_gym_net::{Client, Grants, Limits, MinRate, NetError, Url, header::HeaderMap};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What a test server writes after reading a request's head.
type Script = dyn Fn(&mut TcpStream) + Send + Sync;

/// Serve `connections` connections with `script`; returns the port and a request counter.
fn serve(connections: usize, script: Box<Script>) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let script: Arc<Script> = Arc::from(script);
    std::thread::spawn(move || {
        for conn in listener.incoming().take(connections) {
            let Ok(mut conn) = conn else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let script = script.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                script(&mut conn);
            });
        }
    });
    (port, hits)
}

fn limits(max_bytes: u64, deadline_ms: u64, rate: Option<(u64, u64)>) -> Limits {
    Limits {
        max_bytes,
        deadline: Duration::from_millis(deadline_ms),
        min_rate: rate.map(|(bytes_per_sec, ms)| MinRate {
            bytes_per_sec,
            window: Duration::from_millis(ms),
        }),
        head_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(5),
    }
}

fn get(client: &Client, url: &str) -> Result<(u16, Vec<u8>), NetError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(client.get(&Url::parse(url).unwrap(), HeaderMap::new()))
}

fn granted(port: u16) -> Grants {
    Grants::https_or(vec![format!("127.0.0.1:{port}")], "--insecure-registry")
}

#[test]
fn an_endless_body_stops_at_the_byte_cap() {
    let (port, _) = serve(
        1,
        Box::new(|c| {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            let chunk = [b'x'; 64 << 10];
            let head = format!("{:x}\r\n", chunk.len());
            // bounded: 64 MiB at most, or until the client hangs up
            for _ in 0..1024 {
                let ok = c.write_all(head.as_bytes()).is_ok()
                    && c.write_all(&chunk).is_ok()
                    && c.write_all(b"\r\n").is_ok();
                if !ok {
                    return;
                }
            }
        }),
    );
    let client = Client::new(granted(port), limits(1 << 20, 20_000, None)).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{port}/x.wasm")).unwrap_err();
    assert_eq!(
        err,
        NetError::TooLarge {
            url: format!("http://127.0.0.1:{port}/x.wasm"),
            max_bytes: 1 << 20,
            announced: None
        }
    );
    assert!(
        err.to_string()
            .contains("more than the cap of 1048576 bytes arrived"),
        "{err}"
    );
}

#[test]
fn a_lying_content_length_is_refused_before_the_body() {
    let (port, _) = serve(
        1,
        Box::new(|c| {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\nxx");
        }),
    );
    let client = Client::new(granted(port), limits(1 << 20, 20_000, None)).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{port}/x")).unwrap_err();
    assert!(
        matches!(
            err,
            NetError::TooLarge {
                announced: Some(999_999_999_999),
                ..
            }
        ),
        "{err:?}"
    );
}

/// One byte every 100 ms: 10 bytes/s.
fn trickle(c: &mut TcpStream) {
    let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
    for _ in 0..100 {
        if c.write_all(b"x").is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_trickle_fails_the_minimum_rate_then_the_deadline() {
    let (port, _) = serve(2, Box::new(trickle));
    let url = format!("http://127.0.0.1:{port}/slow");
    // 10 bytes/s against a floor of 100 bytes/s over 300 ms: fails at the first window
    let client = Client::new(granted(port), limits(1 << 20, 20_000, Some((100, 300)))).unwrap();
    let t = Instant::now();
    let err = get(&client, &url).unwrap_err();
    assert!(matches!(err, NetError::TooSlow { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert!(
        err.to_string()
            .contains("minimum rate of 100 bytes/s over 0.3 s"),
        "{err}"
    );
    // no floor: the overall deadline ends it, though every read brings a byte
    let client = Client::new(granted(port), limits(1 << 20, 700, None)).unwrap();
    let t = Instant::now();
    let err = get(&client, &url).unwrap_err();
    assert!(
        matches!(err, NetError::Deadline { received, .. } if (3..=9).contains(&received)),
        "{err:?}"
    );
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(2),
        "{took:?}"
    );
}

#[test]
fn a_redirect_to_an_ungranted_port_is_not_followed() {
    let (target, target_hits) = serve(
        1,
        Box::new(|c| {
            let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
        }),
    );
    let location = format!("http://127.0.0.1:{target}/elsewhere");
    let (port, _) = serve(
        1,
        Box::new(move |c| {
            let _ = write!(
                c,
                "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n"
            );
        }),
    );
    let client = Client::new(granted(port), limits(1 << 20, 20_000, None)).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{port}/x")).unwrap_err();
    match &err {
        NetError::RedirectRefused { url, hop } => {
            assert_eq!(*url, format!("http://127.0.0.1:{port}/x"));
            assert_eq!(hop.host, format!("127.0.0.1:{target}"));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        err.to_string()
            .contains(&format!("--insecure-registry 127.0.0.1:{target}")),
        "{err}"
    );
    assert_eq!(
        target_hits.load(Ordering::SeqCst),
        0,
        "the hop was contacted"
    );
}

#[test]
fn a_server_that_never_answers_hits_the_head_timeout_or_the_deadline() {
    let (port, _) = serve(2, Box::new(|_| std::thread::sleep(Duration::from_secs(5))));
    let mut l = limits(1 << 20, 400, None);
    let client = Client::new(granted(port), l).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{port}/")).unwrap_err();
    assert!(
        matches!(err, NetError::Deadline { received: 0, .. }),
        "{err:?}"
    );
    l.deadline = Duration::from_secs(20);
    l.head_timeout = Duration::from_millis(300);
    let client = Client::new(granted(port), l).unwrap();
    let err = get(&client, &format!("http://127.0.0.1:{port}/")).unwrap_err();
    assert!(matches!(err, NetError::HeadTimeout { .. }), "{err:?}");
}
