//! The shell kernel: the script a cell's main process runs, and what the
//! shim does with the state that script leaves.
//!
//! Each cell is a fresh shell that restores the kernel's snapshot, runs
//! the code, and saves a new snapshot: every variable of the user's
//! (exported or not, arrays included, bytes exact), functions, aliases,
//! `set -o` and `shopt` options, umask, traps, the working directory,
//! the directory stack and the positional parameters under bash (the
//! cell line hands the top level's `"$@"` to the save); what POSIX sh
//! can list under dash (`shell/sh.sh` says what). Variables the shell manages (`PPID`,
//! `RANDOM`, `BASH_*` …), the cell marker and tether's own `__tether_*`
//! are never saved. The save is builtins only (no process is started).
//!
//! The code runs with `eval` on the first line of a `bash -c` script whose
//! `$0` is `cell N`, so the shell's messages read `cell 7: line 1: greet:
//! command not found`, as for `bash -c`; an alias defined on one line works
//! on the next (eval, like `.`, parses one command at a time). The wrapper's
//! functions come in as `$3` ([`BASH_LIB`] / [`SH_LIB`]).
//!
//! What ends the shell early still saves: `exit N`, a failure under
//! `set -e`, an unbound variable under `set -u` and a cancel's TERM all go
//! through tether's EXIT trap, which saves before the shell goes. A user's
//! EXIT trap is kept aside by a `trap` function and never fires (the
//! kernel's shell does not exit at the end of a cell). A syntax error only
//! ends the `eval`. Where no save happens (`exec CMD` replaced the shell, a
//! KILL, a user's `builtin trap … EXIT` under bash or any user EXIT trap
//! under dash), the kernel keeps the previous snapshot and the next cell
//! says so on stderr ([`promote_state`] writes the note).
//!
//! The `end` file holds the status when the code reached its end (the
//! outcome tells `exit N` from a last command's status).

use super::kernel::config_names;
use super::layout::{CellLayout, KernelLayout};
use super::os::{CellLaunch, Os, OsError};
use super::procs::{self, MARKER_NAME};

/// The wrapper's functions for bash (placeholders filled by [`lib`]).
pub const BASH_LIB: &str = include_str!("shell/bash.sh");

/// The wrapper's functions for a POSIX sh.
pub const SH_LIB: &str = include_str!("shell/sh.sh");

/// The cell script under bash: one line, so that the code's line numbers
/// are its own. `$1` is the kernel's state directory, `$2` the cell's,
/// `$3` the library. The code starts with `$?` and `$_` as the previous
/// cell left them, as in an interactive shell: `__tether_arm` returns the
/// saved status and takes the saved last argument as its own; in an `&&`
/// list, so a restored `set -e` does not stop the shell on it.
const BASH_LINE: &str = r#"eval "$3" && __tether_begin "$1" "$2" && set -- && eval "$__tether_snap" 2>/dev/null; __tether_arm "${__tether_us-}" && __tether_same "${__tether_us-}"; builtin eval "$__tether_pre$__tether_code"; { __tether_end "$?" "$@"; } 2>/dev/null
"#;

/// The cell script under a POSIX sh.
const SH_LINE: &str = r#"eval "$3"; __tether_begin "$1" "$2"; eval "$__tether_snap" 2>/dev/null; __tether_fix "$2"; eval "set -- ${__tether_argv-}"; __tether_arm && :; eval "$__tether_pre$__tether_code"; { __tether_end "$?" "$@"; } 2>/dev/null
"#;

/// Why a shell cannot run `code` at all, if it cannot: a NUL byte ends a
/// string in every shell, so the wrapper would run the code only up to
/// it, silently (`echo before<NUL>; touch poc` printed `before` and
/// resolved ok; inspect_ai's test_bash_null_byte). The cell ends as an
/// error that says so, and nothing of it runs.
pub fn unrunnable(code: &[u8]) -> Option<String> {
    let at = code.iter().position(|&b| b == 0)?;
    Some(format!(
        "the cell's code holds a null byte (at byte {at}), which a shell cannot take: nothing of it ran"
    ))
}

/// A shell cell's code as the shell gets it: every CRLF line end becomes
/// LF, as a terminal's line discipline turns the Enter a user types (or an
/// agent sends, `echo begin\r\nsleep 2\r\necho done`) into a newline.
/// Without it bash takes the CR as part of the last word (`sleep: invalid
/// time interval '2\r'`). A lone CR is kept (`printf 'a\rb'` with a
/// literal CR means it).
pub fn cell_code(code: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !code.windows(2).any(|w| w == b"\r\n") {
        return std::borrow::Cow::Borrowed(code);
    }
    let mut out = Vec::with_capacity(code.len());
    let mut i = 0;
    while i < code.len() {
        if code[i] == b'\r' && code.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(code[i]);
        i += 1;
    }
    std::borrow::Cow::Owned(out)
}

/// The last line of a complete snapshot.
const SNAPSHOT_END: &[u8] = b"\n#tether-end\n";

/// Is `shell` bash (else a POSIX sh, modelled on dash)?
pub fn is_bash(shell: &str) -> bool {
    shell.rsplit('/').next() == Some("bash")
}

/// The library for `shell`, placeholders filled in.
pub fn lib(shell: &str) -> String {
    let lib = if is_bash(shell) { BASH_LIB } else { SH_LIB };
    lib.replace("@MARKER@", MARKER_NAME)
}

/// The cell's name in the shell's messages (`$0`): `cell 7`.
pub fn cell_name(cell: &CellLayout) -> String {
    let seq = cell.dir().rsplit('/').next().unwrap_or_default();
    format!("cell {seq}")
}

