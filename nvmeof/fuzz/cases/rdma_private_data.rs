// The body of the fuzz target `rdma_private_data` (`../fuzz_targets/rdma_private_data.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_nvmeof::rdma::wire::{self, CmAccept, CmRequest};

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = CmRequest::parse(data) {
        let again = req.encode();
        assert_eq!(CmRequest::parse(&again), Ok(req));
        if let Ok(sizes) = req.validate() {
            assert!(sizes.recv_entries >= 2);
            assert!(sizes.send_entries >= 1);
        }
    }
    if let Some(acc) = CmAccept::parse(data) {
        assert_eq!(CmAccept::parse(&acc.encode()), Some(acc));
    }
    let _ = wire::parse_reject(data);
});
