//! `tether-agent op --root R`: reads one request from stdin, runs
//! [`OpRun`] until it yields the reply line, prints it, exits 0. Usage
//! errors exit 2 (the client sees no reply line and says so).

use crate::linux_os::LinuxOs;
use std::ffi::OsString;
use std::io::{Read, Write};
use std::time::Duration;
use tether_core::agent::{OpRun, Os};

pub(crate) fn run(args: &[OsString]) -> u8 {
    let Some(root) = crate::flag(args, "--root") else {
        eprintln!("tether-agent op: --root DIR is required");
        return 2;
    };
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("tether-agent op: cannot read stdin: {e}");
    }
    let mut os = LinuxOs::new();
    let mut op = OpRun::new(&root, &stdin);
    loop {
        if let Some(line) = op.poll(&mut os) {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&line);
            let _ = out.flush();
            return 0;
        }
        crate::sleep_until(os.now(), op.next_wake(), Duration::from_millis(20));
    }
}
