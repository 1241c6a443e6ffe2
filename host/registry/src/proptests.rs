//! Property tests of the lock reader ([`LockFile::read`]) and the component check
//! ([`check_component`]): any file gives a lock or an error naming the file, any written lock
//! reads back equal, any bytes are a component or refused with a reason, never a panic.

use crate::artifact::check_component;
use crate::digest::Digest;
use crate::lock::{LockFile, LockedPlugin, PluginRole};
use proptest::collection::vec;
use proptest::prelude::*;

/// Text made of lock-file pieces, or anything.
fn lock_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("version = 1\n".to_string()),
        Just("version = 2\n".to_string()),
        Just("[[plugin]]\n".to_string()),
        Just("role = \"env\"\n".to_string()),
        Just(format!("digest = \"sha256:{}\"\n", "ab".repeat(32))),
        Just("digest = \"sha256:zz\"\n".to_string()),
        "[a-z_]{1,10} = \"[^\"\\\\]{0,10}\"\n",
        ".{0,20}",
    ];
    vec(piece, 0..12).prop_map(|p| p.concat())
}

fn plugin() -> impl Strategy<Value = LockedPlugin> {
    (
        any::<bool>(),
        ".{0,20}",
        any::<[u8; 32]>(),
        proptest::option::of(any::<[u8; 32]>()),
        (".{0,12}", ".{0,8}", ".{0,8}"),
    )
        .prop_map(|(env, reference, d, m, (id, version, interface_version))| {
            let digest = |b: [u8; 32]| Digest::parse(&hex::encode(b)).unwrap();
            LockedPlugin {
                role: if env {
                    PluginRole::Env
                } else {
                    PluginRole::Reward
                },
                reference,
                digest: digest(d),
                oci_manifest: m.map(digest),
                id,
                version,
                interface_version,
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_lock_reader_takes_any_file(text in lock_text()) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("ragen-gym.lock");
        std::fs::write(&path, &text).unwrap();
        match LockFile::read(&path) {
            Ok(lock) => prop_assert_eq!(lock.version, 1),
            Err(e) => prop_assert!(e.to_string().contains("ragen-gym.lock"), "{}", e),
        }
    }

    #[test]
    fn a_written_lock_reads_back(plugins in vec(plugin(), 0..4)) {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join("ragen-gym.lock");
        let lock = LockFile { plugins, ..LockFile::default() };
        lock.write(&path).unwrap();
        prop_assert_eq!(LockFile::read(&path).unwrap(), lock);
    }

    #[test]
    fn the_component_check_takes_any_bytes(
        head in prop_oneof![Just(b"\0asm\x0d\0\x01\0".to_vec()), Just(b"\0asm\x01\0\0\0".to_vec()), Just(vec![])],
        tail in vec(any::<u8>(), 0..64),
    ) {
        let bytes = [head.clone(), tail].concat();
        match check_component("x.wasm", &bytes) {
            Ok(()) => prop_assert!(bytes.starts_with(b"\0asm\x0d\0\x01\0")),
            Err(e) => prop_assert!(e.to_string().contains("x.wasm"), "{}", e),
        }
    }
}
