// The body of the fuzz target `gmac_engines` (`../fuzz_targets/gmac_engines.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::crypto::gmac::{GmacKey, BULK_MIN_LEN};

/// Key (16) + nonce (12) + length (3) + split (1).
const PREFIX: usize = 32;
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
    let whole = small.tag(&msg, &nonce);
    assert_eq!(whole, bulk.tag(&msg, &nonce), "len {len}");
    // Even split bytes give heads of whole blocks (hashed where they lie), odd ones any
    // head length (joined first); heads shorter than the header are joined too.
    let at = usize::from(prefix[31]);
    let split = if at % 2 == 0 { 64 + at / 2 * 16 } else { at / 2 }.min(len);
    let (head, tail) = msg.split_at(split);
    for k in [&small, &bulk] {
        assert_eq!(k.tag_parts(head, tail, &nonce), whole, "len {len}, split {split}");
    }
});
