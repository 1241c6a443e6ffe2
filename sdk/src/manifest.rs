//! The plugin manifest embedded in the component (custom section [`MANIFEST_SECTION`]).
//!
//! The host reads it with `wasmparser` without running plugin code. It is JSON:
//!
//! ```json
//! { "id": "ragen/Sokoban-v0", "version": "0.1.0", "interface_version": "0.1.0",
//!   "kind": "environment", "description": "...",
//!   "capabilities": { "http": ["127.0.0.1:3000"], "clock": false, "random": false },
//!   "limits": { "fuel_per_call": 1000000000, "memory_bytes": 67108864 } }
//! ```
//!
//! Nobody writes it by hand: [`export_env!`](crate::export_env) and
//! [`export_reward!`](crate::export_reward) derive it at compile time from the trait's `ID`,
//! `CAPABILITIES` and `LIMITS`, the crate's Cargo `version` and `description`, and
//! [`INTERFACE_VERSION`] (read from `wit/worlds.wit`). The writer is a `const fn`, so the JSON
//! is a `static` in the component and an id the host would refuse fails the build.

/// Name of the custom section holding the manifest JSON. (`#[link_section]` takes only a literal,
/// so the export macros spell it out; a test below keeps the two equal.)
pub const MANIFEST_SECTION: &str = "ragen:plugin";

include!(concat!(env!("OUT_DIR"), "/interface_version.rs"));

/// Longest id the host accepts, in bytes ([`id_problem`] is the whole rule).
pub const MAX_ID_BYTES: usize = 128;

/// Capabilities a plugin asks for; each must also be granted by the user.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// `host:port` targets the plugin may call through [`crate::http::fetch`]
    /// (granted with `--allow-host`).
    pub http: &'static [&'static str],
    /// The real wall and monotonic clocks instead of the deterministic ones.
    pub clock: bool,
    /// Real randomness instead of randomness derived from the reset seed.
    pub random: bool,
}

impl Capabilities {
    /// Nothing: the default.
    pub const NONE: Self = Self {
        http: &[],
        clock: false,
        random: false,
    };

    /// HTTP to these `host:port` targets, nothing else.
    pub const fn http(targets: &'static [&'static str]) -> Self {
        Self {
            http: targets,
            ..Self::NONE
        }
    }
}

/// Per-call limits a plugin asks for; the host takes the lower of these and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fuel units per call.
    pub fuel_per_call: Option<u64>,
    /// Linear-memory cap in bytes.
    pub memory_bytes: Option<u64>,
}

impl Limits {
    /// The host's limits: the default.
    pub const NONE: Self = Self {
        fuel_per_call: None,
        memory_bytes: None,
    };
}

/// Everything the manifest says, before it is written as JSON. Each plugin kind's parts are
/// made beside its trait ([`ManifestParts::env`] in `env.rs`, [`ManifestParts::reward`] in
/// `reward.rs`), so this module does not depend on the traits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestParts {
    /// `namespace/Name-vN`.
    pub id: &'static str,
    /// The plugin's semver (Cargo `version`).
    pub version: &'static str,
    /// `environment` or `reward-function`.
    pub kind: &'static str,
    /// One sentence (Cargo `description`).
    pub description: &'static str,
    /// Requested capabilities.
    pub capabilities: Capabilities,
    /// Requested limits.
    pub limits: Limits,
}

/// The crate metadata [`export_env!`](crate::export_env) and
/// [`export_reward!`](crate::export_reward) record for the exported type: Cargo's `version`
/// and `description` of the plugin crate.
pub trait Package {
    /// Cargo `version`.
    const VERSION: &'static str;
    /// Cargo `description` (may be empty).
    const DESCRIPTION: &'static str;
}

impl ManifestParts {
    /// The JSON length in bytes. Panics (at compile time, in the export macros) when the id is
    /// not one the host accepts ([`check_id`]).
    pub const fn json_len(&self) -> usize {
        check_id(self.id);
        let mut out = Writer {
            buf: &mut [],
            len: 0,
        };
        self.write(&mut out);
        out.len
    }

