//! # ragen-gym-builtins: the built-in env plugins, embedded
//!
//! `build.rs` compiles `plugins/{bandit,sokoban,frozen-lake}` (and `webshop-bridge` when it
//! builds) to wasm32-wasip2 components; this crate embeds their bytes. The host loads them
//! through the same sandbox as any third-party plugin.
//!
//! ```
//! let bytes = ragen_gym_builtins::builtin("sokoban").expect("built in");
//! assert_eq!(&bytes[..4], b"\0asm");
//! ```

#![deny(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/builtins.rs"));

/// The component bytes of a built-in plugin (`bandit`, `sokoban`, `frozenlake`, and
/// `webshop-bridge` when embedded), or `None`.
pub fn builtin(name: &str) -> Option<&'static [u8]> {
    BUILTINS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Names of the embedded built-ins.
pub fn names() -> impl Iterator<Item = &'static str> {
    BUILTINS.iter().map(|(n, _)| *n)
}

#[cfg(test)]
mod tests {
    #[test]
    fn required_builtins_are_components() {
        for name in ["bandit", "sokoban", "frozenlake"] {
            let b = super::builtin(name).unwrap_or_else(|| panic!("{name} missing"));
            // Component binary header: magic, then version 0x0d with layer 1.
            assert_eq!(&b[..8], b"\0asm\x0d\x00\x01\x00", "{name}");
        }
        assert!(super::builtin("nope").is_none());
    }
}
