//! Training checkpoints, written atomically:
//!
//! ```text
//! <dir>/policy/   Hugging Face directory (model.safetensors, config.json, tokenizer.json,
//!                 [adapter_model.safetensors, adapter_config.json]) + optimizer.{safetensors,json}
//! <dir>/critic/   the same for the critic (+ score.weight / score.bias), when there is one
//! <dir>/trainer_state.json   the trainer's own JSON (iteration, RNG state, ...)
//! ```
//!
//! Everything is first written to `<dir>.tmp`, then renamed over `<dir>`.

use std::path::{Path, PathBuf};

use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::critic::Critic;
use crate::hf_dir::write_json;
use crate::optim::AdamW;
use crate::policy::Policy;
use crate::{PolicyError, Result};

/// What to save.
pub struct CheckpointParts<'a> {
    /// The actor.
    pub policy: &'a Policy,
    /// The actor's optimiser.
    pub policy_optimizer: Option<&'a AdamW>,
    /// The critic, when training with GAE.
    pub critic: Option<&'a Critic>,
    /// The critic's optimiser.
    pub critic_optimizer: Option<&'a AdamW>,
    /// The trainer's state (iteration, RNG state, config ...), stored verbatim.
    pub trainer_state: &'a serde_json::Value,
}

/// Save a checkpoint atomically into `dir` (replacing an existing one).
///
/// # Errors
/// [`PolicyError::Io`] naming the path.
pub fn save_checkpoint(dir: &Path, parts: &CheckpointParts<'_>) -> Result<()> {
    write_dir_atomically(dir, |tmp| {
        let pdir = tmp.join("policy");
        create_dir(&pdir)?;
        parts.policy.save_pretrained(&pdir)?;
        if let Some(o) = parts.policy_optimizer {
            o.save(&pdir)?;
        }
        if let Some(c) = parts.critic {
            let cdir = tmp.join("critic");
            create_dir(&cdir)?;
            c.save_pretrained(&cdir)?;
            if let Some(o) = parts.critic_optimizer {
                o.save(&cdir)?;
            }
        }
        write_json(&tmp.join("trainer_state.json"), parts.trainer_state)
    })
}

/// Read `<dir>/trainer_state.json`.
///
/// # Errors
/// [`PolicyError::Checkpoint`] naming the file.
pub fn read_trainer_state(dir: &Path) -> Result<serde_json::Value> {
    recover_interrupted(dir)?;
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| PolicyError::io(&path, e))?;
    serde_json::from_str(&text).map_err(|e| PolicyError::Checkpoint {
        path,
        reason: e.to_string(),
    })
}

/// The policy sub-directory of a checkpoint (load it with [`Policy::from_pretrained`], then its
/// optimiser with [`AdamW::load`]).
pub fn policy_dir(dir: &Path) -> PathBuf {
    dir.join("policy")
}

/// The critic sub-directory of a checkpoint (restore with [`Critic::load_trainable`] and
/// [`AdamW::load`]).
pub fn critic_dir(dir: &Path) -> PathBuf {
    dir.join("critic")
}

fn create_dir(p: &Path) -> Result<()> {
    std::fs::create_dir_all(p).map_err(|e| PolicyError::io(p, e))
}

/// Run `write` on a fresh `<dir>.tmp`, then replace `dir` with it by renames.
///
/// # Errors
/// Whatever `write` returns; I/O errors naming the path.
pub fn write_dir_atomically(dir: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let name = dir
        .file_name()
        .ok_or_else(|| PolicyError::arg("dir", format!("{} has no file name", dir.display())))?
        .to_string_lossy()
        .into_owned();
    let tmp = dir.with_file_name(format!("{name}.tmp"));
    let old = dir.with_file_name(format!("{name}.old"));
    recover_interrupted(dir)?;
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| PolicyError::io(&tmp, e))?;
    }
    create_dir(&tmp)?;
    write(&tmp)?;
    // Make the new contents durable before they replace the old ones.
    sync_tree(&tmp)?;
    if dir.exists() {
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(|e| PolicyError::io(&old, e))?;
        }
        std::fs::rename(dir, &old).map_err(|e| PolicyError::io(dir, e))?;
    }
    std::fs::rename(&tmp, dir).map_err(|e| PolicyError::io(dir, e))?;
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_path(parent)?;
    }
    if old.exists() {
        std::fs::remove_dir_all(&old).map_err(|e| PolicyError::io(&old, e))?;
    }
    Ok(())
}

