//! GHASH (NIST SP 800-38D) for AES-GMAC signing, computed with POLYVAL (RFC 8452).
//!
//! Why not the `ghash` crate: it reverses each 16-byte block through a cloned generic
//! array inside its per-block callback, and on a signed 8 MiB READ that reversal cost
//! three times the carry-less multiplications themselves (profile of step 17 in
//! `tests/bench/RESULTS.md`). Here the blocks are reversed in batches into a stack
//! buffer and handed to POLYVAL's four-block aggregated path in one call per batch.
//!
//! GHASH_H(X) = ByteReverse(POLYVAL_{mulX(ByteReverse(H))}(ByteReverse(X_1), ...)), per
//! RFC 8452 appendix A.

use polyval::hazmat::FieldElement;
use polyval::universal_hash::UniversalHash;
use polyval::{Block, Polyval};

/// Blocks reversed per POLYVAL call: 4 KiB of stack, a multiple of its four-block stride.
const BATCH_BLOCKS: usize = 256;

/// A running GHASH under one key. Cloning is how a prepared key starts a new message.
#[derive(Clone)]
pub struct Ghash {
    polyval: Polyval,
}

impl Ghash {
    /// GHASH keyed with the hash subkey `h` (for GMAC: AES_K(0^128)).
    pub fn new(h: &[u8; 16]) -> Self {
        let key: Block = FieldElement::from(*h).reverse().mulx().into();
        Ghash {
            polyval: Polyval::new(&key),
        }
    }

    /// Absorbs `data`, zero-padded to a whole block (GCM pads the AAD as a whole, so this
    /// equals one call over the concatenation as long as every call but the last is given
    /// a multiple of 16 bytes).
    pub fn update_padded(&mut self, data: &[u8]) {
        let mut batch = [Block::default(); BATCH_BLOCKS];
        let mut chunks = data.chunks_exact(16);
        loop {
            let mut n = 0;
            for (slot, chunk) in batch.iter_mut().zip(chunks.by_ref()) {
                reverse_into(slot, chunk);
                n += 1;
            }
            // `n` counts the slots the zip above filled, so `get` always finds them.
            let Some(filled) = batch.get(..n).filter(|f| !f.is_empty()) else {
                break;
            };
            self.polyval.update(filled);
            if n < BATCH_BLOCKS {
                break;
            }
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 16];
            for (l, r) in last.iter_mut().zip(rest) {
                *l = *r;
            }
            reverse_into(&mut batch[0], &last);
            self.polyval.update(&batch[..1]);
        }
    }

    /// The hash value, in GHASH's byte order.
    pub fn finalize(self) -> [u8; 16] {
        let mut out: [u8; 16] = self.polyval.finalize().into();
        out.reverse();
        out
    }
}

/// Writes the 16 bytes of `chunk` into `slot` in reverse order.
#[inline(always)]
fn reverse_into(slot: &mut Block, chunk: &[u8]) {
    let mut word = [0u8; 16];
    word.copy_from_slice(chunk);
    slot.copy_from_slice(&u128::from_be_bytes(word).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal to the `ghash` crate for lengths around every boundary: a block, the batch
    /// and the four-block stride.
    #[test]
    fn equals_the_reference_ghash_across_block_and_batch_boundaries() {
        let h = [0x5au8; 16];
        let data: Vec<u8> = (0..(BATCH_BLOCKS * 16 * 3 + 100))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let lens = [
            0,
            1,
            15,
            16,
            17,
            63,
            64,
            65,
            BATCH_BLOCKS * 16 - 1,
            BATCH_BLOCKS * 16,
            BATCH_BLOCKS * 16 + 1,
            BATCH_BLOCKS * 16 * 2 + 48,
            data.len(),
        ];
        for len in lens {
            let mut ours = Ghash::new(&h);
            ours.update_padded(&data[..64.min(len)]);
            ours.update_padded(&data[64.min(len)..len]);
            let mut reference = ghash::GHash::new(&h.into());
            reference.update_padded(&data[..64.min(len)]);
            reference.update_padded(&data[64.min(len)..len]);
            let expected: [u8; 16] = reference.finalize().into();
            assert_eq!(ours.finalize(), expected, "length {len}");
        }
    }

    /// The GCM specification's test case 2 hash (key 0, one zero block): GHASH of the
    /// ciphertext and lengths gives the published value.
    #[test]
    fn gcm_spec_test_case_2() {
        // H = AES_0(0) = 66e94bd4ef8a2c3b884cfa59ca342b2e; C = 0388dace60b6a392f328c2b971b2fe78;
        // GHASH(H, {}, C) = f38cbb1ad69223dcc3457ae5b6b0f885.
        let h = hex("66e94bd4ef8a2c3b884cfa59ca342b2e");
        let c = hex("0388dace60b6a392f328c2b971b2fe78");
        let mut lens = [0u8; 16];
        lens[8..].copy_from_slice(&128u64.to_be_bytes());
        let mut g = Ghash::new(&h.try_into().unwrap());
        g.update_padded(&c);
        g.update_padded(&lens);
        assert_eq!(
            g.finalize().to_vec(),
            hex("f38cbb1ad69223dcc3457ae5b6b0f885")
        );
    }

    fn hex(s: &str) -> Vec<u8> {
        ::hex::decode(s).unwrap()
    }
}
