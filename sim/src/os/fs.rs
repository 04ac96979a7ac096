//! The simulated file system: absolute paths to directories or byte
//! contents, in a `BTreeMap`. Creating a file needs its parent directory (as
//! on Linux); `create_new` is O_EXCL; `write_atomic` replaces in one step.
//! Files survive a bounce (a container restart keeps its disk).

use std::cell::RefCell;
use std::collections::BTreeMap;
use tether_core::agent::OsError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir,
    File(Vec<u8>),
}

/// A tree of directories and files.
#[derive(Clone, Debug)]
pub(crate) struct Fs {
    nodes: BTreeMap<String, Node>,
    /// Paths the agent asked for that are not absolute (the first few):
    /// always a bug of the agent (a relative path is its working
    /// directory's, on a real machine a place no other op finds), which
    /// the failing call alone would hide (best-effort writes ignore it).
    relative: RefCell<Vec<String>>,
    /// Cancel tombstones written over (the first reason must win:
    /// `tether_core::agent::tombstone`), with what they said and say.
    tombstones_replaced: Vec<String>,
}

impl Default for Fs {
    fn default() -> Self {
        let mut nodes = BTreeMap::new();
        nodes.insert("/".to_owned(), Node::Dir);
        Fs {
            nodes,
            relative: RefCell::new(Vec::new()),
            tombstones_replaced: Vec::new(),
        }
    }
}

