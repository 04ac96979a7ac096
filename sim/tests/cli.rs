//! The `tether-sim` binary as its users run it: exit codes, what goes to
//! stdout (results, JSON) and what to stderr (progress, diagnostics), and
//! the round trips a person reproducing a race goes through.
//!
//! Every child is bounded: past [`BOUND`] it is killed and the test fails.

use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tether_sim::scenario;

/// How long one `tether-sim` may take (debug build, a few seeds).
const BOUND: Duration = Duration::from_secs(120);

const BIN: &str = env!("CARGO_BIN_EXE_tether-sim");

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `tether-sim args…` to completion, at most [`BOUND`].
fn sim(args: &[&str]) -> Run {
    let what = format!("tether-sim {}", args.join(" "));
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as _));
    let start = Instant::now();
    let status = loop {
        match child.try_wait().unwrap() {
            Some(status) => break status,
            None if start.elapsed() < BOUND => std::thread::sleep(Duration::from_millis(10)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`{what}` did not exit within {BOUND:?}: killed it");
            }
        }
    };
    Run {
        code: status
            .code()
            .unwrap_or_else(|| panic!("`{what}` died of a signal: {status:?}")),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn json(run: &Run) -> Value {
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}):\n{}", run.stdout))
}

/// A scratch directory of its own for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn race_files() -> Vec<PathBuf> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/races");
    let files = tether_sim::race::race_files(Path::new(dir)).unwrap();
    assert!(!files.is_empty(), "no race files in {dir}");
    files
}

/// A usage error: exit 2, nothing on stdout, one line on stderr that
/// contains every one of `names`.
#[track_caller]
fn refused(args: &[&str], names: &[&str]) -> String {
    let run = sim(args);
    assert_eq!(run.code, 2, "{args:?}: stderr:\n{}", run.stderr);
    assert_eq!(run.stdout, "", "{args:?} printed on stdout");
    let msg = run.stderr.trim_end();
    for name in names {
        assert!(
            msg.contains(name),
            "{args:?}: {msg:?} does not name {name:?}"
        );
    }
    assert!(
        msg.starts_with("tether-sim: ") && !msg.contains('\n'),
        "{args:?}: not one line: {msg:?}"
    );
    msg.to_owned()
}

