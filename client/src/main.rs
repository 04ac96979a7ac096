//! The `tether` binary: parse the command line, run it on a
//! single-threaded tokio runtime, exit with its code (see `tether --help`).

use clap::Parser;
use std::time::Duration;
use tether::cli::{self, Cli};

fn main() {
    // clap exits with 2 on a usage error and 0 for --help.
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("tether: cannot start the runtime: {e}");
            std::process::exit(cli::exit::FAILURE);
        }
    };
    let code = runtime.block_on(cli::main(cli));
    // Abandoned exec calls (an error path) kill their processes on drop.
    runtime.shutdown_timeout(Duration::from_millis(200));
    std::process::exit(code);
}
