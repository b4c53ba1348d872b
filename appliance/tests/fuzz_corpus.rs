//! Replays every committed fuzz corpus of `appliance/fuzz/` (`fuzz/corpus/<target>/`)
//! through the fuzz targets' own bodies (`fuzz/cases/<target>.rs`, which the targets include),
//! on stable Rust, in every test run. `cargo fuzz` needs nightly and runs on demand; this keeps
//! every input it ever found interesting passing between fuzzing runs, with the targets' own
//! checks (no panic, no out-of-bounds, their assertions).

// A fuzz target fails by panicking: its `expect`s and assertions are its checks.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

/// Turns a case file's `fuzz_target!(|data: &[u8]| { ... })` into `pub fn run(data: &[u8])`.
macro_rules! fuzz_target {
    (|$data:ident: &[u8]| $body:block) => {
        pub fn run($data: &[u8]) $body
    };
}

mod fanotify_events {
    include!("../fuzz/cases/fanotify_events.rs");
}

/// Runs `run` on every file of each of `dirs` (relative to the crate), naming the input
/// that fails; an empty or missing corpus fails too.
fn replay(dirs: &[&str], run: fn(&[u8])) {
    let mut inputs = 0;
    for dir in dirs {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let mut paths: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("corpus entry").path())
            .collect();
        paths.sort();
        for path in paths {
            let data = std::fs::read(&path).expect("corpus file");
            let outcome = std::panic::catch_unwind(|| run(&data));
            assert!(outcome.is_ok(), "{} failed its fuzz target", path.display());
            inputs += 1;
        }
    }
    assert!(inputs > 0, "no inputs in {dirs:?}");
}

#[test]
fn fanotify_events_corpus() {
    replay(&["fuzz/corpus/fanotify_events"], fanotify_events::run);
}
