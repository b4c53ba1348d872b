//! AES-128-GMAC (RFC 4543) over a whole SMB2 message with its Signature field taken as zero:
//! the SMB 3.1.1 signing algorithm of MS-SMB2 3.1.4.1.
//!
//! Two engines compute the same tag, chosen by message length:
//! - Small messages go through [`Ghash`] (POLYVAL, 128-bit PCLMULQDQ, four-block aggregation)
//!   over a zeroed copy of the header and then the body. It costs the least per call.
//! - Large messages (a READ response, a WRITE request) go through graviola's AES-GCM with the
//!   message as additional data and no plaintext. Graviola hashes additional data with eight-block
//!   (AVX2) or sixteen-block (AVX-512 VPCLMULQDQ) aggregation. On 64 distinct 8 MiB messages
//!   on the bench machine it ran at 9-18 GiB/s, against 2.3-3.4 GiB/s for POLYVAL; GHASH
//!   was 31-46% of a signed READ's server CPU (RESULTS.md, step 21). `ring` has no such path:
//!   it hashes additional data one block at a time (1.9 GiB/s).
//!
//! Graviola hashes the message as it lies, Signature field included. GHASH is linear, so the
//! field's contribution is added back out: with N blocks hashed (the padded message, then the
//! length block), the field is block 4 and was multiplied by H^(N-3). Verification therefore
//! needs neither a mutable nor a copied buffer, and signing zeroes the field first to skip the
//! correction.

use std::sync::Arc;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use polyval::hazmat::FieldElement;

use super::ghash::Ghash;
use super::signing::{SIGNATURE_LEN, SIGNATURE_OFFSET, SMB2_HEADER_LEN};

/// The Signature field is the fourth 16-byte block of the message.
const SIGNATURE_BLOCK_INDEX: u64 = 3;
/// Messages from this length on use the bulk engine. Below it, graviola's fixed cost per call
/// (about 0.3 µs: the counter block, register clearing) and the Signature correction on
/// verification (about 40 field multiplications, under 1 µs) outweigh its faster hashing.
pub const BULK_MIN_LEN: usize = 8 * 1024;

/// A prepared GMAC key: the AES key schedule, the GHASH subkey H, and the bulk engine when the
/// CPU has what it needs. Built once per session key; cloning shares the bulk tables.
#[derive(Clone)]
pub struct GmacKey {
    aes: Aes128,
    ghash: Ghash,
    h: [u8; 16],
    bulk: Option<Arc<BulkGmac>>,
}

impl GmacKey {
    /// Prepares `key`, with the bulk engine if this CPU supports it.
    pub fn new(key: &[u8; 16]) -> Self {
        Self::with_bulk(key, bulk_supported())
    }

    /// Prepares `key` with (if `bulk` and the CPU supports it) or without the bulk engine.
    /// Tests use this to compare the engines.
    pub fn with_bulk(key: &[u8; 16], bulk: bool) -> Self {
        let aes = Aes128::new(key.into());
        let mut h = aes::Block::default();
        aes.encrypt_block(&mut h);
        let h: [u8; 16] = h.into();
        GmacKey {
            aes,
            ghash: Ghash::new(&h),
            h,
            bulk: (bulk && bulk_supported()).then(|| Arc::new(BulkGmac::new(key))),
        }
    }

    /// Whether messages of [`BULK_MIN_LEN`] and more take the bulk engine.
    pub fn has_bulk(&self) -> bool {
        self.bulk.is_some()
    }

    /// The tag of `msg` (at least the 64-byte header; the caller checks) as if its Signature
    /// field were zero, under the 12-byte `nonce`.
    pub fn tag(&self, msg: &[u8], nonce: &[u8; 12]) -> [u8; 16] {
        match (&self.bulk, msg.first_chunk::<SMB2_HEADER_LEN>()) {
            (Some(bulk), Some(header)) if msg.len() >= BULK_MIN_LEN => {
                self.tag_bulk(bulk, msg, header, nonce)
            }
            _ => self.tag_small(msg, nonce),
        }
    }

