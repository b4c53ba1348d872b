//! Fuzzes the NVMe/RDMA RDMA-CM private-data codec (what a host sends in its connect
//! request, and the accept/reject a target answers): parsing never panics, a parsed
//! request re-encodes to the same first bytes, and whatever `validate` accepts stays
//! within the explicit queue-size limits.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
