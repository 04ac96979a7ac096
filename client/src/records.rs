//! Persisted client records: what this client knows about each kernel
//! (identity, next cell sequence, unresolved cells), so that a later
//! `tether` process can resume a cell instead of submitting it again.
//!
//! [`FileStore`] keeps one JSON file per kernel under
//! `$XDG_STATE_HOME/tether/<sandbox-id>/<kernel>.json` (default
//! `~/.local/state`), written atomically (temporary file, rename) and
//! synced when the driver needs it durable (before its next exec).
//! [`MemoryStore`] keeps them in memory and can be cloned, so a simulated
//! client host that crashes and restarts finds its records again.
//!
//! One `tether` drives a kernel at a time: [`FileStore::lock`] takes
//! `<kernel>.lock` beside the record with `flock`, held for the whole
//! command (the kernel closes it when the process dies, however it dies).
//! The holder writes its pid and start time into the file so that a
//! refused `tether` can name it (and `tether cancel` can reach it).

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
    /// Stores `record` atomically, replacing an older one: a reader, and
    /// this process dying at any point, see the old or the new one. It
    /// outlives a crash of the machine only after [`RecordStore::sync`].
    fn save(&mut self, record: &KernelRecord) -> Result<(), RecordError>;
    /// Makes every save so far outlive a crash of the machine. The driver
    /// calls it before the next exec leaves this process, which is when
    /// a record must be there whatever happens; the last save before a
    /// `tether` exits is not synced (lost in a crash of the machine, the
    /// record is one save older: `tether resume` reads the cell's end from
    /// the sandbox again and repeats its output, as after a crash between
    /// the output and the save; nothing runs twice).
    fn sync(&mut self) -> Result<(), RecordError> {
        Ok(())
    }
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
    /// The lock file could not be taken (not: it is held by another).
    Lock {
        /// The lock file.
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
            RecordError::Lock { path, error } => {
                write!(f, "cannot lock {}: {error}", path.display())
            }
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
    /// Records saved since the last sync.
    unsynced: Vec<PathBuf>,
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
        FileStore {
            dir,
            unsynced: Vec::new(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The record file of `kernel`.
    pub fn path_of(&self, kernel: &KernelName) -> PathBuf {
        self.dir.join(format!("{kernel}.json"))
    }

    fn create_dir(&self) -> Result<(), RecordError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(io(&self.dir))
    }

    /// Takes the lock of `kernel` for as long as the returned
    /// [`KernelLock`] lives; with `wait`, blocks until the holder lets
    /// go, else says who holds it. The lock file is never removed (a
    /// waiter would lock a file no one else opens any more).
    pub fn lock(&self, kernel: &KernelName, wait: bool) -> Result<Locking, RecordError> {
        use rustix::fs::{flock, FlockOperation};
        use std::os::unix::fs::OpenOptionsExt;
        self.create_dir()?;
        let path = self.dir.join(format!("{kernel}.lock"));
        let lock_err = |error: std::io::Error| RecordError::Lock {
            path: path.clone(),
            error,
        };
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(lock_err)?;
        let op = if wait {
            FlockOperation::LockExclusive
        } else {
            FlockOperation::NonBlockingLockExclusive
        };
        loop {
            match flock(&file, op) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    let holder = std::fs::read_to_string(&path)
                        .ok()
                        .and_then(|text| Holder::parse(&text));
                    return Ok(Locking::Busy { holder });
                }
                Err(e) => return Err(lock_err(e.into())),
            }
        }
        let me = Holder::me();
        let mut writer = &file;
        let written = file
            .set_len(0)
            .and_then(|()| writer.write_all(me.render().as_bytes()));
        written.map_err(lock_err)?;
        Ok(Locking::Held(KernelLock { _file: file }))
    }
}

/// The outcome of [`FileStore::lock`].
#[derive(Debug)]
pub enum Locking {
    /// Ours until dropped.
    Held(KernelLock),
    /// Another process holds it.
    Busy {
        /// Who, if its lock file says so.
        holder: Option<Holder>,
    },
}

/// A kernel's lock, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct KernelLock {
    _file: std::fs::File,
}

/// The process that holds a kernel's lock, as it wrote itself down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its pid.
    pub pid: u32,
    /// Its start time (`/proc/PID/stat` field 22), so a reused pid is
    /// not taken for it.
    pub starttime: u64,
}

impl Holder {
    fn me() -> Holder {
        let pid = std::process::id();
        Holder {
            pid,
            starttime: starttime_of(pid).unwrap_or(0),
        }
    }

    fn render(&self) -> String {
        format!("{} {}\n", self.pid, self.starttime)
    }

    fn parse(text: &str) -> Option<Holder> {
        let mut words = text.split_whitespace();
        Some(Holder {
            pid: words.next()?.parse().ok()?,
            starttime: words.next()?.parse().ok()?,
        })
    }

    /// Is this process still the one that wrote the lock file?
    pub fn is_running(&self) -> bool {
        self.starttime != 0 && starttime_of(self.pid) == Some(self.starttime)
    }
}

/// The start time of `pid` from `/proc/PID/stat` (cut after the last `)`:
/// the command name may hold spaces and parentheses).
fn starttime_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // Fields after the name start at 3 (state); starttime is field 22.
    rest.split_whitespace().nth(22 - 3)?.parse().ok()
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
        self.create_dir()?;
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
        drop(file);
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        if !self.unsynced.contains(&path) {
            self.unsynced.push(path);
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<(), RecordError> {
        if self.unsynced.is_empty() {
            return Ok(());
        }
        for path in std::mem::take(&mut self.unsynced) {
            match std::fs::File::open(&path) {
                Ok(file) => file.sync_all().map_err(io(&path))?,
                // Forgotten since: nothing to keep.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&path)(e)),
            }
        }
        // The renames themselves.
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
