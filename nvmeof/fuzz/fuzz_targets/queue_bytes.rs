//! Feeds arbitrary bytes to a target queue as a host would (ICReq, Connect, commands,
//! data), running storage synchronously on a RAM disk. Nothing may panic, and the
//! queue must never ask to buffer more than its limits.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/queue_bytes.rs");
