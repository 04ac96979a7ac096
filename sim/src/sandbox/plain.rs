//! The exec server's plain execs (fail open, `Op::Plain`): `sh -c` (bash
//! where the sandbox has it, as the rendered wrapper picks) or
//! `python3 -c` of a cell's code, run on [`SimOs`] outside any kernel
//! ([`crate::os::plain`] on [`crate::os::SimOs`]), answered with the command's own output and
//! status; `python3` missing is 127, as a shell says it.

use super::{wait_while_frozen, ExecGuard, Sandbox};
use crate::control::Control;
use crate::trace::{excerpt, now_ms, Trace};
use crate::transport::WireResponse;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tether_core::agent::Os;
use tether_core::bytes::Bytes;
use tether_core::protocol::{Lang, OpKind};

/// The language and code of a plain exec's argv (as
/// `tether_core::protocol::render` makes it), if it is one.
pub(super) fn plain_code(argv: &[String]) -> Option<(Lang, &str)> {
    let at = |i: usize| argv.get(i).map(String::as_str);
    match (at(0), at(1), at(3)) {
        (Some("/bin/sh"), Some("-c"), Some("tether-plain")) => Some((Lang::Shell, at(4)?)),
        (Some("python3"), Some("-c"), _) => Some((Lang::Python, at(2)?)),
        _ => None,
    }
}

/// Runs a plain exec to its end (in virtual time) and answers with its
/// output and status.
pub(super) async fn plain(
    sb: Rc<RefCell<Sandbox>>,
    trace: Trace,
    control: Control,
    argv: Vec<String>,
) -> Option<WireResponse> {
    let (lang, code) = plain_code(&argv)?;
    let code = code.as_bytes().to_vec();
    control
        .before_op(OpKind::Plain, |what| trace.log("sandbox", what))
        .await;
    let (pid, boot, run) = {
        let mut s = sb.borrow_mut();
        s.advance(now_ms());
        let program = match lang {
            Lang::Shell if s.os.has_program("bash") => "bash",
            Lang::Shell => "sh",
            Lang::Python => "python3",
        };
        if !s.os.has_program(program) {
            trace.log("sandbox", format!("exec plain: {program} not found"));
            return Some(WireResponse {
                stderr: Bytes(format!("sh: 1: {program}: not found\n").into_bytes()),
                exit_code: 127,
                ..WireResponse::default()
            });
        }
        let pid = match s.os.begin_exec(&argv) {
            Ok(pid) => pid,
            Err(e) => return Some(fork_failed(&e.to_string())),
        };
        let shell_argv = [program.to_owned(), "-c".into(), "<cell code>".into()];
        let run = s.os.start_plain(pid, &shell_argv, &code, program == "bash");
        s.flush_events();
        (pid, s.os.current_boot_id().to_owned(), run)
    };
    let mut guard = ExecGuard {
        sb: sb.clone(),
        pid,
        boot,
        done: false,
    };
    let mut run = match run {
        Ok(run) => run,
        Err(e) => return Some(fork_failed(&e.to_string())),
    };
    trace.log("sandbox", format!("exec plain {lang:?} as pid {pid}"));
    let out = loop {
        wait_while_frozen(&sb).await;
        let (out, wake) = {
            let mut s = sb.borrow_mut();
            s.advance(now_ms());
            let out = s.os.poll_plain(&mut run);
            s.flush_events();
            (out, s.next_wake())
        };
        if let Some(out) = out {
            break out;
        }
        let now = now_ms();
        let until = wake.map_or(now + 5, |w| w.max(now + 1)).min(now + 5);
        tokio::time::sleep(Duration::from_millis(until - now)).await;
    };
    {
        let mut s = sb.borrow_mut();
        s.os.end_exec(pid, out.exit_code);
        s.flush_events();
        guard.done = true;
    }
    if control.after_op(OpKind::Plain) {
        trace.log("sandbox", "plain ran; its reply is LOST (fault)");
        return None;
    }
    trace.log(
        "sandbox",
        format!(
            "plain exits {}: {}",
            out.exit_code,
            excerpt(&out.stdout, 120)
        ),
    );
    Some(WireResponse {
        stdout: Bytes(out.stdout),
        stderr: Bytes(out.stderr),
        exit_code: out.exit_code,
    })
}

fn fork_failed(e: &str) -> WireResponse {
    WireResponse {
        stderr: Bytes(format!("fork: {e}").into_bytes()),
        exit_code: 126,
        ..WireResponse::default()
    }
}
