//! [`read_plugin_file`]: a plugin component from a local path, bounded like a download: it must
//! be a regular file (a device such as `/dev/zero`, a FIFO or a directory is refused before it is
//! opened for reading) of at most a cap, counted on the bytes read, not on the size `stat`
//! reports.

use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest plugin component accepted from any source, bytes (the default of the download
/// cap, `ragen_gym_net::Limits::DOWNLOAD`).
pub const MAX_PLUGIN_BYTES: u64 = 256 << 20;

/// Why a local plugin file was refused.
#[derive(Debug, thiserror::Error)]
pub enum PluginFileError {
    /// Not a regular file.
    #[error("plugin file {} is {kind}, not a regular file", path.display())]
    NotARegularFile {
        /// The path.
        path: PathBuf,
        /// What it is (`a character device`, `a directory`, ...).
        kind: &'static str,
    },
    /// Larger than the cap.
    #[error("plugin file {} is larger than the cap of {max_bytes} bytes", path.display())]
    TooLarge {
        /// The path.
        path: PathBuf,
        /// The cap.
        max_bytes: u64,
    },
    /// It could not be read.
    #[error("failed to read plugin file {}", path.display())]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn kind(t: std::fs::FileType) -> Option<&'static str> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_char_device() {
            return Some("a character device");
        }
        if t.is_block_device() {
            return Some("a block device");
        }
        if t.is_fifo() {
            return Some("a FIFO");
        }
        if t.is_socket() {
            return Some("a socket");
        }
    }
    if t.is_dir() {
        Some("a directory")
    } else if t.is_file() {
        None
    } else {
        Some("not a file")
    }
}

/// Read the plugin file at `path`: a regular file (symbolic links followed) of at most
/// `max_bytes`.
///
/// # Errors
/// [`PluginFileError`] naming the path.
pub fn read_plugin_file(path: &Path, max_bytes: u64) -> Result<Vec<u8>, PluginFileError> {
    let io = |source| PluginFileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let refuse = |t: std::fs::FileType| match kind(t) {
        Some(kind) => Err(PluginFileError::NotARegularFile {
            path: path.to_path_buf(),
            kind,
        }),
        None => Ok(()),
    };
    // `stat` first: opening a FIFO for reading would block until a writer comes.
    refuse(std::fs::metadata(path).map_err(io)?.file_type())?;
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    refuse(meta.file_type())?;
    let too_large = || PluginFileError::TooLarge {
        path: path.to_path_buf(),
        max_bytes,
    };
    if meta.len() > max_bytes {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large());
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_directories_are_refused_and_the_cap_counts_bytes() {
        let e = read_plugin_file(Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert_eq!(
            e.to_string(),
            "plugin file /dev/zero is a character device, not a regular file"
        );
        let d = std::env::temp_dir();
        let e = read_plugin_file(&d, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let f = d.join(format!("ragen-gym-plugin-file-{}.wasm", std::process::id()));
        std::fs::write(&f, [7u8; 10]).unwrap();
        assert_eq!(read_plugin_file(&f, 10).unwrap(), vec![7u8; 10]);
        let e = read_plugin_file(&f, 9).unwrap_err();
        assert!(
            e.to_string().contains("larger than the cap of 9 bytes"),
            "{e}"
        );
        std::fs::remove_file(&f).unwrap();
        assert!(matches!(
            read_plugin_file(&f, 9),
            Err(PluginFileError::Io { .. })
        ));
    }
}
