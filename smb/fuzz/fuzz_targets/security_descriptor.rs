//! Fuzzes the self-relative security descriptor decoder (SET_INFO, the `SecD` create
//! context and stored descriptors all go through it) and the logic that consumes what it
//! accepts: re-encoding must round-trip, and the access check, merge and inheritance must
//! not panic on any descriptor.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/security_descriptor.rs");
