//! Fuzzes the NTLMSSP message decoders and the AUTHENTICATE verifier directly.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/auth_ntlm.rs");
