//! Finding the agent binary this client ships to the sandbox, and naming it
//! by content: the SHA-256 of its bytes becomes part of its path on the
//! sandbox, so a changed agent is installed next to the old one, never
//! confused with it.
//!
//! Search order: `$TETHER_AGENT_BIN`; `tether-agent` next to the running
//! executable; the workspace's static build
//! (`target/x86_64-unknown-linux-gnu/release/tether-agent`, made by
//! `scripts/build-agent`); the workspace's debug build
//! (`target/debug/tether-agent`).

use crate::driver::AgentSource;
use sha2::{Digest, Sha256};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tether_core::protocol::AgentLocation;

/// The environment variable that names the agent binary explicitly.
pub const AGENT_ENV: &str = "TETHER_AGENT_BIN";

/// The agent binary, loaded.
#[derive(Clone)]
pub struct AgentBinary {
    /// Where it was found.
    pub path: PathBuf,
    /// Its bytes, shipped on install.
    pub bytes: Arc<[u8]>,
    /// Hex SHA-256 of the bytes.
    pub hash: String,
}

impl fmt::Debug for AgentBinary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBinary")
            .field("path", &self.path)
            .field("size", &self.bytes.len())
            .field("hash", &self.hash)
            .finish()
    }
}

/// Why no agent binary could be used.
#[derive(Debug)]
pub enum AgentBinError {
    /// None of the places searched holds one.
    NotFound {
        /// The places searched, in order.
        searched: Vec<PathBuf>,
    },
    /// `$TETHER_AGENT_BIN` names a file that cannot be read.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

impl fmt::Display for AgentBinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AgentBinError::NotFound { searched } => {
                write!(
                    f,
                    "cannot find the tether-agent binary; build it with `scripts/build-agent` \
                     (static, for any x86_64 Linux sandbox) or `cargo build -p tether-agent`, \
                     or point {AGENT_ENV} at it. Searched:"
                )?;
                for path in searched {
                    write!(f, "\n  {}", path.display())?;
                }
                Ok(())
            }
            AgentBinError::Unreadable { path, error } => {
                write!(
                    f,
                    "cannot read the agent binary {}: {error}",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for AgentBinError {}

impl AgentBinary {
    /// Finds and loads the agent binary (see the module docs for the order).
    pub fn find() -> Result<AgentBinary, AgentBinError> {
        AgentBinary::load(&locate()?)
    }

    /// Finds the agent binary; its hash is remembered in the file `cache`
    /// under the file's identity (device, inode, size, modification and
    /// change times, path), so a later call with the same file neither
    /// reads nor hashes it, and its bytes are read only if an install
    /// needs them. A cache that cannot be read or written only costs the
    /// hashing.
    pub fn find_cached(cache: &Path) -> Result<AgentRef, AgentBinError> {
        AgentBinary::cached(locate()?, cache)
    }

    /// [`AgentBinary::find_cached`] for the binary at `path`.
    pub fn cached(path: PathBuf, cache: &Path) -> Result<AgentRef, AgentBinError> {
        let key = std::fs::metadata(&path).ok().map(|meta| {
            use std::os::unix::fs::MetadataExt;
            format!(
                "{}:{}:{}:{}.{}:{}.{}:{}",
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec(),
                path.display()
            )
        });
        let known = std::fs::read_to_string(cache).unwrap_or_default();
        if let Some(key) = &key {
            let size = key.split(':').nth(2).and_then(|s| s.parse().ok());
            let hash = known
                .lines()
                .find_map(|line| line.strip_prefix(key.as_str())?.strip_prefix(' '))
                .filter(|hash| !hash.contains(' '));
            if let (Some(hash), Some(size)) = (hash, size) {
                return Ok(AgentRef {
                    hash: hash.to_owned(),
                    size,
                    source: AgentSource::File(path.clone()),
                    path,
                });
            }
        }
        let agent = AgentBinary::load(&path)?;
        if let Some(key) = key {
            // The newest entries, this one last; written whole, then
            // renamed into place.
            let mut lines: Vec<&str> = known.lines().collect();
            let keep = lines.len().saturating_sub(15);
            lines.drain(..keep);
            let entry = format!("{key} {}", agent.hash);
            lines.push(&entry);
            let tmp = cache.with_extension(format!("tmp{}", std::process::id()));
            let written = cache
                .parent()
                .map_or(Ok(()), |dir| {
                    use std::os::unix::fs::DirBuilderExt;
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)
                })
                .and_then(|()| std::fs::write(&tmp, lines.join("\n") + "\n"))
                .and_then(|()| std::fs::rename(&tmp, cache));
            if written.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
        }
        Ok(AgentRef {
            hash: agent.hash.clone(),
            size: agent.size(),
            source: AgentSource::Bytes(agent.bytes.clone()),
            path: agent.path,
        })
    }

    /// Loads the agent binary at `path`.
    pub fn load(path: &Path) -> Result<AgentBinary, AgentBinError> {
        let bytes = std::fs::read(path).map_err(|error| AgentBinError::Unreadable {
            path: path.to_owned(),
            error,
        })?;
        let hash = hex_sha256(&bytes);
        Ok(AgentBinary {
            path: path.to_owned(),
            bytes: bytes.into(),
            hash,
        })
    }

    /// Where this agent lives on a sandbox whose root is `root`.
    pub fn location(&self, root: &str) -> AgentLocation {
        AgentLocation {
            root: root.to_owned(),
            hash: self.hash.clone(),
        }
    }

    /// Its size in bytes.
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// The agent binary, found, its bytes perhaps not read yet
/// ([`AgentBinary::find_cached`]).
#[derive(Clone, Debug)]
pub struct AgentRef {
    /// Where it was found.
    pub path: PathBuf,
    /// Hex SHA-256 of its bytes.
    pub hash: String,
    /// Its size in bytes.
    pub size: u64,
    /// What an install ships.
    pub source: AgentSource,
}

impl AgentRef {
    /// Where this agent lives on a sandbox whose root is `root`.
    pub fn location(&self, root: &str) -> AgentLocation {
        AgentLocation {
            root: root.to_owned(),
            hash: self.hash.clone(),
        }
    }
}

/// Where the agent binary is (see the module docs for the order).
fn locate() -> Result<PathBuf, AgentBinError> {
    if let Some(path) = std::env::var_os(AGENT_ENV).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let candidates = candidates();
    match candidates.iter().find(|path| path.is_file()) {
        Some(path) => Ok(path.clone()),
        None => Err(AgentBinError::NotFound {
            searched: candidates,
        }),
    }
}

/// The workspace's static build (`scripts/build-agent`), if it exists.
pub fn workspace_static() -> Option<PathBuf> {
    candidates().into_iter().find(|p| {
        p.is_file()
            && p.components()
                .any(|c| c.as_os_str() == "x86_64-unknown-linux-gnu")
    })
}

fn candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_owned))
    {
        out.push(dir.join("tether-agent"));
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let workspace = workspace.canonicalize().unwrap_or(workspace);
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    out.push(
        target
            .join("x86_64-unknown-linux-gnu")
            .join("release")
            .join("tether-agent"),
    );
    out.push(target.join("debug").join("tether-agent"));
    out
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_is_the_content_sha256() {
        assert_eq!(
            hex_sha256(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_cached_hash_is_used_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let (bin, cache) = (dir.path().join("agent"), dir.path().join("c/hashes"));
        std::fs::write(&bin, b"abc").unwrap();
        let first = AgentBinary::cached(bin.clone(), &cache).unwrap();
        assert_eq!(first.hash, hex_sha256(b"abc"));
        assert!(matches!(first.source, AgentSource::Bytes(_)), "read once");
        let again = AgentBinary::cached(bin.clone(), &cache).unwrap();
        assert_eq!((again.hash.as_str(), again.size), (first.hash.as_str(), 3));
        assert!(matches!(again.source, AgentSource::File(_)), "not read");
        std::fs::write(&bin, b"abcd").unwrap();
        let changed = AgentBinary::cached(bin, &cache).unwrap();
        assert_eq!(changed.hash, hex_sha256(b"abcd"));
    }

    #[test]
    fn a_missing_explicit_binary_is_a_clear_error() {
        let err = AgentBinary::load(Path::new("/nonexistent/agent")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/agent"));
        let err = AgentBinError::NotFound {
            searched: vec!["/a".into()],
        };
        assert!(err.to_string().contains("scripts/build-agent"));
    }
}
