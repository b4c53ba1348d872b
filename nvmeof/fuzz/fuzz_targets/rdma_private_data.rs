//! Fuzzes the NVMe/RDMA RDMA-CM private-data codec (what a host sends in its connect
//! request, and the accept/reject a target answers): parsing never panics, a parsed
//! request re-encodes to the same first bytes, and whatever `validate` accepts stays
//! within the explicit queue-size limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/rdma_private_data.rs");
