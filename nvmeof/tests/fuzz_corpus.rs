//! Replays every committed fuzz corpus of `nvmeof/fuzz/` (`fuzz/corpus/<target>/`)
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

mod data_head {
    include!("../fuzz/cases/data_head.rs");
}
mod pdu_decode {
    include!("../fuzz/cases/pdu_decode.rs");
}
mod queue_bytes {
    include!("../fuzz/cases/queue_bytes.rs");
}
mod rdma_private_data {
    include!("../fuzz/cases/rdma_private_data.rs");
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
fn data_head_corpus() {
    replay(&["fuzz/corpus/data_head"], data_head::run);
}

#[test]
fn pdu_decode_corpus() {
    replay(&["fuzz/corpus/pdu_decode"], pdu_decode::run);
}

#[test]
fn queue_bytes_corpus() {
    replay(&["fuzz/corpus/queue_bytes"], queue_bytes::run);
}

#[test]
fn rdma_private_data_corpus() {
    replay(&["fuzz/corpus/rdma_private_data"], rdma_private_data::run);
}