/// Undo a swap that [`write_dir_atomically`] left half done: when `dir` is missing but
/// `<dir>.old` exists (a crash between its two renames), the old, complete copy is put back.
/// Called before every write and by [`read_trainer_state`], so `--resume` finds the last complete
/// checkpoint.
///
/// # Errors
/// I/O errors naming the path.
pub fn recover_interrupted(dir: &Path) -> Result<()> {
    let Some(name) = dir.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Ok(());
    };
    let old = dir.with_file_name(format!("{name}.old"));
    if !dir.exists() && old.is_dir() {
        std::fs::rename(&old, dir).map_err(|e| PolicyError::io(dir, e))?;
    }
    Ok(())
}

/// fsync every file below `root`, then every directory (children before parents).
fn sync_tree(root: &Path) -> Result<()> {
    let entries = std::fs::read_dir(root).map_err(|e| PolicyError::io(root, e))?;
    for entry in entries {
        let path = entry.map_err(|e| PolicyError::io(root, e))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            sync_path(&path)?;
        }
    }
    sync_path(root)
}

/// fsync one file or directory.
fn sync_path(p: &Path) -> Result<()> {
    std::fs::File::open(p)
        .and_then(|f| f.sync_all())
        .map_err(|e| PolicyError::io(p, e))
}

/// Serializable state of a `ChaCha8Rng` (seed, stream, word position), so a resumed run draws
/// the same numbers as one that never stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RngState {
    /// The 32-byte seed, hex.
    pub seed: String,
    /// The stream id.
    pub stream: u64,
    /// The word position, decimal (u128 does not fit JSON numbers).
    pub word_pos: String,
}

impl RngState {
    /// Capture the state of `rng`.
    pub fn capture(rng: &ChaCha8Rng) -> Self {
        Self {
            seed: hex::encode(rng.get_seed()),
            stream: rng.get_stream(),
            word_pos: rng.get_word_pos().to_string(),
        }
    }

    /// Rebuild the generator.
    ///
    /// # Errors
    /// [`PolicyError::InvalidArgument`] when a field does not parse.
    pub fn restore(&self) -> Result<ChaCha8Rng> {
        use rand::SeedableRng;
        let bytes =
            hex::decode(&self.seed).map_err(|e| PolicyError::arg("rng.seed", e.to_string()))?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| PolicyError::arg("rng.seed", "need 32 bytes"))?;
        let pos: u128 = self
            .word_pos
            .parse()
            .map_err(|e: std::num::ParseIntError| {
                PolicyError::arg("rng.word_pos", e.to_string())
            })?;
        let mut rng = ChaCha8Rng::from_seed(seed);
        rng.set_stream(self.stream);
        rng.set_word_pos(pos);
        Ok(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interrupted_swap_is_recovered_and_writes_replace_contents() {
        let root = std::env::temp_dir().join(format!("ragen-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let dir = root.join("checkpoint");
        let put = |v: &'static str| {
            move |d: &Path| -> Result<()> {
                std::fs::write(d.join("trainer_state.json"), v).map_err(|e| PolicyError::io(d, e))
            }
        };
        write_dir_atomically(&dir, put("{\"iteration\":1}")).unwrap();
        write_dir_atomically(&dir, put("{\"iteration\":2}")).unwrap();
        assert_eq!(read_trainer_state(&dir).unwrap()["iteration"], 2);
        assert!(!root.join("checkpoint.old").exists() && !root.join("checkpoint.tmp").exists());
        // Simulate a crash between the two renames: only `checkpoint.old` is left.
        std::fs::rename(&dir, root.join("checkpoint.old")).unwrap();
        std::fs::create_dir_all(root.join("checkpoint.tmp")).unwrap();
        assert_eq!(read_trainer_state(&dir).unwrap()["iteration"], 2);
        write_dir_atomically(&dir, put("{\"iteration\":3}")).unwrap();
        assert_eq!(read_trainer_state(&dir).unwrap()["iteration"], 3);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
