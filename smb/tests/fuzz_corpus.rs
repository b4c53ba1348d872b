//! Replays every committed fuzz corpus of `smb/fuzz/` (`fuzz/corpus/<target>/`) (and the captured messages in
//! `fuzz/seeds/` for the request decoder)
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

mod aapl_context {
    include!("../fuzz/cases/aapl_context.rs");
}
mod auth_ntlm {
    include!("../fuzz/cases/auth_ntlm.rs");
}
mod auth_spnego {
    include!("../fuzz/cases/auth_spnego.rs");
}
mod gmac_engines {
    include!("../fuzz/cases/gmac_engines.rs");
}
mod info_buffers {
    include!("../fuzz/cases/info_buffers.rs");
}
mod request_decoder {
    include!("../fuzz/cases/request_decoder.rs");
}
mod rpc_pipe {
    include!("../fuzz/cases/rpc_pipe.rs");
}
mod rpc_srvsvc {
    include!("../fuzz/cases/rpc_srvsvc.rs");
}
mod security_descriptor {
    include!("../fuzz/cases/security_descriptor.rs");
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
fn aapl_context_corpus() {
    replay(&["fuzz/corpus/aapl_context"], aapl_context::run);
}

#[test]
fn auth_ntlm_corpus() {
    replay(&["fuzz/corpus/auth_ntlm"], auth_ntlm::run);
}

#[test]
fn auth_spnego_corpus() {
    replay(&["fuzz/corpus/auth_spnego"], auth_spnego::run);
}

#[test]
fn gmac_engines_corpus() {
    replay(&["fuzz/corpus/gmac_engines"], gmac_engines::run);
}

#[test]
fn info_buffers_corpus() {
    replay(&["fuzz/corpus/info_buffers"], info_buffers::run);
}

#[test]
fn request_decoder_corpus() {
    replay(
        &["fuzz/corpus/request_decoder", "fuzz/seeds"],
        request_decoder::run,
    );
}

#[test]
fn rpc_pipe_corpus() {
    replay(&["fuzz/corpus/rpc_pipe"], rpc_pipe::run);
}

#[test]
fn rpc_srvsvc_corpus() {
    replay(&["fuzz/corpus/rpc_srvsvc"], rpc_srvsvc::run);
}

#[test]
fn security_descriptor_corpus() {
    replay(
        &["fuzz/corpus/security_descriptor"],
        security_descriptor::run,
    );
}
