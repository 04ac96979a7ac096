//! Files for the agent's state directories: private modes (0600 files, 0700
//! directories), O_EXCL creation that never shows a half-written file,
//! atomic replacement, and appends that land as one write each.
//!
//! Temporary files live next to their target and are named
//! `.tether-tmp.<name>.<pid>.<n>`; [`list_dir`] leaves them out, so a
//! listing shows only finished files (as the simulated OS does).

use std::fs::{self, DirBuilder, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use tether_core::agent::OsError;

/// Prefix of temporary files; hidden from [`list_dir`].
pub(crate) const TMP_PREFIX: &str = ".tether-tmp.";

/// Maps an io error on `path` during `what` to an [`OsError`].
pub(crate) fn os_error(what: &str, path: &str, err: &io::Error) -> OsError {
    match err.kind() {
        io::ErrorKind::NotFound => OsError::NotFound,
        io::ErrorKind::AlreadyExists => OsError::AlreadyExists,
        io::ErrorKind::PermissionDenied => OsError::PermissionDenied,
        _ => OsError::Other(format!("{what} {path}: {err}")),
    }
}

/// Whole contents of a file.
pub(crate) fn read_file(path: &str) -> Result<Vec<u8>, OsError> {
    fs::read(path).map_err(|e| os_error("read", path, &e))
}

/// A fresh temporary path beside `path`, unique within this process and
/// across processes (pid).
fn tmp_path_for(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = format!(
        "{TMP_PREFIX}{}.{}.{n}",
        name.to_string_lossy(),
        std::process::id()
    );
    Ok(path.with_file_name(tmp))
}

/// Writes `data` into a new temporary file beside `path` (mode 0600).
/// Returns its path; the caller renames or links it.
fn write_tmp(path: &Path, data: &[u8]) -> io::Result<PathBuf> {
    let tmp = tmp_path_for(path)?;
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(data)
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Creates `path`, which must not exist yet, holding `data` (mode 0600).
///
/// The data is written to a temporary file first and then hard-linked into
/// place (`link(2)` fails with `EEXIST` atomically), so a reader never sees
/// the file half-written and a crash never leaves a truncated one under the
/// real name. On file systems without hard links it falls back to a plain
/// `O_EXCL` create.
pub(crate) fn create_new(path: &str, data: &[u8]) -> Result<(), OsError> {
    let target = Path::new(path);
    let tmp = write_tmp(target, data).map_err(|e| os_error("create", path, &e))?;
    let linked = fs::hard_link(&tmp, target);
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(OsError::AlreadyExists),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EOPNOTSUPP | libc::EXDEV)
            ) =>
        {
            create_new_excl(target, data).map_err(|e| os_error("create", path, &e))
        }
        Err(e) => Err(os_error("create", path, &e)),
    }
}

/// `O_EXCL` create and write; removes the file again when the write fails.
fn create_new_excl(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(data).inspect_err(|_| {
        let _ = fs::remove_file(path);
    })
}

/// Replaces `path` atomically: temporary file in the same directory,
/// rename. Readers see the old or the new contents, never a mix, and the
/// death of any process (the writer's included) leaves one or the other.
///
/// No fsync: the sandbox's state is as durable as its page cache, which
/// outlives every process and a container's restart; what would need a
/// sync is a crash of the sandbox's own kernel, which ends every kernel's
/// processes and so their state anyway (and the journal's appends, the
/// record that decides what ran, were never synced). On a container whose
/// storage is fuse-overlayfs each sync cost 1-20 ms, 8 per warm cell
/// (README, Benchmarks).
pub(crate) fn write_atomic(path: &str, data: &[u8]) -> Result<(), OsError> {
    let target = Path::new(path);
    let tmp = write_tmp(target, data).map_err(|e| os_error("write", path, &e))?;
    fs::rename(&tmp, target).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        os_error("rename into", path, &e)
    })
}

