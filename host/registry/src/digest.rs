//! [`Digest`]: a sha256 content digest, written `sha256:<64 lowercase hex>` as in OCI
//! descriptors (OCI image-spec `descriptor.md`, "Digests").

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::str::FromStr;

/// A sha256 digest of some bytes.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The 64 lowercase hex digits (the plugin's identity elsewhere in ragen-gym, e.g.
    /// `plugin_sha256` in `trajectories.jsonl`).
    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parse `sha256:<hex>` or bare `<hex>` (64 hex digits, either case).
    ///
    /// # Errors
    /// A [`DigestError`] naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, DigestError> {
        let hex_part = match s.split_once(':') {
            Some(("sha256", h)) => h,
            Some((alg, _)) => {
                return Err(DigestError::Algorithm {
                    algorithm: alg.to_string(),
                });
            }
            None => s,
        };
        if hex_part.len() != 64 {
            return Err(DigestError::Length {
                hex: hex_part.to_string(),
                len: hex_part.len(),
            });
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex_part.to_ascii_lowercase(), &mut out).map_err(|error| {
            DigestError::NotHex {
                hex: hex_part.to_string(),
                error,
            }
        })?;
        Ok(Self(out))
    }
}

/// Why a string is not a [`Digest`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DigestError {
    /// An algorithm other than sha256.
    #[error("unsupported digest algorithm `{algorithm}`")]
    Algorithm {
        /// The algorithm as written.
        algorithm: String,
    },
    /// Not 64 digits.
    #[error("a sha256 digest has 64 hex digits, `{hex}` has {len}")]
    Length {
        /// The digits as written.
        hex: String,
        /// Their number.
        len: usize,
    },
    /// 64 characters that are not all hex digits.
    #[error("`{hex}` is not hex: {error}")]
    NotHex {
        /// The digits as written.
        hex: String,
        /// The decoder's complaint (the first bad character).
        error: hex::FromHexError,
    },
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex())
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Digest {
    type Err = DigestError;
    fn from_str(s: &str) -> Result<Self, DigestError> {
        Self::parse(s)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_abc_is_the_fips_180_2_vector() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert_eq!(Digest::parse(&d.hex().to_uppercase()).unwrap(), d);
    }

    #[test]
    fn bad_digests_name_the_problem() {
        let err = |s: &str| Digest::parse(s).unwrap_err();
        assert_eq!(
            err("sha512:00"),
            DigestError::Algorithm {
                algorithm: "sha512".into()
            }
        );
        assert!(err("sha512:00").to_string().contains("sha512"));
        assert_eq!(
            err("sha256:abc"),
            DigestError::Length {
                hex: "abc".into(),
                len: 3
            }
        );
        assert!(err("sha256:abc").to_string().contains("64 hex"));
        let zz = "zz".repeat(32);
        assert!(matches!(err(&zz), DigestError::NotHex { hex, .. } if hex == zz));
        assert!(err(&zz).to_string().contains("not hex"));
    }
}
