//! What a gone daemon left running. Its cells' shims and processes, and a
//! Python kernel's interpreter, outlive it: the client is told the state
//! is lost and the cells in flight failed, so none of them may run on.
//! The op that proves the daemon gone (a probe, or a submit that expected
//! it) ends them before it answers; the next daemon's adoption ends what
//! is left (a cell whose shim it finds alive is cancelled, the
//! interpreter killed).

use super::journal;
use super::kernel::{self, read_json, LaunchRecord};
use super::layout::KernelLayout;
use super::op::{cell_seqs, kernel_nonce, recorded_cell_processes, taken};
use super::os::{Os, Pid};
use super::procs::{self, Table};
use super::python;
use std::collections::BTreeSet;

/// Ends every process of the kernel's unfinished cells, and its Python
/// interpreter, when no daemon of the kernel runs: without this a cell
/// written off as lost ran on until a next daemon adopted it, and forked
/// after its resolution when the respawn was delayed (full_disk seed 209:
/// a full disk refused the new daemon's config).
pub fn end_orphaned_cells(os: &mut dyn Os, k: &KernelLayout) {
    if kernel::live_daemon(os, k).is_some() {
        // Its adoption decides about them.
        return;
    }
    kill_orphaned_interpreter(os, k);
    let table = Table::snapshot(os);
    let protected = procs::protected(&table, os.self_pid());
    let nonce = kernel_nonce(os, k);
    let mut set = BTreeSet::new();
    for seq in cell_seqs(os, k) {
        let cell = k.cell(seq);
        if !taken(os, &cell) || os.exists(&journal::done_flag(&cell.journal())) {
            continue;
        }
        set.extend(recorded_cell_processes(
            os,
            &table,
            k,
            nonce.as_deref(),
            seq,
            &protected,
        ));
    }
    // As a cancel reaches them (no session of a shim: a shim shares its
    // daemon's session with every shim of the kernel, those of done cells
    // whose leftovers may run on included).
    set.retain(|p| table.get(*p).is_some_and(|i| !i.zombie));
    if !set.is_empty() {
        procs::stop_and_kill(os, &set);
    }
}

/// The Python interpreter shim an earlier daemon of this kernel started
/// (recorded in `py/launch.json`), with its interpreter and whatever they
/// still hold, is killed: its namespace went with that daemon (the client
/// was told the state is lost), and left alive it would take the next
/// cell handed through `py/run` as well — a second run, in the old
/// namespace.
pub fn kill_orphaned_interpreter(os: &mut dyn Os, k: &KernelLayout) {
    let table = Table::snapshot(os);
    let protected = procs::protected(&table, os.self_pid());
    // A daemon killed between starting its interpreter's shim and writing
    // the record leaves none (full_disk seed 104909: 4 ms apart); the
    // interpreter still carries the marker of the daemon's nonce, which is
    // the config's until a spawn retires it (and kills them then).
    let mut set = kernel_nonce(os, k)
        .map(|nonce| interpreters_of(os, &table, &protected, &nonce))
        .unwrap_or_default();
    let path = python::launch_file(k);
    let record = read_json::<LaunchRecord>(os, &path);
    if let Ok(Some(l)) = &record {
        let live = l.of_this_boot(os)
            && table
                .get(l.shim_pid)
                .is_some_and(|p| p.starttime == l.shim_starttime && !p.zombie);
        if live && !protected.contains(&l.shim_pid) {
            set.extend(table.tree_but(l.shim_pid, &protected));
        }
    }
    if !set.is_empty() {
        procs::stop_and_kill(os, &set);
    }
    if matches!(record, Ok(Some(_))) {
        let _ = os.remove_all(&path);
        let _ = os.remove_all(&python::run_file(k));
    }
}

/// Kills every interpreter started under the daemon nonce `nonce` (they
/// carry its marker, `<nonce>:py`), with what they hold, but for those
/// under the interpreter shim `spare` (the daemon's live one): called
/// where no daemon of that nonce runs, or by that daemon for an
/// interpreter whose shim died (it came back to the daemon, a subreaper,
/// with the old namespace and nobody to hand it cells).
pub fn kill_interpreters_of(os: &mut dyn Os, nonce: &str, spare: Option<Pid>) {
    let table = Table::snapshot(os);
    let mut protected = procs::protected(&table, os.self_pid());
    if let Some(shim) = spare {
        protected.insert(shim);
        protected.extend(table.descendants(shim));
    }
    let set = interpreters_of(os, &table, &protected, nonce);
    if !set.is_empty() {
        procs::stop_and_kill(os, &set);
    }
}

/// The live processes of `table` that carry the interpreter marker of
/// daemon nonce `nonce` (`<nonce>:py`), but for `protected`.
fn interpreters_of(
    os: &dyn Os,
    table: &Table,
    protected: &BTreeSet<Pid>,
    nonce: &str,
) -> BTreeSet<Pid> {
    let marker = format!("{nonce}:{}", python::INTERPRETER_MARK);
    table
        .iter()
        .filter(|p| !p.zombie && !protected.contains(&p.pid))
        .filter(|p| os.has_env(p.pid, procs::MARKER_NAME, &marker))
        .map(|p| p.pid)
        .collect()
}
