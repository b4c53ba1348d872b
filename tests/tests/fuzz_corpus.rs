//! Replays every committed fuzz corpus (`<crate>/fuzz/corpus/<target>/` of `smb`, `nvmeof`
//! and `appliance`, and the captured messages in `smb/fuzz/seeds/` for the SMB request
//! decoder) through the fuzz targets' own bodies (`<crate>/fuzz/cases/<target>.rs`, which the
//! targets include too), on stable Rust, in every test run. `cargo fuzz` needs nightly and
//! runs on demand; this keeps every input it ever found interesting passing between fuzzing
//! runs, under the targets' own checks (no panic, no out-of-bounds, their assertions).

// A fuzz target fails by panicking: its `expect`s and assertions are its checks.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::Path;

/// Turns a case file's `fuzz_target!(|data: &[u8]| { ... })` into `pub fn run(data: &[u8])`.
macro_rules! fuzz_target {
    (|$data:ident: &[u8]| $body:block) => {
        pub fn run($data: &[u8]) $body
    };
}

mod smb_aapl_context {
    include!("../../smb/fuzz/cases/aapl_context.rs");
}
mod smb_auth_ntlm {
    include!("../../smb/fuzz/cases/auth_ntlm.rs");
}
mod smb_auth_spnego {
    include!("../../smb/fuzz/cases/auth_spnego.rs");
}
mod smb_gmac_engines {
    include!("../../smb/fuzz/cases/gmac_engines.rs");
}
mod smb_info_buffers {
    include!("../../smb/fuzz/cases/info_buffers.rs");
}
mod smb_request_decoder {
    include!("../../smb/fuzz/cases/request_decoder.rs");
}
mod smb_rpc_pipe {
    include!("../../smb/fuzz/cases/rpc_pipe.rs");
}
mod smb_rpc_srvsvc {
    include!("../../smb/fuzz/cases/rpc_srvsvc.rs");
}
mod smb_security_descriptor {
    include!("../../smb/fuzz/cases/security_descriptor.rs");
}
mod nvmeof_data_head {
    include!("../../nvmeof/fuzz/cases/data_head.rs");
}
mod nvmeof_pdu_decode {
    include!("../../nvmeof/fuzz/cases/pdu_decode.rs");
}
mod nvmeof_queue_bytes {
    include!("../../nvmeof/fuzz/cases/queue_bytes.rs");
}
mod nvmeof_rdma_private_data {
    include!("../../nvmeof/fuzz/cases/rdma_private_data.rs");
}
mod appliance_fanotify_events {
    include!("../../appliance/fuzz/cases/fanotify_events.rs");
}

/// Runs `run` on every file of each of `dirs` (relative to the workspace), naming the
/// input that fails; an empty or missing corpus fails too.
fn replay(dirs: &[&str], run: fn(&[u8])) {
    let mut inputs = 0;
    for dir in dirs {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(dir);
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
fn smb_aapl_context() {
    replay(&["smb/fuzz/corpus/aapl_context"], smb_aapl_context::run);
}

#[test]
fn smb_auth_ntlm() {
    replay(&["smb/fuzz/corpus/auth_ntlm"], smb_auth_ntlm::run);
}

#[test]
fn smb_auth_spnego() {
    replay(&["smb/fuzz/corpus/auth_spnego"], smb_auth_spnego::run);
}

#[test]
fn smb_gmac_engines() {
    replay(&["smb/fuzz/corpus/gmac_engines"], smb_gmac_engines::run);
}

#[test]
fn smb_info_buffers() {
    replay(&["smb/fuzz/corpus/info_buffers"], smb_info_buffers::run);
}

#[test]
fn smb_request_decoder() {
    replay(
        &["smb/fuzz/corpus/request_decoder", "smb/fuzz/seeds"],
        smb_request_decoder::run,
    );
}

#[test]
fn smb_rpc_pipe() {
    replay(&["smb/fuzz/corpus/rpc_pipe"], smb_rpc_pipe::run);
}

#[test]
fn smb_rpc_srvsvc() {
    replay(&["smb/fuzz/corpus/rpc_srvsvc"], smb_rpc_srvsvc::run);
}

#[test]
fn smb_security_descriptor() {
    replay(
        &["smb/fuzz/corpus/security_descriptor"],
        smb_security_descriptor::run,
    );
}

#[test]
fn nvmeof_data_head() {
    replay(&["nvmeof/fuzz/corpus/data_head"], nvmeof_data_head::run);
}

#[test]
fn nvmeof_pdu_decode() {
    replay(&["nvmeof/fuzz/corpus/pdu_decode"], nvmeof_pdu_decode::run);
}

#[test]
fn nvmeof_queue_bytes() {
    replay(&["nvmeof/fuzz/corpus/queue_bytes"], nvmeof_queue_bytes::run);
}

#[test]
fn nvmeof_rdma_private_data() {
    replay(
        &["nvmeof/fuzz/corpus/rdma_private_data"],
        nvmeof_rdma_private_data::run,
    );
}

#[test]
fn appliance_fanotify_events() {
    replay(
        &["appliance/fuzz/corpus/fanotify_events"],
        appliance_fanotify_events::run,
    );
}