    /// The tag of the message `head` followed by `tail`, as [`GmacKey::tag`] gives for the
    /// two joined. `head` holds the header; when its length is a multiple of 16 (a READ
    /// response's header and fixed part: 80 bytes) the parts are hashed where they lie,
    /// else they are joined first.
    pub fn tag_parts(&self, head: &[u8], tail: &[u8], nonce: &[u8; 12]) -> [u8; 16] {
        if tail.is_empty() {
            return self.tag(head, nonce);
        }
        let (header, head_rest) = match head.split_first_chunk::<SMB2_HEADER_LEN>() {
            Some(parts) if head.len().is_multiple_of(16) => parts,
            _ => {
                let mut joined = Vec::with_capacity(head.len() + tail.len());
                joined.extend_from_slice(head);
                joined.extend_from_slice(tail);
                return self.tag(&joined, nonce);
            }
        };
        let total = (head.len() + tail.len()) as u64;
        // The head, whole blocks, with the Signature field zeroed.
        let mut gh = self.ghash.clone();
        gh.update_padded(&zeroed_header(header));
        gh.update_padded(head_rest);
        match &self.bulk {
            Some(bulk) if tail.len() >= BULK_MIN_LEN => {
                // GHASH is linear. The bulk engine hashes `tail` as a message of its own:
                // its blocks weigh what they weigh at the end of the whole message, so what
                // it lacks is the head's blocks, each weighted by a further H^(m+1) (m: the
                // tail's padded blocks, plus its length block), and the whole message's
                // length block instead of the tail's (both weigh H).
                let tag = bulk.tag(tail, nonce);
                let weight = ghash_pow(&self.h, (tail.len() as u64).div_ceil(16) + 1);
                let head_part = ghash_mul(&gh.finalize(), &weight);
                let lens = ghash_mul(
                    &xor(&length_block(tail.len() as u64), &length_block(total)),
                    &self.h,
                );
                xor(&xor(&tag, &head_part), &lens)
            }
            _ => {
                gh.update_padded(tail);
                gh.update_padded(&length_block(total));
                self.finish(gh.finalize(), nonce)
            }
        }
    }

    /// GHASH over a zeroed copy of the header, then the body; the tag is that XOR E_K(J0).
    fn tag_small(&self, msg: &[u8], nonce: &[u8; 12]) -> [u8; 16] {
        // A message shorter than a header (callers check) is all head and no body.
        let (head, body) = msg.split_at_checked(SMB2_HEADER_LEN).unwrap_or((msg, &[]));
        let header = zeroed_header(msg);
        let mut gh = self.ghash.clone();
        gh.update_padded(header.get(..head.len()).unwrap_or(&header));
        gh.update_padded(body);
        // Exactly one block: no padding added.
        gh.update_padded(&length_block(msg.len() as u64));
        self.finish(gh.finalize(), nonce)
    }

    /// The tag from the GHASH value `s`: `s` XOR E_K(J0), J0 being the nonce and counter 1.
    fn finish(&self, s: [u8; 16], nonce: &[u8; 12]) -> [u8; 16] {
        let mut counter = [0u8; 16];
        counter[..12].copy_from_slice(nonce);
        counter[15] = 1;
        let mut j0 = aes::Block::from(counter);
        self.aes.encrypt_block(&mut j0);
        xor(&s, &j0.into())
    }

    /// The bulk engine's tag over `msg` as it lies, with the Signature field's contribution
    /// taken back out. `header` is `msg`'s first [`SMB2_HEADER_LEN`] bytes.
    fn tag_bulk(
        &self,
        bulk: &BulkGmac,
        msg: &[u8],
        header: &[u8; SMB2_HEADER_LEN],
        nonce: &[u8; 12],
    ) -> [u8; 16] {
        let mut tag = bulk.tag(msg, nonce);
        let mut field = [0u8; 16];
        field.copy_from_slice(&header[SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN]);
        if field != [0u8; 16] {
            // N = padded blocks + the length block; block i (0-based) weighs H^(N - i).
            let blocks = (msg.len() as u64).div_ceil(16) + 1;
            let weight = ghash_pow(&self.h, blocks - SIGNATURE_BLOCK_INDEX);
            let correction = ghash_mul(&field, &weight);
            for (t, c) in tag.iter_mut().zip(correction) {
                *t ^= c;
            }
        }
        tag
    }
}

/// GCM's length block for `len` bytes of additional data and no ciphertext.
fn length_block(len: u64) -> [u8; 16] {
    let mut block = [0u8; 16];
    block[..8].copy_from_slice(&len.wrapping_mul(8).to_be_bytes());
    block
}

/// The first [`SMB2_HEADER_LEN`] bytes of `msg` (zero past its end when shorter) with the
/// Signature field zeroed.
fn zeroed_header(msg: &[u8]) -> [u8; SMB2_HEADER_LEN] {
    let mut copy = [0u8; SMB2_HEADER_LEN];
    for (c, m) in copy.iter_mut().zip(msg) {
        *c = *m;
    }
    copy[SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN].fill(0);
    copy
}

