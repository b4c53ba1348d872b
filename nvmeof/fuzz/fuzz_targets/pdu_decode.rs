//! Fuzzes framing + decoding of one PDU under every digest setting; a decoded PDU
//! must re-encode to a PDU that decodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/pdu_decode.rs");
