//! Processes as `/proc` shows them: `/proc/PID/stat` (parent, group,
//! session, start time, zombie), `/proc/PID/environ` and `/proc/PID/cmdline`.
//!
//! `stat` is cut after the *last* `)`: `comm` may hold spaces, parentheses
//! and bytes that are not UTF-8, so nothing before that byte is trusted. A
//! process that vanishes while it is read is simply absent; nothing here
//! returns an error for a race or panics on odd contents.

use std::fmt;
use tether_core::agent::{Pid, ProcInfo};

/// Why a `/proc/PID/stat` line could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StatError {
    /// No `(comm)` part: the line is not a stat line at all.
    NoComm,
    /// The pid before `(comm)` is not a number.
    BadPid,
    /// The line ends before the named field.
    Missing(&'static str),
    /// The named field is not a number.
    BadNumber(&'static str),
}

impl fmt::Display for StatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatError::NoComm => f.write_str("stat line has no `(comm)` part"),
            StatError::BadPid => f.write_str("stat line does not start with a pid"),
            StatError::Missing(field) => write!(f, "stat line ends before field `{field}`"),
            StatError::BadNumber(field) => write!(f, "stat field `{field}` is not a number"),
        }
    }
}

impl std::error::Error for StatError {}

/// Parses one `/proc/PID/stat` line (bytes: `comm` need not be UTF-8).
///
/// Layout (proc(5)): `pid (comm) state ppid pgrp session tty_nr tpgid flags
/// minflt cminflt majflt cmajflt utime stime cutime cstime priority nice
/// num_threads itrealvalue starttime …`.
pub(crate) fn parse_stat(line: &[u8]) -> Result<ProcInfo, StatError> {
    let open = line
        .iter()
        .position(|&b| b == b'(')
        .ok_or(StatError::NoComm)?;
    let close = line
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(StatError::NoComm)?;
    if close < open {
        return Err(StatError::NoComm);
    }
    let pid = std::str::from_utf8(&line[..open])
        .ok()
        .and_then(|s| s.trim().parse::<Pid>().ok())
        .ok_or(StatError::BadPid)?;
    // Everything after the last ')' is ASCII numbers and one state letter.
    let rest = std::str::from_utf8(&line[close + 1..]).map_err(|_| StatError::Missing("state"))?;
    let mut fields = rest.split_ascii_whitespace();
    let mut next = |name: &'static str| fields.next().ok_or(StatError::Missing(name));
    let state = next("state")?;
    let ppid = number(next("ppid")?, "ppid")?;
    let pgid = number(next("pgrp")?, "pgrp")?;
    let sid = number(next("session")?, "session")?;
    // Fields 7 (tty_nr) to 21 (itrealvalue) are not needed.
    for name in [
        "tty_nr",
        "tpgid",
        "flags",
        "minflt",
        "cminflt",
        "majflt",
        "cmajflt",
        "utime",
        "stime",
        "cutime",
        "cstime",
        "priority",
        "nice",
        "num_threads",
        "itrealvalue",
    ] {
        next(name)?;
    }
    let starttime = number(next("starttime")?, "starttime")?;
    Ok(ProcInfo {
        pid,
        ppid,
        pgid,
        sid,
        starttime,
        // `X` (dead) is the instant after `Z`: not running either way.
        zombie: matches!(state, "Z" | "X"),
    })
}

fn number<T: std::str::FromStr>(field: &str, name: &'static str) -> Result<T, StatError> {
    field.parse().map_err(|_| StatError::BadNumber(name))
}

/// A /proc file in one read where it fits 4 KiB. (`std::fs::read` sizes
/// its buffer from the file's length, which /proc says is 0, and starts
/// with 32-byte reads: five syscalls for one stat line, and a table scan
/// reads one stat line per process.)
fn read_proc(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::with_capacity(4096);
    std::fs::File::open(path)?.read_to_end(&mut buf)?;
    Ok(buf)
}

/// One process, `None` when it does not exist (or vanished mid-read, or
/// its stat line is unreadable).
pub(crate) fn process(pid: Pid) -> Option<ProcInfo> {
    let line = read_proc(&format!("/proc/{pid}/stat")).ok()?;
    let info = parse_stat(&line).ok()?;
    // A stat line that names another pid is not this process's.
    (info.pid == pid).then_some(info)
}

/// Every process visible in `/proc`, sorted by pid. Processes that vanish
/// during the scan are skipped.
pub(crate) fn processes() -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut all: Vec<ProcInfo> = dir
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| entry.file_name().to_str()?.parse::<Pid>().ok())
        .filter_map(process)
        .collect();
    all.sort();
    all.dedup_by_key(|p| p.pid);
    all
}

/// The live children of `pid` from `/proc/PID/task/*/children` (every
/// thread's: an orphan is reparented to some live thread of a subreaper),
/// sorted; `None` where the kernel does not list them
/// (`CONFIG_PROC_CHILDREN` off) or `pid` is gone: the caller scans then.
pub(crate) fn children(pid: Pid) -> Option<Vec<ProcInfo>> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut kids: Vec<ProcInfo> = Vec::new();
    let mut listed = false;
    for task in tasks.filter_map(|t| t.ok()) {
        let Ok(list) = std::fs::read_to_string(task.path().join("children")) else {
            continue;
        };
        listed = true;
        kids.extend(
            list.split_ascii_whitespace()
                .filter_map(|n| n.parse::<Pid>().ok())
                .filter_map(process)
                .filter(|p| p.ppid == pid && !p.zombie),
        );
    }
    if !listed {
        return None;
    }
    kids.sort();
    kids.dedup_by_key(|p| p.pid);
    Some(kids)
}

