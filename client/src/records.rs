//! Persisted client records: what this client knows about each kernel
//! (identity, next cell sequence, unresolved cells), so that a later
//! `tether` process can resume a cell instead of submitting it again.
//!
//! [`FileStore`] keeps one JSON file per kernel under
//! `$XDG_STATE_HOME/tether/<sandbox-id>/<kernel>.json` (default
//! `~/.local/state`), written atomically (temporary file, fsync, rename).
//! [`MemoryStore`] keeps them in memory and can be cloned, so a simulated
//! client host that crashes and restarts finds its records again.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tether_core::client::KernelRecord;
use tether_core::ids::KernelName;

/// Where kernel records are kept.
pub trait RecordStore: Send {
    /// The record of `kernel`, if there is one.
    fn load(&self, kernel: &KernelName) -> Result<Option<KernelRecord>, RecordError>;
    /// Stores `record` durably before returning (replacing an older one).
    fn save(&mut self, record: &KernelRecord) -> Result<(), RecordError>;
    /// Removes the record of `kernel` (no error if there is none).
    fn forget(&mut self, kernel: &KernelName) -> Result<(), RecordError>;
    /// The kernels that have a record, in name order.
    fn list(&self) -> Result<Vec<KernelName>, RecordError>;
}

/// Why a record could not be read or written.
#[derive(Debug)]
pub enum RecordError {
    /// Neither `$XDG_STATE_HOME` nor `$HOME` is set to an absolute path.
    NoStateDir,
    /// A file operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        error: std::io::Error,
    },
    /// A record file is not a record.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        detail: String,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::NoStateDir => write!(
                f,
                "cannot find a state directory: set XDG_STATE_HOME or HOME to an absolute path"
            ),
            RecordError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            RecordError::Corrupt { path, detail } => write!(
                f,
                "{} is not a tether kernel record ({detail}); remove it to forget that kernel",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RecordError {}

/// The base state directory: `$XDG_STATE_HOME`, else `$HOME/.local/state`.
pub fn state_home() -> Result<PathBuf, RecordError> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(dir) = absolute("XDG_STATE_HOME") {
        return Ok(dir);
    }
    absolute("HOME")
        .map(|home| home.join(".local").join("state"))
        .ok_or(RecordError::NoStateDir)
}

/// One JSON file per kernel in a directory.
#[derive(Clone, Debug)]
pub struct FileStore {
    dir: PathBuf,
}

impl FileStore {
    /// Records of sandbox `sandbox_id` under the user's state directory.
    pub fn for_sandbox(sandbox_id: &str) -> Result<FileStore, RecordError> {
        Ok(FileStore::in_dir(
            state_home()?.join("tether").join(sandbox_id),
        ))
    }

    /// Records in `dir` (created on first save).
    pub fn in_dir(dir: PathBuf) -> FileStore {
        FileStore { dir }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, kernel: &KernelName) -> PathBuf {
        self.dir.join(format!("{kernel}.json"))
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError + '_ {
    move |error| RecordError::Io {
        path: path.to_owned(),
        error,
    }
}

impl RecordStore for FileStore {
    fn load(&self, kernel: &KernelName) -> Result<Option<KernelRecord>, RecordError> {
        let path = self.path_of(kernel);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&path)(e)),
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| RecordError::Corrupt {
                path,
                detail: e.to_string(),
            })
    }

    fn save(&mut self, record: &KernelRecord) -> Result<(), RecordError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(&self.dir))?;
        let path = self.path_of(&record.kernel);
        let tmp = self
            .dir
            .join(format!(".{}.json.tmp{}", record.kernel, std::process::id()));
        let json = serde_json::to_vec_pretty(record).map_err(|e| RecordError::Corrupt {
            path: path.clone(),
            detail: e.to_string(),
        })?;
        let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(&json).map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        // Make the rename itself durable.
        if let Ok(dir) = std::fs::File::open(&self.dir) {
            let _ = dir.sync_all();
        }
        Ok(())
    }

    fn forget(&mut self, kernel: &KernelName) -> Result<(), RecordError> {
        let path = self.path_of(kernel);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&path)(e)),
        }
    }

    fn list(&self) -> Result<Vec<KernelName>, RecordError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.dir)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io(&self.dir))?;
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|n| n.strip_suffix(".json")) else {
                continue;
            };
            if let Ok(name) = KernelName::new(stem) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }
}

/// Records in memory, shared by clones (a simulated disk that outlives a
/// simulated client crash). Stored as JSON so that what survives is exactly
/// what a file would hold.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    records: Arc<Mutex<BTreeMap<KernelName, Vec<u8>>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<KernelName, Vec<u8>>> {
        // A poisoned lock only means another thread panicked mid-insert of
        // a complete value; the map itself is still consistent.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RecordStore for MemoryStore {
    fn load(&self, kernel: &KernelName) -> Result<Option<KernelRecord>, RecordError> {
        match self.map().get(kernel) {
            None => Ok(None),
            Some(json) => {
                serde_json::from_slice(json)
                    .map(Some)
                    .map_err(|e| RecordError::Corrupt {
                        path: PathBuf::from(format!("memory:{kernel}")),
                        detail: e.to_string(),
                    })
            }
        }
    }

    fn save(&mut self, record: &KernelRecord) -> Result<(), RecordError> {
        let json = serde_json::to_vec(record).map_err(|e| RecordError::Corrupt {
            path: PathBuf::from(format!("memory:{}", record.kernel)),
            detail: e.to_string(),
        })?;
        self.map().insert(record.kernel.clone(), json);
        Ok(())
    }

    fn forget(&mut self, kernel: &KernelName) -> Result<(), RecordError> {
        self.map().remove(kernel);
        Ok(())
    }

    fn list(&self) -> Result<Vec<KernelName>, RecordError> {
        Ok(self.map().keys().cloned().collect())
    }
}
