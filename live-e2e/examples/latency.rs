//! Prints how long things take on each real backend that runs here:
//! a bare exec (`true`) through the transport, a warm short shell cell
//! through the driver (wall time and exec calls), the first cell of a new
//! kernel (agent install or probe, daemon spawn, submit) and a cancel.
//! Measures; asserts nothing.
//!
//! `cargo run -p tether-live --example latency [ITERATIONS]`

use std::time::{Duration, Instant};
use tether_core::protocol::{CellOutcome, Lang};
use tether_live::backends;
use tether_live::container::Container;
use tether_live::harness::Live;
use tether_live::sshd::Sshd;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn measure(label: &str, live: &mut Live, n: usize) {
    live.prepare().await;
    let mut bare = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let out = live.exec(&["true"]).await;
        bare.push(t.elapsed());
        assert_eq!(out.exit_code, 0);
    }
    let t = Instant::now();
    let first = live.run("bench", Lang::Shell, "true").await;
    let first_cell = t.elapsed();
    assert_eq!(first.outcome, CellOutcome::Ok);
    let execs_before = live.stats().total();
    let mut warm = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let run = live.run("bench", Lang::Shell, "true").await;
        warm.push(t.elapsed());
        assert_eq!(run.outcome, CellOutcome::Ok);
    }
    let per_cell = (live.stats().total() - execs_before) as f64 / n as f64;
    let t = Instant::now();
    let (run, _) = live
        .run_observe_cancel("bench", Lang::Shell, "echo go; sleep 60", b"go\n")
        .await;
    let cancel = t.elapsed();
    assert_eq!(run.outcome, CellOutcome::Cancelled);
    live.shutdown("bench").await;
    println!(
        "{label:<8} bare exec {:>9}   first cell {:>9}   warm cell {:>9} ({per_cell:.1} execs)   \
         run+cancel {:>9}",
        ms(median(bare)),
        ms(first_cell),
        ms(median(warm)),
        ms(cancel)
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10)
        .max(1);
    println!(
        "medians over {n} runs; agent {}",
        tether_live::harness::agent().path.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut live = Live::new("local", &dir.path().display().to_string());
    measure("local", &mut live, n).await;
    match backends::docker() {
        Ok(()) => {
            let c = Container::start("bench");
            let mut live = Live::new(&c.spec(), "/tmp/tether-bench");
            measure("docker", &mut live, n).await;
        }
        Err(why) => println!("docker   skipped: {why}"),
    }
    match backends::sshd() {
        Ok(()) => {
            let sshd = Sshd::start();
            let dir = tempfile::tempdir().expect("tempdir");
            let mut live = Live::new(&sshd.spec(), &dir.path().display().to_string());
            measure("ssh", &mut live, n).await;
        }
        Err(why) => println!("ssh      skipped: {why}"),
    }
}