    /// The JSON bytes; `N` must be [`json_len`](Self::json_len).
    pub const fn json_bytes<const N: usize>(&self) -> [u8; N] {
        let mut bytes = [0u8; N];
        let mut out = Writer {
            buf: &mut bytes,
            len: 0,
        };
        self.write(&mut out);
        assert!(out.len == N, "json_bytes: N is not json_len()");
        bytes
    }

    /// The JSON as a string (for tests and tools).
    pub fn json(&self) -> String {
        let mut bytes = vec![0u8; self.json_len()];
        let mut out = Writer {
            buf: &mut bytes,
            len: 0,
        };
        self.write(&mut out);
        String::from_utf8(bytes).expect("the writer copies UTF-8 and escapes only ASCII")
    }

    const fn write(&self, out: &mut Writer<'_>) {
        out.raw("{\"id\":");
        out.string(self.id);
        out.raw(",\"version\":");
        out.string(self.version);
        out.raw(",\"interface_version\":");
        out.string(INTERFACE_VERSION);
        out.raw(",\"kind\":");
        out.string(self.kind);
        out.raw(",\"description\":");
        out.string(self.description);
        if !matches!(self.kind.as_bytes(), b"reward-function") {
            out.raw(",\"capabilities\":{\"http\":[");
            let mut i = 0;
            while i < self.capabilities.http.len() {
                if i > 0 {
                    out.byte(b',');
                }
                out.string(self.capabilities.http[i]);
                i += 1;
            }
            out.raw("],\"clock\":");
            out.raw(if self.capabilities.clock {
                "true"
            } else {
                "false"
            });
            out.raw(",\"random\":");
            out.raw(if self.capabilities.random {
                "true"
            } else {
                "false"
            });
            out.byte(b'}');
        }
        out.raw(",\"limits\":{");
        let mut first = true;
        if let Some(fuel) = self.limits.fuel_per_call {
            out.raw("\"fuel_per_call\":");
            out.uint(fuel);
            first = false;
        }
        if let Some(bytes) = self.limits.memory_bytes {
            if !first {
                out.byte(b',');
            }
            out.raw("\"memory_bytes\":");
            out.uint(bytes);
        }
        out.raw("}}");
    }
}

/// Why the host refuses `id`, or `None` when it accepts it. The rule is the shape of Gymnasium's
/// env ids (`ENV_ID_RE` in `gymnasium/envs/registration.py`), read in ASCII and with the
/// namespace required: `namespace/Name-vN`, each side of the one `/` non-empty and made of
/// letters, digits, `_`, `:`, `.` and `-`, at most [`MAX_ID_BYTES`] bytes in all. (The `-vN` is
/// optional, as in Gymnasium; `ragen-gym check` asks for it.) A `const fn`, so the export
/// macros check ids at compile time and the host (`ragen_gym_core::check_id`) and the
/// build tool check them with the same code.
pub const fn id_problem(id: &str) -> Option<&'static str> {
    let b = id.as_bytes();
    if b.is_empty() || b.len() > MAX_ID_BYTES {
        return Some("it must be 1 to 128 bytes");
    }
    let mut slash = None;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' {
            if slash.is_some() {
                return Some("it has more than one `/`");
            }
            slash = Some(i);
        } else if !(c.is_ascii_alphanumeric() || c == b'_' || c == b':' || c == b'.' || c == b'-') {
            return Some(
                "only ASCII letters, digits, `_`, `:`, `.` and `-` may stand around the `/`",
            );
        }
        i += 1;
    }
    match slash {
        Some(at) if at > 0 && at + 1 < b.len() => None,
        Some(_) => Some("it needs a namespace and a name around the `/`"),
        None => Some("it has no `/` between a namespace and a name"),
    }
}

/// Panic unless `id` is one the host accepts ([`id_problem`] gives the rule). In a `const`
/// context (the export macros) the panic is a compile error.
pub const fn check_id(id: &str) {
    if let Some(why) = id_problem(id) {
        panic!("{}", why);
    }
}

