//! The shell kernel: the script a cell's main process runs.
//!
//! Each cell is a fresh shell. The script restores the kernel's saved
//! working directory and exports, runs the user's code as one current-shell
//! compound (`. code`, so `cd` and `export` persist and any bytes run
//! verbatim, with no quoting of the code at all), then writes the working
//! directory and `export -p` (marker removed) to `*.new` files and the
//! `end` file with the last status; the shim then puts the new state in
//! place atomically ([`promote_state`]), only if `end` was reached.
//!
//! The saved directory is read back with bash's `read -d ''` (no fork),
//! or `$(cat …)` under a plain POSIX shell; either keeps every byte.
//!
//! `exit N` in the code ends the shell before the save: the previous state
//! is kept and the cell resolves as `exit N`. Nothing here uses a trap, so
//! a cell that sets its own `EXIT` trap changes none of it (its trap runs
//! after the save and the `end` file).

use super::layout::{CellLayout, KernelLayout};
use super::os::{Os, OsError};
use super::procs::MARKER_NAME;

/// The script; `$1` is the kernel's state directory, `$2` the cell's.
const SCRIPT: &str = r#"__tether_state=$1
__tether_cell=$2
set --
if [ -f "$__tether_state/cwd" ]; then
  if [ -n "${BASH_VERSION-}" ]; then
    IFS= read -r -d '' __tether_dir < "$__tether_state/cwd"
  else
    __tether_dir=$(cat "$__tether_state/cwd"; printf x)
    __tether_dir=${__tether_dir%x}
  fi
  cd -- "$__tether_dir" 2>/dev/null || cd
fi
unset __tether_dir
if [ -f "$__tether_state/env" ]; then
  . "$__tether_state/env"
fi
. "$__tether_cell/code"
__tether_status=$?
unset @MARKER@
printf '%s' "$PWD" > "$__tether_state/cwd.new"
export -p > "$__tether_state/env.new"
printf '%s\n' "$__tether_status" > "$__tether_cell/end"
"#;

/// The script text (with the marker name filled in).
pub fn script() -> String {
    SCRIPT.replace("@MARKER@", MARKER_NAME)
}

/// Argv of a shell cell's main process, run by `shell` (`bash` when the
/// sandbox has it, else `/bin/sh`; the same shell reads back what it saved).
pub fn argv(shell: &str, kernel: &KernelLayout, cell: &CellLayout) -> Vec<String> {
    vec![
        shell.to_owned(),
        "-c".into(),
        script(),
        "tether-cell".into(),
        kernel.state_dir(),
        cell.dir().to_owned(),
    ]
}

/// After the cell: when its code reached the end, the state it wrote
/// (`cwd.new`, `env.new`) replaces the kernel's state, each file
/// atomically; otherwise (`exit N`, killed) the previous state stays.
pub fn promote_state(os: &mut dyn Os, kernel_dir: &str, reached_end: bool) -> Result<(), OsError> {
    let state = KernelLayout::new(kernel_dir).state_dir();
    for name in ["cwd", "env"] {
        let new = format!("{state}/{name}.new");
        if reached_end {
            match os.read_file(&new) {
                Ok(bytes) => os.write_atomic(&format!("{state}/{name}"), &bytes)?,
                Err(OsError::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        os.remove_all(&new)?;
    }
    Ok(())
}

/// The status the `end` file holds, if it is complete.
pub fn end_status(end: &[u8]) -> Option<i32> {
    let text = std::str::from_utf8(end).ok()?.strip_suffix('\n')?;
    text.trim().parse().ok()
}