/// Bytewise XOR of two blocks.
fn xor(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (o, (x, y)) in out.iter_mut().zip(a.iter().zip(b.iter())) {
        *o = x ^ y;
    }
    out
}

/// Whether graviola's requirements hold on this CPU. Graviola asserts them on every call, so
/// it must never be reached without this check.
fn bulk_supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("adx")
            && std::arch::is_x86_feature_detected!("avx")
            && std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("neon")
            && std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
            && std::arch::is_aarch64_feature_detected!("sha2")
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// Graviola's AES-GCM, used only as GMAC (message as additional data, no plaintext).
struct BulkGmac {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    gcm: graviola::aead::AesGcm,
}

impl BulkGmac {
    fn new(key: &[u8; 16]) -> Self {
        BulkGmac {
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            gcm: graviola::aead::AesGcm::new(key),
        }
    }

    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    fn tag(&self, msg: &[u8], nonce: &[u8; 12]) -> [u8; 16] {
        let mut tag = [0u8; 16];
        self.gcm.encrypt(nonce, msg, &mut [], &mut tag);
        tag
    }

    /// Never built on other architectures ([`bulk_supported`] is false there).
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn tag(&self, _msg: &[u8], _nonce: &[u8; 12]) -> [u8; 16] {
        [0u8; 16]
    }
}

/// GHASH's field product of two blocks in GHASH byte order, through POLYVAL (RFC 8452
/// appendix A): a·b = ByteReverse(dot(ByteReverse(a), mulX(ByteReverse(b)))).
fn ghash_mul(a: &[u8; 16], b: &[u8; 16]) -> [u8; 16] {
    let product = FieldElement::from(*a).reverse() * FieldElement::from(*b).reverse().mulx();
    let mut out = [0u8; 16];
    out.copy_from_slice(&polyval::Block::from(product));
    out.reverse();
    out
}

