//! Fail open (issue 10): when no kernel can start on the sandbox, `tether
//! run` runs the cell once as a plain exec, says so on stderr and in
//! `--json`, and exits with the command's status; `--no-fallback` refuses
//! with the reason. Local backend, real processes: a root under `/proc`,
//! where no one (not even root) can create the agent's directories.

mod common;

use common::{show, text, World};

fn json_lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

const NO_ROOT: &str = "/proc/tether-cannot-install-here";

#[test]
fn a_cell_runs_once_without_a_kernel_and_says_so() {
    let w = World::new();
    let side = w.root.path().join("ran");
    let code = format!(
        "echo ran >> {}; echo hi; echo oops >&2; exit 3",
        side.display()
    );
    let out = w.tether(&["--root", NO_ROOT, "run", &code]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the command's status: {}",
        show(&out)
    );
    assert_eq!(text(&out.stdout), "hi\n", "{}", show(&out));
    let err = text(&out.stderr);
    assert!(err.contains("oops\n"), "{err}");
    assert!(
        err.contains("no kernel can start here") && err.contains("cannot create directories"),
        "says so, with the reason: {err}"
    );
    assert_eq!(std::fs::read_to_string(&side).unwrap(), "ran\n", "ran once");

    let out = w.tether(&["--root", NO_ROOT, "--json", "run", &code]);
    assert_eq!(out.status.code(), Some(3), "{}", show(&out));
    let lines = json_lines(&out);
    let kinds: Vec<&str> = lines.iter().filter_map(|l| l["event"].as_str()).collect();
    assert!(kinds.contains(&"ran_without_kernel"), "{kinds:?}");
    let last = lines.last().unwrap();
    assert_eq!(last["execs"]["plain"], 1, "{last}");
    assert!(
        last["execs"].get("submit").is_none(),
        "never submitted: {last}"
    );
    assert_eq!(std::fs::read_to_string(&side).unwrap(), "ran\nran\n");
}

#[test]
fn no_fallback_refuses_with_the_reason_and_runs_nothing() {
    let w = World::new();
    let side = w.root.path().join("ran");
    let code = format!("echo ran >> {}", side.display());
    let out = w.tether(&["--root", NO_ROOT, "run", "--no-fallback", &code]);
    assert_ne!(out.status.code(), Some(0), "{}", show(&out));
    assert!(
        text(&out.stderr).contains("could not be started")
            && text(&out.stderr).contains("cannot create directories"),
        "{}",
        show(&out)
    );
    assert!(!side.exists(), "nothing ran");
}
