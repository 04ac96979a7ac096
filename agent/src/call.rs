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
use std::time::{Duration, Instant};
use tether_core::agent::calls::{answer_path, bin_dir, request_path};
use tether_core::agent::journal::done_flag;
use tether_core::agent::layout::CellLayout;
use tether_core::protocol::calls::{
    CallReply, CallRequest, CALLER_POLL, DEFAULT_CALL_TIMEOUT, ENV_DIR, ENV_TIMEOUT, ENV_TOKEN,
    MAX_ARGS,
};

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
    let args: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return fail(name, &format!("the arguments are not JSON: {e}"), 2),
    };
    let (Ok(dir), Ok(token)) = (std::env::var(ENV_DIR), std::env::var(ENV_TOKEN)) else {
        return fail(
            name,
            &format!("not inside a tether cell ({ENV_DIR} and {ENV_TOKEN} are not set)"),
            2,
        );
    };
    let size = json.len();
    if size > MAX_ARGS {
        return fail(
            name,
            &format!("the arguments are {size} bytes, over the limit of {MAX_ARGS}"),
            1,
        );
    }
    let cell_dir = Path::new(&dir)
        .parent()
        .map_or_else(String::new, |p| p.to_string_lossy().into_owned());
    let done = done_flag(&CellLayout::from_dir(&cell_dir).journal());
    let ended = || Path::new(&done).exists() || !Path::new(&dir).is_dir();
    if ended() {
        return fail(
            name,
            "refused: the cell this process belongs to has ended (a tool call is honoured only while its cell runs)",
            1,
        );
    }
    let timeout = std::env::var(ENV_TIMEOUT)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(DEFAULT_CALL_TIMEOUT, Duration::from_secs_f64);
    let id = crate::random_hex(12);
    let request = CallRequest {
        id: id.clone(),
        token,
        name: name.to_owned(),
        args,
    };
    let bytes = serde_json::to_vec(&request).unwrap_or_default();
    let tmp = format!("{dir}/.{id}.tmp");
    let written =
        std::fs::write(&tmp, &bytes).and_then(|()| std::fs::rename(&tmp, request_path(&dir, &id)));
    if let Err(e) = written {
        return fail(
            name,
            &format!("cannot write the request into {dir}: {e}"),
            1,
        );
    }
    let answer = answer_path(&dir, &id);
    let start = Instant::now();
    loop {
        if let Ok(bytes) = std::fs::read(&answer) {
            match serde_json::from_slice::<CallReply>(&bytes) {
                Ok(CallReply::Ok { value }) => {
                    match value {
                        serde_json::Value::String(s) => println!("{s}"),
                        other => println!("{other}"),
                    }
                    return 0;
                }
                Ok(CallReply::Error { message }) => return fail(name, &message, 1),
                Err(_) => {}
            }
        } else if ended() {
            if Path::new(&answer).exists() {
                continue;
            }
            return fail(name, "refused: the cell ended before the host answered", 1);
        }
        if start.elapsed() >= timeout {
            return fail(
                name,
                &format!(
                    "no answer within {:.0} s (the deadline per call; {ENV_TIMEOUT} sets it in seconds)",
                    timeout.as_secs_f64()
                ),
                1,
            );
        }
        std::thread::sleep(CALLER_POLL);
    }
}
