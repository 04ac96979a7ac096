//! `tether-agent`: the binary tether ships into a sandbox. Its roles, by
//! `argv[1]`:
//!
//! - `op --root R`: one agent operation; the request is one JSON envelope
//!   on stdin, the reply one JSON line on stdout ([`op_cmd`]);
//! - `channel --root R`: the same ops, framed, many in flight, over one
//!   long-lived process's stdin and stdout ([`channel`]);
//! - `serve --kernel-dir D --nonce N`: the kernel daemon ([`serve`]);
//! - `shim --launch JSON`: one cell's shim ([`shim`]);
//! - `call NAME JSON`, or the binary run as `tether-call NAME JSON`: a
//!   tool call from inside a cell ([`call`]).
//!
//! Every decision lives in `tether_core::agent`; these modules move bytes
//! and time and reach the system through [`linux_os::LinuxOs`].

mod call;
mod channel;
mod linux_os;
mod op_cmd;
mod pyshim;
mod serve;
mod shim;

use std::ffi::OsString;
use std::process::ExitCode;

const USAGE: &str = "usage: tether-agent op --root DIR < request.json\n       tether-agent channel --root DIR\n       tether-agent serve --kernel-dir DIR --nonce NONCE\n       tether-agent shim --launch JSON\n       tether-agent call NAME JSON (or tether-call NAME JSON, in a cell)\n";

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

/// `n` bytes of the kernel's random source as hex (a weaker mix of the
/// time and pid where `/dev/urandom` cannot be read).
pub(crate) fn random_hex(n: usize) -> String {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf));
    if read.is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mix = t ^ (u128::from(std::process::id()) << 64);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (mix >> ((i % 16) * 8)) as u8;
        }
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let rest = args.get(2..).unwrap_or(&[]);
    let argv0 = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|a| a.to_str());
    if argv0 == Some(call::ARGV0) {
        return ExitCode::from(call::run(args.get(1..).unwrap_or(&[])));
    }
    let code = match args.get(1).and_then(|a| a.to_str()) {
        Some("call") => call::run(rest),
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