/// Argv of a shell cell's main process, run by `shell` (`bash` when the
/// sandbox has it, else `/bin/sh`; the same shell reads back what it saved).
pub fn argv(shell: &str, kernel: &KernelLayout, cell: &CellLayout) -> Vec<String> {
    let line = if is_bash(shell) { BASH_LINE } else { SH_LINE };
    vec![
        shell.to_owned(),
        "-c".into(),
        line.into(),
        cell_name(cell),
        kernel.state_dir(),
        cell.dir().to_owned(),
        lib(shell),
    ]
}

/// The kernel's state directory and the cell's directory, from an argv
/// made by [`argv`] (`None` for any other argv).
pub fn dirs_of(argv: &[String]) -> Option<(&str, &str)> {
    match argv {
        [_, c, line, name, state, cell, _] if c == "-c" && name.starts_with("cell ") => {
            (line == BASH_LINE || line == SH_LINE).then_some((state.as_str(), cell.as_str()))
        }
        _ => None,
    }
}

/// Is `bytes` a complete snapshot (its shell wrote it to the end)?
pub fn snapshot_complete(bytes: &[u8]) -> bool {
    bytes.ends_with(SNAPSHOT_END)
}

/// After the cell: a complete snapshot from its shell (`shell.new` in
/// the cell's directory) becomes the kernel's (atomically); otherwise the
/// previous one stays and a note for the next cell says why (`killed_by`:
/// the signal that ended the cell's shell, if one did). A cell of an
/// earlier daemon of the kernel (its marker carries another nonce: the
/// kernel was re-spawned, with a fresh state) changes nothing. Returns
/// whether the cell's state was kept.
pub fn promote_state(
    os: &mut dyn Os,
    launch: &CellLaunch,
    killed_by: Option<i32>,
) -> Result<bool, OsError> {
    let kernel = KernelLayout::new(&launch.kernel_dir);
    let cell = CellLayout::from_dir(&launch.cell_dir);
    let current = current_nonce(os, &kernel, &launch.marker.1);
    let kept = match os.read_file(&cell.snapshot_new()) {
        Ok(bytes) if current && snapshot_complete(&bytes) => {
            os.write_atomic(&kernel.snapshot(), &bytes)?;
            true
        }
        Ok(_) | Err(OsError::NotFound) => false,
        Err(e) => return Err(e),
    };
    os.remove_all(&cell.snapshot_new())?;
    for scratch in cell.scratch_files() {
        os.remove_all(&scratch)?;
    }
    if current && !kept {
        let how = match killed_by {
            Some(sig) => format!("its shell was killed by signal {sig}"),
            None => "its shell ended without saving it: `exec` replaced it, or an EXIT trap of its own replaced tether's".to_owned(),
        };
        os.write_atomic(&kernel.note(), lost_note(&cell, &how).as_bytes())?;
    }
    Ok(kept)
}

/// A cell whose shim died before the cell ended (the daemon resolves it,
/// once its processes are gone): whatever its shell saved is dropped,
/// never promoted — nobody saw the cell to its end, so the kernel keeps
/// the state before it, and the next cell says so. `marker` is the
/// cell's; a cell of an earlier daemon of the kernel changes nothing.
pub fn discard_state(
    os: &mut dyn Os,
    kernel: &KernelLayout,
    cell: &CellLayout,
    marker: &str,
) -> Result<(), OsError> {
    os.remove_all(&cell.snapshot_new())?;
    for scratch in cell.scratch_files() {
        os.remove_all(&scratch)?;
    }
    if current_nonce(os, kernel, marker) {
        let how = "its shim was killed before the cell ended";
        os.write_atomic(&kernel.note(), lost_note(cell, how).as_bytes())?;
    }
    Ok(())
}

/// Is `marker` (`{nonce}:{seq}`) a cell of the kernel's current daemon?
/// (An unreadable config names none.)
fn current_nonce(os: &dyn Os, kernel: &KernelLayout, marker: &str) -> bool {
    procs::marker_nonce(marker).is_some_and(|n| config_names(os, kernel, n) == Some(true))
}

/// What the next cell says when a cell's state could not be kept.
fn lost_note(cell: &CellLayout, how: &str) -> String {
    format!(
        "tether: the shell state {} reached was not kept ({how}); this cell starts from the state before it\n",
        cell_name(cell)
    )
}

/// The status the `end` file holds, if it is complete.
pub fn end_status(end: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(end).ok()?.strip_suffix('\n')?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn crlf_line_ends_become_lf_and_a_lone_cr_stays() {
        assert_eq!(
            &*super::cell_code(b"echo a\r\nprintf 'x\ry'\r\n\r"),
            b"echo a\nprintf 'x\ry'\n\r"
        );
        assert!(matches!(
            super::cell_code(b"echo a\n"),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    use super::*;

    #[test]
    fn argv_round_trips_and_names_the_cell() {
        let kernel = KernelLayout::new("/r/kernels/k");
        let cell = kernel.cell(crate::ids::CellSeq(7));
        for shell in ["bash", "/bin/sh"] {
            let a = argv(shell, &kernel, &cell);
            assert_eq!(a[3], "cell 7");
            assert_eq!(
                dirs_of(&a),
                Some(("/r/kernels/k/state", "/r/kernels/k/cells/7"))
            );
            assert!(
                !a[6].contains("@MARKER@"),
                "placeholders left in the library"
            );
        }
        assert_eq!(dirs_of(&["sh".into(), "-c".into(), "true".into()]), None);
    }

    #[test]
    fn only_a_complete_snapshot_counts() {
        assert!(snapshot_complete(b"x=1\n#tether-end\n"));
        assert!(!snapshot_complete(b"x=1\n#tether-e"));
        assert!(!snapshot_complete(b""));
    }
}
