//! Fuzzes the Apple `AAPL` create context: the request decoder the server runs on client
//! bytes (never panics; a decoded query survives its own encoding) and the reply decoder
//! (a decoded reply survives its own encoding; Reserved fields are not kept), and the
//! compression of a client-written `AFP_AfpInfo` stream into a listing's FinderInfo.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/aapl_context.rs");
