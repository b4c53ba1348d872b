//! Fuzzes the SPNEGO/NTLMSSP server state machine: the input is split at 0xFF 0x00 0xFF into
//! up to three client tokens fed to one exchange, so later states are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/auth_spnego.rs");
