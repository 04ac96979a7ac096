//! `tether-call NAME [JSON | -]` (the agent binary under that name, or
//! `tether-agent call NAME JSON`; `-` reads the JSON from stdin, for
//! arguments larger than one command-line argument may be): a tool call
//! from inside a cell. The
//! request goes into the cell's calls directory (`TETHER_CALL`) with the
//! cell's credential (`TETHER_CALL_TOKEN`); the cell's shim journals it,
//! the host answers on the cell's next long-poll, and the answer comes
//! back as a file (see `tether_core::protocol::calls`). A string result is
//! printed as it is, any other JSON value as compact JSON; an error goes
//! to stderr with exit status 1 (2: bad usage, or not inside a cell).
//!
//! Also here: [`cell_env`], what a cell's shim adds to its main process's
//! environment (the kernel's `bin` directory with a `tether-call` link to
//! this binary at the end of `PATH`).

use std::ffi::OsString;
use std::path::Path;
use tether_core::agent::calls::{bin_dir, CallEnd, Caller};
use tether_core::protocol::calls::CALLER_POLL;

/// The name under which the binary is a caller.
pub(crate) const ARGV0: &str = "tether-call";

/// `env` plus `PATH` ending in the kernel's `bin` directory, where a
/// `tether-call` link to this binary is made if it is missing.
pub(crate) fn cell_env(kernel_dir: &str, mut env: Vec<(String, String)>) -> Vec<(String, String)> {
    let bin = bin_dir(kernel_dir);
    let link = Path::new(&bin).join(ARGV0);
    if std::fs::symlink_metadata(&link).is_err() {
        if let Ok(exe) = std::env::current_exe() {
            let _ = std::fs::create_dir_all(&bin);
            let _ = std::os::unix::fs::symlink(exe, &link);
        }
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    if !path.split(':').any(|d| d == bin) {
        env.push(("PATH".into(), format!("{path}:{bin}")));
    }
    env
}

fn fail(name: &str, message: &str, code: u8) -> u8 {
    eprintln!("tether-call {name}: {message}");
    code
}

pub(crate) fn run(args: &[OsString]) -> u8 {
    let (Some(name), json) = (
        args.first().and_then(|a| a.to_str()),
        args.get(1).and_then(|a| a.to_str()).unwrap_or("{}"),
    ) else {
        eprintln!("usage: tether-call NAME [JSON | -]   (inside a tether cell; - reads the JSON from stdin)");
        return 2;
    };
    let mut stdin = String::new();
    let json = if json == "-" {
        use std::io::Read;
        if let Err(e) = std::io::stdin().read_to_string(&mut stdin) {
            return fail(
                name,
                &format!("cannot read the arguments from stdin: {e}"),
                2,
            );
        }
        stdin.as_str()
    } else {
        json
    };
    let mut os = crate::linux_os::LinuxOs::new();
    let env = |k: &str| std::env::var(k).ok();
    let ended = |end: CallEnd| match end {
        CallEnd::Answered { stdout } => {
            print!("{stdout}");
            0
        }
        CallEnd::Failed { message, code } => fail(name, &message, code),
    };
    let caller = match Caller::start(&mut os, &env, name, json, crate::random_hex(12)) {
        Ok(caller) => caller,
        Err(end) => return ended(end),
    };
    loop {
        if let Some(end) = caller.poll(&os) {
            return ended(end);
        }
        std::thread::sleep(CALLER_POLL);
    }
}
