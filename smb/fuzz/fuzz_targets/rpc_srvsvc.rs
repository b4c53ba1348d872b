//! Fuzzes the srvsvc NDR request decoders and the response encoders they feed.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/rpc_srvsvc.rs");
