//! Feeds arbitrary bytes to every decoder a network client can reach before authentication
//! succeeds or after: framing header, the placement of a large message's WRITE data, SMB1
//! NEGOTIATE upgrade, transform header, compound split, each command's request body
//! (OPLOCK_BREAK acknowledgments included), and the SET_INFO / IOCTL / CREATE payload
//! parsers (the lease and durable-handle create contexts among them).
//! Any panic, overflow or out-of-bounds access is a bug. Seeds: `smb/fuzz/seeds/` (messages
//! captured from smbclient, impacket and smbprotocol against quarry).
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/request_decoder.rs");