#[test]
fn list_names_every_scenario() {
    let want: Vec<&str> = scenario::all().iter().map(|s| s.name).collect();
    let run = sim(&["list"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let listed: Vec<&str> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(listed, want);

    let run = sim(&["list", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = json(&run);
    let listed: Vec<&str> = doc["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(listed, want);
    assert_eq!(doc["variants"][0], "real");
}

#[test]
fn explore_json_has_a_row_per_scenario_and_progress_goes_to_stderr() {
    let run = sim(&[
        "explore",
        "--scenario",
        "happy",
        "--seeds",
        "5",
        "--jobs",
        "2",
        "--json",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let doc = json(&run);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{doc}");
    assert_eq!(rows[0]["scenario"], "happy");
    assert_eq!(rows[0]["seeds"], 5);
    assert_eq!(rows[0]["failing_seeds"], 0);
    assert_eq!(doc["failures"], Value::Array(vec![]));
    // Not a terminal: one progress line per tenth, the last one complete.
    assert!(run.stderr.contains("5/5 runs, 0 failing"), "{}", run.stderr);

    let quiet = sim(&[
        "explore",
        "--scenario",
        "happy",
        "--seeds",
        "5",
        "--json",
        "--quiet",
    ]);
    assert_eq!(quiet.code, 0, "{}", quiet.stderr);
    assert_eq!(quiet.stderr, "");
    assert_eq!(json(&quiet)["rows"][0]["seeds"], 5);
}

#[test]
fn explore_table_by_default_and_shards_split_the_seeds() {
    let mut total = 0;
    for shard in ["1/2", "2/2"] {
        let run = sim(&[
            "explore",
            "--scenario",
            "state",
            "--seeds",
            "5",
            "--shard",
            shard,
            "--quiet",
        ]);
        assert_eq!(run.code, 0, "{}", run.stderr);
        let row = run
            .stdout
            .lines()
            .find(|l| l.starts_with("state "))
            .unwrap_or_else(|| panic!("no row for state:\n{}", run.stdout));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[2], "0", "violations in {row:?}");
        total += cols[1].parse::<u64>().unwrap();
    }
    assert_eq!(total, 5);
}

#[test]
fn explore_check_determinism_passes() {
    let run = sim(&[
        "explore",
        "--check-determinism",
        "--seeds",
        "1",
        // The corpus has its own test (races.rs); replayed here too, the
        // run outgrew the bound on a loaded machine.
        "--no-corpus",
        "--json",
        "--quiet",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let doc = json(&run);
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), scenario::all().len());
    assert!(rows
        .iter()
        .all(|r| r["seeds"] == 1 && r["failing_seeds"] == 0));
}

#[test]
fn replay_prints_the_same_trace_of_exec_rpcs_every_time() {
    let args = ["replay", "--scenario", "happy", "--seed", "3"];
    let first = sim(&args);
    assert_eq!(first.code, 0, "{}", first.stderr);
    let execs: Vec<&str> = first
        .stdout
        .lines()
        .filter(|l| l.contains(" client  exec x"))
        .collect();
    for op in ["spawn", "submit", "shutdown"] {
        assert!(
            execs.iter().any(|l| l.contains(&format!(" {op}"))),
            "no {op} exec in:\n{}",
            first.stdout
        );
    }
    let second = sim(&args);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        first.stdout == second.stdout,
        "two replays of the same seed differ"
    );
}

#[test]
fn replay_json_holds_the_same_trace() {
    let text = sim(&["replay", "--scenario", "reply_lost", "--seed", "1"]);
    let run = sim(&[
        "replay",
        "--scenario",
        "reply_lost",
        "--seed",
        "1",
        "--json",
    ]);
    assert_eq!((text.code, run.code), (0, 0), "{}", run.stderr);
    let doc = json(&run);
    assert_eq!(doc["scenario"], "reply_lost");
    assert_eq!(doc["seed"], 1);
    assert_eq!(doc["violations"], Value::Array(vec![]));
    assert!(doc["schedule"].is_array());
    // The entries render back to the text trace, line for line.
    let rendered: String = doc["trace"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let ms = e["ms"].as_u64().unwrap();
            format!(
                "{:>5}.{:03}s {:<7} {}\n",
                ms / 1000,
                ms % 1000,
                e["actor"].as_str().unwrap(),
                e["text"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(rendered, text.stdout);
}

#[test]
fn every_race_file_replays_clean() {
    for file in race_files() {
        let run = sim(&["race", file.to_str().unwrap()]);
        assert_eq!(
            run.code,
            0,
            "{}: {}\n{}",
            file.display(),
            run.stderr,
            run.stdout
        );
        assert!(!run.stdout.contains("VIOLATION"), "{}", file.display());
    }
}

#[test]
fn race_on_a_directory_replays_every_file_in_it() {
    let dir = scratch("race-dir");
    let files = race_files();
    for f in &files {
        std::fs::copy(f, dir.join(f.file_name().unwrap())).unwrap();
    }
    // A file below the directory is not one of its races.
    std::fs::create_dir_all(dir.join("open")).unwrap();
    std::fs::write(dir.join("open").join("broken.json"), "{").unwrap();
    let d = dir.to_str().unwrap();
    let run = sim(&["race", d]);
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, run.stdout);
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), files.len(), "{}", run.stdout);
    assert!(lines.iter().all(|l| l.starts_with("ok ")), "{}", run.stdout);
    let run = sim(&["race", "--json", d]);
    let rows: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), files.len());

    // One malformed file: nothing runs, the file is named.
    std::fs::write(dir.join("zz-truncated.json"), r#"{"scenario":"happy","#).unwrap();
    refused(&["race", d], &["zz-truncated.json"]);
    let empty = scratch("race-dir-empty");
    refused(&["race", empty.to_str().unwrap()], &["no race files"]);
}

#[test]
fn a_replay_saved_as_a_race_replays_the_same() {
    let dir = scratch("save-race");
    let path = dir.join("open").join("lost-reply.json");
    let path = path.to_str().unwrap();
    let schedule = r#"[{"at_ms":0,"kind":"reply_lost","op":"submit"}]"#;
    let replay = [
        "replay",
        "--scenario",
        "reply_lost",
        "--seed",
        "4",
        "--schedule",
        schedule,
        "--save-race",
        path,
        "--about",
        "the submit's reply is lost",
    ];
    let saved = sim(&replay);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    assert!(saved.stderr.contains(path), "{}", saved.stderr);
    let race = sim(&["race", path]);
    assert_eq!(race.code, 0, "{}", race.stderr);
    assert_eq!(race.stdout, saved.stdout);
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(doc["about"], "the submit's reply is lost");
    assert_eq!(doc["seed"], 4);

    // An existing race file is never overwritten.
    let before = std::fs::read(path).unwrap();
    let mut again = replay;
    again[10] = "something else";
    refused(&again, &[path, "exists"]);
    assert_eq!(std::fs::read(path).unwrap(), before);
}

#[test]
fn usage_errors_exit_2_and_name_the_problem() {
    let all: Vec<&str> = scenario::all().iter().map(|s| s.name).collect();
    let mut names = vec!["\"nope\""];
    names.extend(&all);
    refused(&["explore", "--scenario", "nope", "--seeds", "1"], &names);
    refused(&["replay", "--scenario", "nope", "--seed", "1"], &names);
    refused(
        &["explore", "--shard", "3/2", "--seeds", "1"],
        &["3/2", "K <= N"],
    );
    refused(
        &["explore", "--shard", "x", "--seeds", "1"],
        &["\"x\"", "K/N"],
    );
    refused(
        &["explore", "--variant", "nope", "--seeds", "1"],
        &["\"nope\"", "real"],
    );
    refused(
        &[
            "replay",
            "--scenario",
            "happy",
            "--seed",
            "1",
            "--schedule",
            "/no/such/file",
        ],
        &["/no/such/file"],
    );
    refused(
        &[
            "replay",
            "--scenario",
            "happy",
            "--seed",
            "1",
            "--schedule",
            r#"[{"at_ms":0,"kind":"meteor"}]"#,
        ],
        &["meteor", "partition_exec"],
    );
    refused(
        &[
            "replay",
            "--scenario",
            "happy",
            "--seed",
            "1",
            "--schedule",
            r#"[{"at_ms":0,"kind":"partition_exec","for_ms":18446744073709551615}]"#,
        ],
        &["for_ms", "past the end of a run"],
    );

    let dir = scratch("usage");
    let garbage = dir.join("garbage.json");
    std::fs::write(&garbage, "this is not json\n").unwrap();
    refused(
        &["race", garbage.to_str().unwrap()],
        &[garbage.to_str().unwrap(), "race file"],
    );

    let real = std::fs::read(&race_files()[0]).unwrap();
    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, &real[..real.len() / 2]).unwrap();
    refused(
        &["race", truncated.to_str().unwrap()],
        &[truncated.to_str().unwrap(), "race file"],
    );

    let unknown = dir.join("unknown.json");
    std::fs::write(
        &unknown,
        r#"{"scenario": "nope", "seed": 1, "schedule": []}"#,
    )
    .unwrap();
    let mut names = vec![unknown.to_str().unwrap(), "\"nope\""];
    names.extend(&all);
    refused(&["race", unknown.to_str().unwrap()], &names);

    refused(&["race", "/no/such/race.json"], &["/no/such/race.json"]);

    // clap's own errors: exit 2, nothing on stdout.
    for args in [
        &["explore", "--seeds", "0"][..],
        &["frobnicate"],
        &["replay", "--seed", "1"],
    ] {
        let run = sim(args);
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
    }
}

#[test]
fn broken_variants_exist_only_in_builds_with_them() {
    let listed = json(&sim(&["list", "--json"]));
    let built: Vec<&str> = listed["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    if !built.contains(&"cancel-pgid-only") {
        // A build without `--features mutations`.
        assert_eq!(built, ["real"]);
        refused(
            &["explore", "--variant", "cancel-pgid-only", "--seeds", "1"],
            &["cancel-pgid-only", "--features mutations"],
        );
        return;
    }
    // `cargo test` builds the binary with the broken variants (the crate's
    // dev-dependency on itself turns `mutations` on): a broken variant is
    // caught, exit 1, and the JSON's replay command reproduces it.
    let run = sim(&[
        "explore",
        "--variant",
        "cancel-pgid-only",
        "--scenario",
        "cancel_escapes",
        "--seeds",
        "2",
        "--json",
        "--quiet",
    ]);
    assert_eq!(run.code, 1, "{}\n{}", run.stderr, run.stdout);
    assert!(
        run.stderr.contains("VIOLATION scenario=cancel_escapes"),
        "{}",
        run.stderr
    );
    let doc = json(&run);
    assert!(doc["rows"][0]["failing_seeds"].as_u64().unwrap() > 0);
    let replay = doc["failures"][0]["replay"].as_str().unwrap();
    let (flags, schedule) = replay
        .split_once(" -- replay ")
        .and_then(|(_, rest)| rest.split_once(" --schedule '"))
        .unwrap_or_else(|| panic!("unexpected replay command {replay:?}"));
    let mut args: Vec<&str> = vec!["replay"];
    args.extend(flags.split_whitespace());
    args.extend(["--schedule", schedule.trim_end_matches('\'')]);
    let again = sim(&args);
    assert_eq!(again.code, 1, "{args:?}: {}", again.stderr);
    assert!(again.stdout.contains("VIOLATION"), "{}", again.stdout);
}

#[test]
fn help_documents_the_exit_codes() {
    let runs = ["Exit codes:", "  0  ", "  1  ", "  2  "];
    for (args, codes) in [
        (&["--help"][..], &runs[..]),
        (&["explore", "--help"], &runs),
        (&["replay", "--help"], &runs),
        (&["race", "--help"], &runs),
        (&["list", "--help"], &["Exit codes:", "  0  ", "  2  "]),
    ] {
        let run = sim(args);
        assert_eq!(run.code, 0, "{args:?}: {}", run.stderr);
        for code in codes {
            assert!(
                run.stdout.contains(code),
                "{args:?}: no {code:?} in\n{}",
                run.stdout
            );
        }
    }
}

#[test]
fn explore_replays_the_race_corpus_of_its_scenarios_first() {
    // The race files of two_kernels, as the corpus built in holds them.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/races");
    let mine = tether_sim::race::race_files(std::path::Path::new(dir))
        .unwrap()
        .iter()
        .filter(|f| {
            tether_sim::race::Race::load(f.to_str().unwrap())
                .unwrap()
                .scenario
                == "two_kernels"
        })
        .count();
    assert!(mine > 0, "two_kernels has race files");
    let args = ["explore", "--scenario", "two_kernels", "--seeds", "1"];
    let run = sim(&[&args[..], &["--json", "--quiet"]].concat());
    assert_eq!(run.code, 0, "{}", run.stderr);
    let corpus = &json(&run)["corpus"];
    assert_eq!(corpus["replayed"], mine, "{corpus}");
    assert_eq!(corpus["failures"], Value::Array(vec![]));
    let table = sim(&[&args[..], &["--quiet"]].concat());
    assert!(
        table.stdout.contains(&format!("corpus: {mine} race files")),
        "{}",
        table.stdout
    );
    let skipped = sim(&[&args[..], &["--json", "--quiet", "--no-corpus"]].concat());
    assert_eq!(json(&skipped)["corpus"], Value::Null);

    // A broken variant that brings back known races fails on them, exit 1,
    // each with the command that replays its file.
    let listed = json(&sim(&["list", "--json"]));
    if !listed["variants"]
        .as_array()
        .unwrap()
        .contains(&Value::from("cancel-pgid-only"))
    {
        return; // a build without the broken variants (tested above)
    }
    let broken = sim(&[
        &args[..],
        &["--json", "--quiet", "--variant", "cancel-pgid-only"],
    ]
    .concat());
    assert_eq!(broken.code, 1, "{}", broken.stderr);
    let failures = json(&broken)["corpus"]["failures"].clone();
    assert!(!failures.as_array().unwrap().is_empty(), "{failures}");
    assert!(
        broken.stderr.contains("VIOLATION race file sim/races/")
            && broken.stderr.contains("-- race sim/races/"),
        "{}",
        broken.stderr
    );
}
