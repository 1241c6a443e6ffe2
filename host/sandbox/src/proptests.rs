//! Property tests of the manifest reader ([`inspect_bytes`]): any bytes, and any `ragen:plugin`
//! section in a component, give plugin information or an error that names the file, never a
//! panic, in time linear in the input.

use crate::inspect::inspect_bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use ragen_gym_core::{INTERFACE_VERSION, MANIFEST_SECTION};

/// LEB128 of `n` (the section sizes of the wasm binary format).
fn leb(mut n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// A component holding only custom sections named `name` with `data`, nested `depth` components
/// deep (rustc puts the manifest in a nested core module).
fn component(sections: &[(&str, &[u8])], depth: usize) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, data) in sections {
        let mut payload = leb(name.len());
        payload.extend(name.as_bytes());
        payload.extend(*data);
        body.push(0);
        body.extend(leb(payload.len()));
        body.extend(payload);
    }
    let mut out = b"\0asm\x0d\0\x01\0".to_vec();
    if depth == 0 {
        out.extend(body);
    } else {
        let inner = component(sections, depth - 1);
        // section 4: a nested component
        out.push(4);
        out.extend(leb(inner.len()));
        out.extend(inner);
    }
    out
}

/// Manifest JSON: the documented form with fields replaced by arbitrary values, or anything.
fn manifest_json() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just(serde_json::json!("ragen/Sokoban-v0")),
        Just(serde_json::json!("0.1.0")),
        Just(serde_json::json!(INTERFACE_VERSION)),
        Just(serde_json::json!("environment")),
        Just(serde_json::json!("reward-function")),
        Just(serde_json::json!({"http": ["127.0.0.1:3000"], "clock": true})),
        Just(serde_json::json!({"http": ["no port", ""]})),
        Just(serde_json::json!({"fuel_per_call": 0, "memory_bytes": 1})),
        Just(serde_json::json!(null)),
        any::<i64>().prop_map(|x| serde_json::json!(x)),
        ".{0,140}".prop_map(|s| serde_json::json!(s)),
    ];
    let keys = prop_oneof![
        Just("id"),
        Just("version"),
        Just("interface_version"),
        Just("kind"),
        Just("description"),
        Just("capabilities"),
        Just("limits"),
        Just("extra"),
    ];
    prop_oneof![
        4 => vec((keys, value), 0..8).prop_map(|fields| {
            let mut m = serde_json::json!({
                "id": "ragen/Sokoban-v0", "version": "0.1.0",
                "interface_version": INTERFACE_VERSION, "kind": "environment",
            });
            for (k, v) in fields {
                m[k] = v;
            }
            m.to_string()
        }),
        1 => ".{0,64}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_manifest_reader_takes_any_section(json in manifest_json(), depth in 0usize..3, twice in any::<bool>()) {
        let mut sections = vec![(MANIFEST_SECTION, json.as_bytes())];
        if twice {
            sections.push((MANIFEST_SECTION, json.as_bytes()));
        }
        let bytes = component(&sections, depth);
        match inspect_bytes("p.wasm", &bytes) {
            // a component without exports never passes the export check
            Ok(info) => prop_assert!(false, "accepted {:?}", info.manifest),
            // every refusal names the file, whatever the manifest's id says
            Err(e) => prop_assert!(e.to_string().contains("p.wasm"), "{}", e),
        }
    }

    #[test]
    fn the_manifest_reader_takes_any_bytes(
        head in prop_oneof![Just(b"\0asm\x0d\0\x01\0".to_vec()), Just(b"\0asm\x01\0\0\0".to_vec()), Just(vec![])],
        tail in vec(any::<u8>(), 0..256),
    ) {
        let bytes = [head, tail].concat();
        if let Err(e) = inspect_bytes("p.wasm", &bytes) {
            prop_assert!(e.to_string().contains("p.wasm"), "{}", e);
        }
    }
}
