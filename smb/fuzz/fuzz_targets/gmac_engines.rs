//! Differential fuzzing of AES-GMAC signing (`crypto::gmac`): the bulk engine (graviola,
//! with the Signature field's share of the hash taken back out) must give the same tag as
//! the POLYVAL engine for every key, nonce, length and content, including lengths either
//! side of the engine switch, and signing the message in two parts (`tag_parts`, a READ
//! response's head and its shared data) must give the tag of the whole. The input gives the
//! key, the nonce, a length and where to split; its rest is repeated to fill a message of
//! that length, so short inputs reach long messages.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/gmac_engines.rs");
