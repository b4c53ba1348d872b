//! Differential fuzzing of AES-GMAC signing (`crypto::gmac`): the bulk engine (graviola,
//! with the Signature field's share of the hash taken back out) must give the same tag as
//! the POLYVAL engine for every key, nonce, length and content, including lengths either
//! side of the engine switch. The input gives the key, the nonce and a length; its rest is
//! repeated to fill a message of that length, so short inputs reach long messages.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_smb::crypto::gmac::{GmacKey, BULK_MIN_LEN};

/// Key (16) + nonce (12) + length (3).
const PREFIX: usize = 31;
/// Longest message tried: four times the engine switch, enough to cross many of
/// graviola's 16-block strides and POLYVAL's 4 KiB batches.
const MAX_LEN: usize = 4 * BULK_MIN_LEN;

fuzz_target!(|data: &[u8]| {
    if data.len() <= PREFIX {
        return;
    }
    let (prefix, fill) = data.split_at(PREFIX);
    let mut key = [0u8; 16];
    key.copy_from_slice(&prefix[..16]);
    let mut nonce = [0u8; 12];
    nonce.copy_from_slice(&prefix[16..28]);
    let wanted = u32::from_le_bytes([prefix[28], prefix[29], prefix[30], 0]) as usize;
    let len = 64 + wanted % (MAX_LEN - 63);
    let msg: Vec<u8> = fill.iter().copied().cycle().take(len).collect();
    let small = GmacKey::with_bulk(&key, false);
    let bulk = GmacKey::with_bulk(&key, true);
    assert_eq!(small.tag(&msg, &nonce), bulk.tag(&msg, &nonce), "len {len}");
});