/// `h` to the power `e` (e ≥ 1) in GHASH's field, by square and multiply. The exponent comes
/// from the message length, which is public; the multiplications are constant time in `h`.
fn ghash_pow(h: &[u8; 16], e: u64) -> [u8; 16] {
    let mut result = *h;
    for bit in (0..(63 - e.leading_zeros())).rev() {
        result = ghash_mul(&result, &result);
        if e >> bit & 1 == 1 {
            result = ghash_mul(&result, h);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::Aes128Gcm;

    /// Where the Signature field lies in the SMB2 header.
    const SIGNATURE: std::ops::Range<usize> = SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN;

    /// The reference: AES-GCM (RustCrypto) over a zeroed copy, as additional data.
    fn reference_tag(key: &[u8; 16], msg: &[u8], nonce: &[u8; 12]) -> [u8; 16] {
        let mut zeroed = msg.to_vec();
        zeroed[SIGNATURE].fill(0);
        let gcm = Aes128Gcm::new_from_slice(key).unwrap();
        let mut empty: Vec<u8> = Vec::new();
        let tag = gcm
            .encrypt_in_place_detached(nonce.into(), &zeroed, &mut empty)
            .unwrap();
        tag.into()
    }

    fn message(len: usize, seed: u32) -> Vec<u8> {
        (0..len)
            .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed).to_le_bytes()[1])
            .collect()
    }

    #[test]
    fn field_power_and_product_agree_with_ghash() {
        let h = *b"\x66\xe9\x4b\xd4\xef\x8a\x2c\x3b\x88\x4c\xfa\x59\xca\x34\x2b\x2e";
        let x = *b"0123456789abcdef";
        // One block through GHASH under key h is x·h.
        let mut gh = Ghash::new(&h);
        gh.update_padded(&x);
        assert_eq!(ghash_mul(&x, &h), gh.finalize());
        let mut by_hand = h;
        for e in 1..=40u64 {
            assert_eq!(ghash_pow(&h, e), by_hand, "h^{e}");
            by_hand = ghash_mul(&by_hand, &h);
        }
    }

    /// Both engines equal RustCrypto's AES-GCM for lengths around the engine switch and
    /// block boundaries, whatever the Signature field holds.
    #[test]
    fn both_engines_match_aes_gcm_with_any_signature_field() {
        let key = [0x5au8; 16];
        let nonce = *b"\x01\x02\x03\x04\x05\x06\x07\x08\x01\x00\x00\x00";
        let small = GmacKey::with_bulk(&key, false);
        let bulk = GmacKey::with_bulk(&key, true);
        assert!(!small.has_bulk());
        if !bulk.has_bulk() {
            eprintln!("this CPU lacks what graviola needs: only the small engine is compared");
        }
        let lens = [
            64,
            65,
            79,
            80,
            200,
            BULK_MIN_LEN - 1,
            BULK_MIN_LEN,
            BULK_MIN_LEN + 1,
            65_536 + 7,
            (1 << 20) + 5,
            8 << 20,
        ];
        for (i, len) in lens.into_iter().enumerate() {
            let mut msg = message(len, i as u32);
            for field in [[0u8; 16], [0xffu8; 16], *b"signature field!"] {
                msg[SIGNATURE].copy_from_slice(&field);
                let want = reference_tag(&key, &msg, &nonce);
                assert_eq!(small.tag(&msg, &nonce), want, "small engine, len {len}");
                assert_eq!(bulk.tag(&msg, &nonce), want, "bulk engine, len {len}");
            }
        }
    }

    /// A message shorter than a header (callers refuse one; the tag stays defined) gets
    /// AES-GCM's tag of the message with its part of the Signature field zeroed.
    #[test]
    fn a_message_shorter_than_a_header_has_the_tag_of_its_zeroed_copy() {
        let key = [0x77u8; 16];
        let nonce = [5u8; 12];
        let gcm = Aes128Gcm::new_from_slice(&key).unwrap();
        for len in [0, 1, 15, 16, 17, 47, 48, 49, 63] {
            let msg = message(len, len as u32);
            let mut zeroed = msg.clone();
            for b in zeroed.iter_mut().skip(SIGNATURE_OFFSET) {
                *b = 0;
            }
            let want: [u8; 16] = gcm
                .encrypt_in_place_detached((&nonce).into(), &zeroed, &mut Vec::new())
                .unwrap()
                .into();
            for k in [
                GmacKey::with_bulk(&key, false),
                GmacKey::with_bulk(&key, true),
            ] {
                assert_eq!(k.tag(&msg, &nonce), want, "len {len}");
            }
        }
    }

    /// A message signed in two parts (a READ response's 80-byte head and its shared data)
    /// gets the tag of the joined message, through either engine, for tails around the
    /// engine switch and block boundaries, whatever the Signature field holds; a head whose
    /// length is not a multiple of 16 is joined first and agrees too.
    #[test]
    fn a_message_in_two_parts_has_the_tag_of_the_joined_message() {
        let key = [0x3cu8; 16];
        let nonce = *b"\x09\x08\x07\x06\x05\x04\x03\x02\x01\x00\x00\x00";
        let small = GmacKey::with_bulk(&key, false);
        let bulk = GmacKey::with_bulk(&key, true);
        for head_len in [64, 80, 81] {
            for (i, tail_len) in [
                0,
                1,
                15,
                16,
                17,
                BULK_MIN_LEN - 1,
                BULK_MIN_LEN,
                BULK_MIN_LEN + 9,
                (1 << 20) + 3,
            ]
            .into_iter()
            .enumerate()
            {
                let mut msg = message(head_len + tail_len, (head_len * 31 + i) as u32);
                for field in [[0u8; 16], *b"signature field!"] {
                    msg[SIGNATURE].copy_from_slice(&field);
                    let want = reference_tag(&key, &msg, &nonce);
                    let (head, tail) = msg.split_at(head_len);
                    for (engine, k) in [("small", &small), ("bulk", &bulk)] {
                        assert_eq!(
                            k.tag_parts(head, tail, &nonce),
                            want,
                            "{engine} engine, head {head_len}, tail {tail_len}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bulk_tag_detects_a_changed_byte_anywhere() {
        let key = [9u8; 16];
        let nonce = [3u8; 12];
        let k = GmacKey::new(&key);
        let msg = message(3 * BULK_MIN_LEN + 11, 77);
        let tag = k.tag(&msg, &nonce);
        for at in [0, 47, 64, BULK_MIN_LEN, msg.len() - 1] {
            let mut bad = msg.clone();
            bad[at] ^= 0x10;
            assert_ne!(k.tag(&bad, &nonce), tag, "byte {at}");
        }
        let mut longer = msg.clone();
        longer.push(0);
        assert_ne!(k.tag(&longer, &nonce), tag, "zero byte appended");
    }
}