/// Appends `data` with one `O_APPEND` write, so lines appended by several
/// writers never interleave. Creates the file (0600) if needed.
pub(crate) fn append(path: &str, data: &[u8]) -> Result<(), OsError> {
    let mut file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| os_error("open for append", path, &e))?;
    // `write_all` is one write(2) for a regular file unless the disk is
    // full or a signal interrupts it; it then finishes the rest.
    file.write_all(data)
        .map_err(|e| os_error("append to", path, &e))
}

/// True when something (even a dangling symlink) is at `path`.
pub(crate) fn exists(path: &str) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Names in a directory, sorted, without our temporary files.
pub(crate) fn list_dir(path: &str) -> Result<Vec<String>, OsError> {
    let entries = fs::read_dir(path).map_err(|e| os_error("list", path, &e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| os_error("list", path, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with(TMP_PREFIX) {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Creates a directory and its missing parents, each mode 0700 (before
/// umask, which can only remove bits).
pub(crate) fn create_dir_all(path: &str) -> Result<(), OsError> {
    DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| os_error("create directory", path, &e))
}

/// One directory in an existing parent; one already there is fine.
pub(crate) fn create_dir(path: &str) -> Result<(), OsError> {
    match DirBuilder::new().mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && Path::new(path).is_dir() => Ok(()),
        Err(e) => Err(os_error("create directory", path, &e)),
    }
}

/// Removes a file or a whole tree; absent (or vanishing meanwhile) is fine.
/// A symlink is removed itself, never followed.
pub(crate) fn remove_all(path: &str) -> Result<(), OsError> {
    // A process finishing up (a shim's last file, an atomic write's
    // temporary) may add an entry while the tree is being removed, which
    // fails with ENOTEMPTY: sweep again, a bounded number of times.
    let mut attempts = 0;
    loop {
        let result = match fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(path),
            Ok(_) => fs::remove_file(path),
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::DirectoryNotEmpty && attempts < 20 => {
                attempts += 1;
            }
            Err(e) => return Err(os_error("remove", path, &e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().expect("temp dir")
    }

    fn p(dir: &tempfile::TempDir, name: &str) -> String {
        dir.path()
            .join(name)
            .to_str()
            .expect("utf-8 temp path")
            .to_owned()
    }

    fn mode(path: &str) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    /// Every name really in the directory, temporary files included.
    fn raw_names(dir: &tempfile::TempDir) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn create_new_twice_is_already_exists_and_keeps_the_first() {
        let d = dir();
        let f = p(&d, "req-1");
        create_new(&f, b"first").unwrap();
        assert_eq!(create_new(&f, b"second"), Err(OsError::AlreadyExists));
        assert_eq!(read_file(&f).unwrap(), b"first");
        assert_eq!(mode(&f), 0o600);
        assert_eq!(raw_names(&d), ["req-1"], "no temporary file left behind");
    }

    #[test]
    fn create_new_races_have_exactly_one_winner() {
        let d = dir();
        let f = p(&d, "seq-7");
        let winners: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let f = f.clone();
                    s.spawn(move || create_new(&f, format!("writer {i}").as_bytes()).is_ok())
                })
                .collect();
            handles
                .into_iter()
                .map(|h| usize::from(h.join().unwrap()))
                .sum()
        });
        assert_eq!(winners, 1);
        assert!(read_file(&f).unwrap().starts_with(b"writer "));
        assert_eq!(raw_names(&d), ["seq-7"]);
    }

    #[test]
    fn create_new_in_a_missing_directory_is_not_found() {
        let d = dir();
        assert_eq!(
            create_new(&p(&d, "no/such/file"), b"x"),
            Err(OsError::NotFound)
        );
    }

    #[test]
    fn write_atomic_creates_then_replaces() {
        let d = dir();
        let f = p(&d, "state");
        write_atomic(&f, b"one").unwrap();
        assert_eq!(read_file(&f).unwrap(), b"one");
        write_atomic(&f, b"two, longer").unwrap();
        assert_eq!(read_file(&f).unwrap(), b"two, longer");
        write_atomic(&f, b"").unwrap();
        assert_eq!(read_file(&f).unwrap(), b"");
        assert_eq!(mode(&f), 0o600);
        assert_eq!(raw_names(&d), ["state"]);
    }

    #[test]
    fn append_from_two_threads_gives_whole_lines() {
        let d = dir();
        let f = p(&d, "journal");
        const LINES: usize = 2000;
        std::thread::scope(|s| {
            for tag in ['a', 'b'] {
                let f = f.clone();
                s.spawn(move || {
                    for i in 0..LINES {
                        let line = format!("{tag}{i:05}{}\n", tag.to_string().repeat(300));
                        append(&f, line.as_bytes()).unwrap();
                    }
                });
            }
        });
        let text = String::from_utf8(read_file(&f).unwrap()).unwrap();
        let (mut a, mut b) = (0, 0);
        for line in text.lines() {
            let tag = line.chars().next().unwrap();
            let body = &line[6..];
            assert_eq!(line.len(), 306, "torn line {line:?}");
            assert!(body.chars().all(|c| c == tag), "interleaved line {line:?}");
            if tag == 'a' {
                a += 1
            } else {
                b += 1
            }
        }
        assert_eq!((a, b), (LINES, LINES));
        assert_eq!(mode(&f), 0o600);
    }

    #[test]
    fn list_dir_is_sorted_and_hides_temporary_files() {
        let d = dir();
        for name in ["b", "a", "c10", "c2", "Z"] {
            fs::write(d.path().join(name), b"").unwrap();
        }
        fs::write(d.path().join(format!("{TMP_PREFIX}x.1.0")), b"").unwrap();
        assert_eq!(
            list_dir(d.path().to_str().unwrap()).unwrap(),
            ["Z", "a", "b", "c10", "c2"]
        );
        assert_eq!(list_dir(&p(&d, "missing")), Err(OsError::NotFound));
    }

    #[test]
    fn directories_are_private_and_removable() {
        let d = dir();
        let top = p(&d, "k");
        let deep = p(&d, "k/cells/1");
        create_dir_all(&deep).unwrap();
        create_dir_all(&deep).unwrap(); // already there: fine
        assert_eq!(mode(&top), 0o700);
        assert_eq!(mode(&deep), 0o700);
        append(&format!("{deep}/journal"), b"x\n").unwrap();
        assert!(exists(&format!("{deep}/journal")));
        remove_all(&top).unwrap();
        assert!(!exists(&top));
        remove_all(&top).unwrap(); // absent: fine
        let file = p(&d, "f");
        fs::write(&file, b"").unwrap();
        remove_all(&file).unwrap();
        assert!(!exists(&file));
    }

    #[test]
    fn remove_all_removes_a_symlink_not_its_target() {
        let d = dir();
        let target = p(&d, "target");
        create_dir_all(&target).unwrap();
        fs::write(format!("{target}/keep"), b"").unwrap();
        let link = p(&d, "link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_all(&link).unwrap();
        assert!(!exists(&link));
        assert!(exists(&format!("{target}/keep")));
    }

    #[test]
    fn errors_map_to_variants() {
        let d = dir();
        assert_eq!(read_file(&p(&d, "absent")), Err(OsError::NotFound));
        // A file where a directory is expected is neither: described.
        let file = p(&d, "plain");
        fs::write(&file, b"").unwrap();
        match create_dir_all(&format!("{file}/sub")) {
            Err(OsError::Other(msg)) => assert!(msg.contains("plain/sub"), "{msg}"),
            other => panic!("expected Other, got {other:?}"),
        }
        assert_eq!(
            write_atomic("/", b"x"),
            Err(OsError::Other("write /: path has no file name".into()))
        );
    }
}
