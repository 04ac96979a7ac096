//! A plain exec of fail open (`Op::Plain`): the cell's code run by a
//! shell that the exec call's command forks, outside any kernel — no
//! shim, no journal, no marker, no cgroup. What the shell (and what it
//! started, while they hold its pipes) writes is the exec's output; the
//! shell's status is the exec's.
//!
//! The code is the cell's workload, run by the workload interpreter
//! ([`super::interp`]) as `sh` (or bash) runs a rendered workload. A
//! `python3 -c` of the same code runs it the same way: the plain Python
//! cells of the scenarios print and write their side effect, where the
//! two agree.

use super::interp::Shell;
use super::process::{ExitStatus, Fd, ForkSpec, Program, Role};
use super::SimOs;
use tether_core::agent::{OsError, Pid};

/// A plain exec under way.
#[derive(Debug)]
pub struct PlainRun {
    main: Pid,
    exec: Pid,
    pipes: [u64; 2],
    eof: [bool; 2],
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    status: Option<i32>,
}

/// What a finished plain exec gives its caller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlainOutput {
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
    /// Its status (128 + N for a death by signal N, as a shell reports).
    pub exit_code: i32,
}

impl SimOs {
    /// The exec call's command `exec` starts `argv` running `code` (`bash`:
    /// as bash does), its output on two new pipes.
    pub fn start_plain(
        &mut self,
        exec: Pid,
        argv: &[String],
        code: &[u8],
        bash: bool,
    ) -> Result<PlainRun, OsError> {
        // Python reads a CRLF line ending as a newline; a shell does not
        // ([`Shell::from_code`]).
        let lf;
        let code = if argv.first().is_some_and(|a| a == "python3") {
            lf = String::from_utf8_lossy(code).replace("\r\n", "\n");
            lf.as_bytes()
        } else {
            code
        };
        let mut shell = Shell::from_code(code, None);
        shell.bash = bash;
        let out = self.new_pipe();
        let err = self.new_pipe();
        if let Some(p) = self.procs.get_mut(&exec) {
            p.reads = vec![out, err];
            // It waits for the shell (the rendered wrapper `exec`s it):
            // unlike an op command, it does not reap at once, so
            // [`SimOs::poll_plain`] sees the shell's status.
            p.program = Program::Running;
        }
        let args: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut spec = ForkSpec::new(&args, Program::Shell(Box::new(shell)), Role::Cell);
        spec.stdio = Some((Fd::Pipe(out), Fd::Pipe(err)));
        let main = self.fork(exec, spec)?;
        Ok(PlainRun {
            main,
            exec,
            pipes: [out, err],
            eof: [false; 2],
            stdout: Vec::new(),
            stderr: Vec::new(),
            status: None,
        })
    }

    /// Reads what the plain exec wrote and reaps its shell; its output once
    /// the shell has exited and both pipes reached end of file.
    pub fn poll_plain(&mut self, run: &mut PlainRun) -> Option<PlainOutput> {
        for (i, id) in run.pipes.into_iter().enumerate() {
            let (data, eof) = self.read_pipe(id);
            if i == 0 {
                run.stdout.extend(data);
            } else {
                run.stderr.extend(data);
            }
            run.eof[i] |= eof;
        }
        for (pid, status) in self.reap_children(run.exec) {
            if pid == run.main {
                run.status = Some(match status {
                    ExitStatus::Code(c) => c,
                    ExitStatus::Signaled(s) => 128 + s.number(),
                });
            }
        }
        let exit_code = run.status.filter(|_| run.eof == [true; 2])?;
        Some(PlainOutput {
            stdout: std::mem::take(&mut run.stdout),
            stderr: std::mem::take(&mut run.stderr),
            exit_code,
        })
    }
}
