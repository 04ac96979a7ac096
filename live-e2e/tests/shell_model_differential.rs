//! The simulation's shell model against real shells (issue 7, point 9):
//! every case of the differential corpus (`tether_scenarios::shell_model::
//! corpus`: variables exported or not, values with newlines and quotes,
//! arrays, functions, aliases, `set` flags, umask, `cd`/`pushd`, traps,
//! then `exit N`, a `set -e` failure, a `set -u` failure, a cancel, a
//! user's EXIT trap, a shell that ignores TERM) runs as real shell code
//! (rendered as every live backend renders workloads) in a real tether
//! shell kernel on `local` — under bash, and under dash (a PATH without
//! bash, as on a sandbox that has none) — and what each cell prints, how
//! it resolves and whether it says the state before was not kept must be
//! what the model (`run_cells`, whose rules the simulated shell follows;
//! sim's `the_simulated_kernel_plays_the_shell_corpus_as_the_model_says`
//! holds the simulated kernel to it) says.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tether::transport::{ExecFuture, ExecRequest, Transport};
use tether_core::protocol::Lang;
use tether_live::harness::Live;
use tether_scenarios::render_shell;
use tether_scenarios::shell_model::{corpus, run_cells, Case, Flavor, CANCEL_CUE};

/// Runs every exec under `env PATH=…`, so the agent's daemon looks for
/// bash in a PATH that has none and runs cells under `/bin/sh`.
struct NoBash {
    inner: Arc<dyn Transport>,
    path: String,
}

impl Transport for NoBash {
    fn exec(&self, mut req: ExecRequest) -> ExecFuture<'_> {
        let mut argv = vec!["env".to_owned(), format!("PATH={}", self.path)];
        argv.append(&mut req.argv);
        req.argv = argv;
        self.inner.exec(req)
    }

    fn describe(&self) -> String {
        format!("{} without bash", self.inner.describe())
    }
}

/// A directory of links to every program of /usr/bin and /bin but bash.
fn path_without_bash(dir: &Path) -> String {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir bin");
    for from in ["/usr/bin", "/bin"] {
        let Ok(entries) = std::fs::read_dir(from) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            if name == "bash" || name == "rbash" || bin.join(&name).exists() {
                continue;
            }
            let _ = std::os::unix::fs::symlink(entry.path(), bin.join(&name));
        }
    }
    assert!(
        bin.join("sh").exists(),
        "no sh in /usr/bin or /bin to run dash cells"
    );
    bin.display().to_string()
}

fn is_dash(sh: &Path) -> bool {
    std::fs::canonicalize(sh)
        .ok()
        .and_then(|p| p.file_name().map(|n| n == "dash"))
        .unwrap_or(false)
}

/// Runs `case` in a fresh kernel of `live`; returns one line per
/// disagreement with the model.
async fn play(live: &mut Live, flavor: Flavor, case: &Case) -> Vec<String> {
    let expected = run_cells(flavor, &case.cells)
        .unwrap_or_else(|e| panic!("{}: the model cannot play {e:?}", case.name));
    let kernel = case.name.replace('_', "-");
    let mut wrong = Vec::new();
    for (i, (cell, want)) in case.cells.iter().zip(&expected).enumerate() {
        let code = render_shell(&cell.workload, &live.side_dir());
        let cue = cell.cancel.then_some(CANCEL_CUE.as_bytes());
        let run = live
            .run_cancelling_at(&kernel, Lang::Shell, &code, cue)
            .await;
        let stderr = String::from_utf8_lossy(&run.stderr);
        let lost = stderr.contains("was not kept");
        let at = format!("{} ({flavor:?}) cell {}", case.name, i + 1);
        if run.out() != want.stdout {
            wrong.push(format!(
                "{at}: stdout {:?}, the model says {:?} (stderr {stderr:?})",
                run.out(),
                want.stdout
            ));
        }
        if run.outcome != want.outcome {
            wrong.push(format!(
                "{at}: resolved {}, the model says {} (stderr {stderr:?})",
                run.outcome, want.outcome
            ));
        }
        if lost != want.state_lost {
            wrong.push(format!(
                "{at}: says the state before was not kept: {lost}, the model: {} (stderr {stderr:?})",
                want.state_lost
            ));
        }
    }
    live.shutdown(&kernel).await;
    wrong
}

async fn differential(flavor: Flavor) {
    let dir = tempfile::Builder::new()
        .prefix("tether-shell-model")
        .tempdir()
        .expect("tempdir");
    let root = dir.path().join("root").display().to_string();
    let mut live = match flavor {
        Flavor::Bash => Live::with_driver("local", &root, |t| t, quick_grace),
        Flavor::Dash => {
            let path = path_without_bash(dir.path());
            assert!(
                is_dash(&Path::new(&path).join("sh")),
                "/bin/sh is not dash here"
            );
            Live::with_driver(
                "local",
                &root,
                move |inner| Arc::new(NoBash { inner, path }) as Arc<dyn Transport>,
                quick_grace,
            )
        }
    };
    live.prepare().await;
    let mut wrong = Vec::new();
    let mut played = 0;
    for case in corpus() {
        if case.bash_only && flavor == Flavor::Dash {
            continue;
        }
        wrong.extend(play(&mut live, flavor, &case).await);
        played += 1;
    }
    assert!(played >= 8, "only {played} cases played");
    assert!(
        wrong.is_empty(),
        "the shell model and the real {flavor:?} kernel disagree:\n{}",
        wrong.join("\n")
    );
}

/// The cancel of a shell that ignores TERM waits for the KILL.
fn quick_grace(config: &mut tether_core::client::Config) {
    config.grace = Duration::from_millis(500);
}

#[tokio::test]
async fn the_shell_model_matches_real_bash() {
    differential(Flavor::Bash).await;
}

#[tokio::test]
async fn the_shell_model_matches_real_dash() {
    differential(Flavor::Dash).await;
}
