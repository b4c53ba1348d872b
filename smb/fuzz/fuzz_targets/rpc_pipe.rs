//! Fuzzes the srvsvc pipe: the input is written in chunks whose sizes come from the data, and
//! replies are drained with small reads, exercising reassembly and message-mode reads.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/rpc_pipe.rs");
