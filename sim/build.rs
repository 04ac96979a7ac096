//! Embeds the race files of `races/` (not `races/open/`) in the binary,
//! so `tether-sim explore` replays its corpus of known races wherever it
//! runs (see `src/corpus.rs`).

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("races");
    // A directory: cargo re-runs this when a file in it is added, removed
    // or changed (include_str! tracks the contents of those already in).
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a readable directory entry").path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut out = String::from("&[\n");
    for path in &files {
        let name = path.file_name().expect("a file name").to_string_lossy();
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        );
    }
    out.push_str("]\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets it")).join("corpus_files.rs");
    std::fs::write(&target, out)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", target.display()));
}