/// The NUL-separated strings of `/proc/PID/<file>`; empty when unreadable
/// (gone, a zombie, or not ours to read).
/// The trailing NUL of the last string is dropped, so `a\0\0` is `["a", ""]`
/// and an empty file has no strings at all.
fn nul_separated(pid: Pid, file: &str) -> Vec<Vec<u8>> {
    let mut raw = read_proc(&format!("/proc/{pid}/{file}")).unwrap_or_default();
    if raw.is_empty() {
        return Vec::new();
    }
    if raw.last() == Some(&0) {
        raw.pop();
    }
    raw.split(|&b| b == 0).map(<[u8]>::to_vec).collect()
}

/// Does the process's initial environment hold exactly `name=value`?
pub(crate) fn has_env(pid: Pid, name: &str, value: &str) -> bool {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return false;
    }
    let wanted = format!("{name}={value}");
    nul_separated(pid, "environ")
        .iter()
        .any(|entry| entry == wanted.as_bytes())
}

/// The value of `name` in the process's environ, if it has one in UTF-8.
pub(crate) fn env_var(pid: Pid, name: &str) -> Option<String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return None;
    }
    let prefix = format!("{name}=");
    nul_separated(pid, "environ").into_iter().find_map(|entry| {
        let value = entry.strip_prefix(prefix.as_bytes())?;
        String::from_utf8(value.to_vec()).ok()
    })
}

/// Does the process's argv (argv[0] included) hold `arg` as one element?
pub(crate) fn has_arg(pid: Pid, arg: &str) -> bool {
    nul_separated(pid, "cmdline")
        .iter()
        .any(|entry| entry == arg.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A realistic stat line (52 fields) with `comm` spliced in.
    fn line(comm: &[u8]) -> Vec<u8> {
        let mut l = b"4242 (".to_vec();
        l.extend_from_slice(comm);
        l.extend_from_slice(
            b") S 17 4242 4100 0 -1 4194560 120 0 0 0 3 1 0 0 20 0 1 0 987654 \
              5689344 211 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 \
              0 0 0 0 0 0 0 0\n",
        );
        l
    }

    fn expected() -> ProcInfo {
        ProcInfo {
            pid: 4242,
            ppid: 17,
            pgid: 4242,
            sid: 4100,
            starttime: 987654,
            zombie: false,
        }
    }

    #[test]
    fn comm_with_spaces_and_parentheses_is_cut_at_the_last_paren() {
        for comm in [
            &b"a) b (c)"[..],
            b"x) y (z",
            b") S 1 2 3 4",
            b"((()))",
            b"sleep",
            b"",
            b" ",
            b"\xff\xfe not utf-8 )",
        ] {
            assert_eq!(parse_stat(&line(comm)), Ok(expected()), "comm {comm:?}");
        }
    }

    #[test]
    fn the_briefs_example_parses() {
        let l = b"123 (a) b (c)) S 1 123 123 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0";
        let info = parse_stat(l).unwrap();
        assert_eq!(
            info,
            ProcInfo {
                pid: 123,
                ppid: 1,
                pgid: 123,
                sid: 123,
                starttime: 555,
                zombie: false
            }
        );
    }

    #[test]
    fn zombie_and_dead_states_are_zombies() {
        for (state, zombie) in [
            ("Z", true),
            ("X", true),
            ("S", false),
            ("R", false),
            ("T", false),
        ] {
            let l = format!("9 (z) {state} 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 0");
            assert_eq!(
                parse_stat(l.as_bytes()).unwrap().zombie,
                zombie,
                "state {state}"
            );
        }
    }

    #[test]
    fn malformed_lines_are_typed_errors() {
        let cases: [(&[u8], StatError); 8] = [
            (b"", StatError::NoComm),
            (b"123 sleep S 1", StatError::NoComm),
            (b"123 )sleep( S 1", StatError::NoComm),
            (b"abc (sleep) S 1 1 1", StatError::BadPid),
            (b"-5 (sleep) S 1 1 1", StatError::BadPid),
            (b"12 (sleep)", StatError::Missing("state")),
            (b"12 (sleep) S 1 1", StatError::Missing("session")),
            (b"12 (sleep) S x 1 1", StatError::BadNumber("ppid")),
        ];
        for (l, err) in cases {
            assert_eq!(
                parse_stat(l),
                Err(err),
                "line {:?}",
                String::from_utf8_lossy(l)
            );
        }
        let short = b"12 (sleep) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0";
        assert_eq!(parse_stat(short), Err(StatError::Missing("starttime")));
        let huge = b"12 (s) S 99999999999 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5";
        assert_eq!(parse_stat(huge), Err(StatError::BadNumber("ppid")));
    }

    #[test]
    fn every_prefix_of_a_line_is_handled_without_panic() {
        let full = line(b"x) y (z");
        for end in 0..full.len() {
            let _ = parse_stat(&full[..end]);
        }
    }

    #[test]
    fn own_process_is_found() {
        let me = std::process::id();
        let info = process(me).expect("own /proc entry");
        assert_eq!(info.pid, me);
        assert!(!info.zombie);
        assert!(processes().iter().any(|p| p.pid == me));
    }

    #[test]
    fn absent_pids_are_none_and_false() {
        // Above the kernel's pid_max limit (4194304), so never a process.
        let ghost: Pid = 4_194_305;
        assert_eq!(process(ghost), None);
        assert!(!has_env(ghost, "PATH", "/bin"));
        assert!(!has_arg(ghost, "x"));
        assert!(!has_env(std::process::id(), "", ""));
        assert!(!has_env(std::process::id(), "A=B", "C"));
    }
}