/// Writes bytes into `buf` while counting them; with an empty `buf` it only counts.
struct Writer<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl Writer<'_> {
    const fn byte(&mut self, b: u8) {
        if self.len < self.buf.len() {
            self.buf[self.len] = b;
        }
        self.len += 1;
    }

    const fn raw(&mut self, s: &str) {
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            self.byte(b[i]);
            i += 1;
        }
    }

    /// A JSON string literal (RFC 8259 §7: `"`, `\` and control characters escaped).
    const fn string(&mut self, s: &str) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        self.byte(b'"');
        let b = s.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            if c == b'"' || c == b'\\' {
                self.byte(b'\\');
                self.byte(c);
            } else if c < 0x20 {
                self.raw("\\u00");
                self.byte(HEX[(c >> 4) as usize]);
                self.byte(HEX[(c & 0xf) as usize]);
            } else {
                self.byte(c);
            }
            i += 1;
        }
        self.byte(b'"');
    }

    const fn uint(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut k = 0;
        loop {
            digits[k] = b'0' + (n % 10) as u8;
            k += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        while k > 0 {
            k -= 1;
            self.byte(digits[k]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn export_macros_use_the_manifest_section_name() {
        let export = include_str!("export.rs");
        let attr = format!("#[unsafe(link_section = \"{MANIFEST_SECTION}\")]");
        assert_eq!(export.matches(&attr).count(), 1, "export.rs: {attr}");
    }

    #[test]
    fn the_json_parses_and_escapes() {
        let parts = ManifestParts {
            id: "me/Quote-v0",
            version: "1.2.3",
            kind: "environment",
            description: "say \"hi\"\\\n\u{1}ünï",
            capabilities: Capabilities {
                http: &["127.0.0.1:3000", "localhost:8080"],
                clock: true,
                random: false,
            },
            limits: Limits {
                fuel_per_call: Some(18_446_744_073_709_551_615),
                memory_bytes: Some(0),
            },
        };
        let json = parts.json();
        assert_eq!(json.len(), parts.json_len());
        let v: serde_json::Value = serde_json::from_str(&json).expect(&json);
        assert_eq!(v["id"], "me/Quote-v0");
        assert_eq!(v["interface_version"], INTERFACE_VERSION);
        assert_eq!(v["description"], "say \"hi\"\\\n\u{1}ünï");
        assert_eq!(v["capabilities"]["http"][1], "localhost:8080");
        assert_eq!(v["capabilities"]["clock"], true);
        assert_eq!(v["limits"]["fuel_per_call"], u64::MAX);
        assert_eq!(v["limits"]["memory_bytes"], 0);
        let none = ManifestParts {
            kind: "reward-function",
            limits: Limits::NONE,
            ..parts
        };
        let v: serde_json::Value = serde_json::from_str(&none.json()).unwrap();
        assert!(v.get("capabilities").is_none(), "{v}");
        assert_eq!(v["limits"], serde_json::json!({}));
        // The const path (what the export macros put in the custom section) writes the same.
        const CONST_PARTS: ManifestParts = ManifestParts {
            id: "me/Const-v0",
            version: "0.1.0",
            kind: "environment",
            description: "d",
            capabilities: Capabilities::http(&["h:1"]),
            limits: Limits::NONE,
        };
        const N: usize = CONST_PARTS.json_len();
        static BYTES: [u8; N] = CONST_PARTS.json_bytes::<N>();
        assert_eq!(&BYTES[..], CONST_PARTS.json().as_bytes());
    }

    #[test]
    fn ids_the_host_refuses_panic() {
        check_id("a/B-v0");
        for bad in [
            "", "noslash", "/B-v0", "a/", "a/B v0", "a/B\t", "a/b/c", "/", "a/B?", "ü/B",
        ] {
            assert!(
                std::panic::catch_unwind(|| check_id(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(std::panic::catch_unwind(|| check_id(&"a/".repeat(65))).is_err());
    }
}
