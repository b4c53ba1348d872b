//! Differential: the header of an H2CData PDU or of a command capsule with data, decoded
//! alone (`decode_data_head`, what the transport uses to read large write data in place),
//! must agree with `decode` of the complete PDU, on any prefix of it. Whenever the head is accepted, the full decode accepts the same
//! fields or fails only on the data digest, which the transport checks itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/data_head.rs");
