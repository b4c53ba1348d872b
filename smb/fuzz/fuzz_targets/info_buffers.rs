//! Fuzzes the decoders of client-supplied file information that is not a whole request:
//! the FILE_FULL_EA_INFORMATION chains of SET_INFO and the `ExtA` create context (which
//! must re-encode to what they decoded), the `file:stream:$DATA` name syntax, and the
//! previous-version inputs (`@GMT-` tokens in paths, the timewarp context's FILETIME).
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/info_buffers.rs");
