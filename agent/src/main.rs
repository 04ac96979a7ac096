//! `tether-agent`: the binary tether ships into a sandbox. Its roles, by
//! `argv[1]`:
//!
//! - `op --root R`: one agent operation; the request is one JSON envelope
//!   on stdin, the reply one JSON line on stdout ([`op_cmd`]);
//! - `channel --root R`: the same ops, framed, many in flight, over one
//!   long-lived process's stdin and stdout ([`channel`]);
//! - `serve --kernel-dir D --nonce N`: the kernel daemon ([`serve`]);
//! - `shim --launch JSON`: one cell's shim ([`shim`]).
//!
//! Every decision lives in `tether_core::agent`; these modules move bytes
//! and time and reach the system through [`linux_os::LinuxOs`].

mod channel;
mod linux_os;
mod op_cmd;
mod pyshim;
mod serve;
mod shim;

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "usage: tether-agent op --root DIR < request.json\n       tether-agent channel --root DIR\n       tether-agent serve --kernel-dir DIR --nonce NONCE\n       tether-agent shim --launch JSON\n";

/// The value after `--name` in `args`.
pub(crate) fn flag(args: &[OsString], name: &str) -> Option<String> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.to_str().map(str::to_owned)
}

/// Sleeps until `wake` (by the OS clock `now`), at least 1 ms and at most
/// `max`.
pub(crate) fn sleep_until(
    now: tether_core::time::Timestamp,
    wake: Option<tether_core::time::Timestamp>,
    max: std::time::Duration,
) {
    let d = wake
        .map(|w| w.saturating_since(now))
        .unwrap_or(max)
        .clamp(std::time::Duration::from_millis(1), max);
    std::thread::sleep(d);
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let rest = args.get(2..).unwrap_or(&[]);
    let code = match args.get(1).and_then(|a| a.to_str()) {
        Some("op") => op_cmd::run(rest),
        Some("channel") => channel::run(rest),
        Some("serve") => serve::run(rest),
        Some("shim") => shim::run(rest),
        _ => {
            eprint!("{USAGE}");
            2
        }
    };
    ExitCode::from(code)
}