/// `path` made canonical: absolute, no empty, `.` or `..` components, no
/// trailing `/` (except the root).
pub(crate) fn normalize(path: &str) -> Result<String, OsError> {
    if !path.starts_with('/') {
        return Err(OsError::Other(format!("path {path:?} is not absolute")));
    }
    if path.contains('\0') {
        return Err(OsError::Other(format!("path {path:?} holds a NUL byte")));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// A cell's cancel tombstone (`…/cells/N/cancel`).
fn is_tombstone(path: &str) -> bool {
    path.strip_suffix("/cancel")
        .and_then(|cell| cell.rsplit_once("/cells/"))
        .is_some_and(|(_, seq)| seq.parse::<u64>().is_ok())
}

fn parent(path: &str) -> Option<&str> {
    if path == "/" {
        return None;
    }
    match path.rfind('/') {
        Some(0) => Some("/"),
        Some(i) => Some(&path[..i]),
        None => None,
    }
}

impl Fs {
    /// [`normalize`], noting a path that is not absolute.
    fn norm(&self, path: &str) -> Result<String, OsError> {
        let n = normalize(path);
        if n.is_err() && !path.starts_with('/') {
            let mut relative = self.relative.borrow_mut();
            if relative.len() < 8 {
                relative.push(path.to_owned());
            }
        }
        n
    }

    /// The paths of [`Fs::norm`] that were not absolute.
    pub(crate) fn relative_paths(&self) -> Vec<String> {
        self.relative.borrow().clone()
    }

    fn need_parent_dir(&self, path: &str) -> Result<(), OsError> {
        match parent(path).and_then(|p| self.nodes.get(p)) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(OsError::Other(format!(
                "a parent of {path} is not a directory"
            ))),
            None => Err(OsError::NotFound),
        }
    }

    pub(crate) fn read(&self, path: &str) -> Result<Vec<u8>, OsError> {
        let path = self.norm(path)?;
        match self.nodes.get(&path) {
            Some(Node::File(data)) => Ok(data.clone()),
            Some(Node::Dir) => Err(OsError::Other(format!("{path} is a directory"))),
            None => Err(OsError::NotFound),
        }
    }

    pub(crate) fn create_new(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let path = self.norm(path)?;
        if self.nodes.contains_key(&path) {
            return Err(OsError::AlreadyExists);
        }
        self.need_parent_dir(&path)?;
        self.nodes.insert(path, Node::File(data.to_vec()));
        Ok(())
    }

    pub(crate) fn write_atomic(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let path = self.norm(path)?;
        if let Some(Node::Dir) = self.nodes.get(&path) {
            return Err(OsError::Other(format!("{path} is a directory")));
        }
        self.need_parent_dir(&path)?;
        if let Some(Node::File(old)) = self.nodes.get(&path) {
            if is_tombstone(&path) && old != data && self.tombstones_replaced.len() < 8 {
                self.tombstones_replaced.push(format!(
                    "{path}: {:?} replaced by {:?}",
                    String::from_utf8_lossy(old),
                    String::from_utf8_lossy(data)
                ));
            }
        }
        self.nodes.insert(path, Node::File(data.to_vec()));
        Ok(())
    }

    /// The tombstones written over ([`Fs::write_atomic`]).
    pub(crate) fn tombstones_replaced(&self) -> &[String] {
        &self.tombstones_replaced
    }

    pub(crate) fn append(&mut self, path: &str, data: &[u8]) -> Result<(), OsError> {
        let path = self.norm(path)?;
        match self.nodes.get_mut(&path) {
            Some(Node::File(existing)) => {
                existing.extend_from_slice(data);
                Ok(())
            }
            Some(Node::Dir) => Err(OsError::Other(format!("{path} is a directory"))),
            None => {
                self.need_parent_dir(&path)?;
                self.nodes.insert(path, Node::File(data.to_vec()));
                Ok(())
            }
        }
    }

    pub(crate) fn exists(&self, path: &str) -> bool {
        self.norm(path).is_ok_and(|p| self.nodes.contains_key(&p))
    }

    pub(crate) fn is_dir(&self, path: &str) -> bool {
        self.norm(path)
            .is_ok_and(|p| matches!(self.nodes.get(&p), Some(Node::Dir)))
    }

    pub(crate) fn list_dir(&self, path: &str) -> Result<Vec<String>, OsError> {
        let path = self.norm(path)?;
        match self.nodes.get(&path) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => {
                return Err(OsError::Other(format!("{path} is not a directory")))
            }
            None => return Err(OsError::NotFound),
        }
        let prefix = if path == "/" {
            "/".to_owned()
        } else {
            format!("{path}/")
        };
        Ok(self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter_map(|(k, _)| {
                let rest = &k[prefix.len()..];
                (!rest.is_empty() && !rest.contains('/')).then(|| rest.to_owned())
            })
            .collect())
    }

    pub(crate) fn create_dir_all(&mut self, path: &str) -> Result<(), OsError> {
        let path = self.norm(path)?;
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at.push('/');
            at.push_str(part);
            match self.nodes.get(&at) {
                Some(Node::Dir) => {}
                Some(Node::File(_)) => {
                    return Err(OsError::Other(format!(
                        "{at} exists and is not a directory"
                    )))
                }
                None => {
                    self.nodes.insert(at.clone(), Node::Dir);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn create_dir(&mut self, path: &str) -> Result<(), OsError> {
        let path = self.norm(path)?;
        let parent = match path.rsplit_once('/') {
            Some(("", _)) | None => "/",
            Some((parent, _)) => parent,
        };
        if parent != "/" && !matches!(self.nodes.get(parent), Some(Node::Dir)) {
            return Err(OsError::NotFound);
        }
        match self.nodes.get(&path) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(OsError::Other(format!(
                "{path} exists and is not a directory"
            ))),
            None => {
                self.nodes.insert(path, Node::Dir);
                Ok(())
            }
        }
    }

    pub(crate) fn remove_all(&mut self, path: &str) -> Result<(), OsError> {
        let path = self.norm(path)?;
        if path == "/" {
            return Err(OsError::PermissionDenied);
        }
        self.nodes.remove(&path);
        let prefix = format!("{path}/");
        let doomed: Vec<String> = self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in doomed {
            self.nodes.remove(&k);
        }
        Ok(())
    }

    /// Drops every file and directory except `dir`, what is under it and
    /// its ancestors (a new machine's disk, with one directory carried over).
    pub(crate) fn keep_only(&mut self, dir: &str) {
        let Ok(dir) = self.norm(dir) else {
            self.nodes.retain(|k, _| k == "/");
            return;
        };
        let under = format!("{dir}/");
        self.nodes.retain(|k, _| {
            k == "/" || *k == dir || k.starts_with(&under) || under.starts_with(&format!("{k}/"))
        });
    }

    /// Every file path under `dir` (recursively), sorted.
    pub(crate) fn files_under(&self, dir: &str) -> Vec<String> {
        let Ok(dir) = self.norm(dir) else {
            return Vec::new();
        };
        let prefix = if dir == "/" { dir } else { format!("{dir}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(_, n)| matches!(n, Node::File(_)))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_only_keeps_one_directory_and_its_ancestors() {
        let mut fs = Fs::default();
        fs.create_dir_all("/sim/side-effects").unwrap();
        fs.create_new("/sim/side-effects/a", b"1\n").unwrap();
        fs.create_dir_all("/tmp/tether-0/kernels/k").unwrap();
        fs.create_new("/tmp/tether-0/agent", b"elf").unwrap();
        fs.create_new("/sim/other", b"x").unwrap();
        fs.keep_only("/sim/side-effects");
        assert_eq!(fs.read("/sim/side-effects/a").unwrap(), b"1\n");
        assert!(fs.is_dir("/sim"));
        assert!(!fs.exists("/sim/other"));
        assert!(!fs.exists("/tmp/tether-0/agent"));
        assert!(!fs.exists("/tmp"));
        assert_eq!(fs.files_under("/"), vec!["/sim/side-effects/a".to_owned()]);
    }

    #[test]
    fn a_tombstone_written_over_is_noted_and_other_files_are_not() {
        let mut fs = Fs::default();
        fs.create_dir_all("/r/kernels/k/cells/3").unwrap();
        fs.create_new("/r/kernels/k/cells/3/cancel", b"requested\n")
            .unwrap();
        fs.write_atomic("/r/kernels/k/cells/3/cancel", b"requested\n")
            .unwrap();
        fs.write_atomic("/r/kernels/k/cells/3/journal", b"a")
            .unwrap();
        fs.write_atomic("/r/kernels/k/cells/3/journal", b"b")
            .unwrap();
        assert!(
            fs.tombstones_replaced().is_empty(),
            "same words, or no tombstone"
        );
        fs.write_atomic("/r/kernels/k/cells/3/cancel", b"timeout\n")
            .unwrap();
        assert_eq!(fs.tombstones_replaced().len(), 1);
        assert!(fs.tombstones_replaced()[0].contains("timeout"));
    }

    #[test]
    fn files_need_their_directory_and_o_excl_holds() {
        let mut fs = Fs::default();
        assert_eq!(fs.create_new("/a/b", b"x"), Err(OsError::NotFound));
        fs.create_dir_all("/a//./c/../c/").unwrap();
        fs.create_new("/a/b", b"x").unwrap();
        assert_eq!(fs.create_new("/a/b", b"y"), Err(OsError::AlreadyExists));
        fs.append("/a/b", b"z").unwrap();
        assert_eq!(fs.read("/a/b").unwrap(), b"xz");
        fs.write_atomic("/a/b", b"new").unwrap();
        assert_eq!(fs.read("/a/b").unwrap(), b"new");
        fs.create_dir_all("/a/d/e").unwrap();
        assert_eq!(fs.list_dir("/a").unwrap(), vec!["b", "c", "d"]);
        assert!(fs.read("relative").is_err());
        assert!(!fs.exists("a/b"));
        assert_eq!(
            fs.relative_paths(),
            ["relative", "a/b"],
            "noted for the harness"
        );
        fs.remove_all("/a/d").unwrap();
        assert!(!fs.exists("/a/d/e"));
        assert!(fs.exists("/a/b"));
        assert!(fs.create_dir_all("/a/b/x").is_err());
        assert_eq!(fs.files_under("/a"), vec!["/a/b"]);
    }
}
