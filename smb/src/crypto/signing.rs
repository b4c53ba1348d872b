//! Signing and verifying whole SMB2 messages (MS-SMB2 3.1.4.1, 3.1.5.1).
//!
//! The signature covers the entire message (header, body and, inside a compound, the padding
//! up to the next message) with the 16-byte Signature field taken as zero. Verification never
//! needs a mutable or copied buffer: the MAC is streamed over header-with-zeroed-signature and
//! then the rest.

use aes::cipher::KeyInit;
use aes::Aes128;
use cmac::{Cmac, Mac};
use ring::hmac;

use super::gmac::GmacKey;
use super::{CryptoError, SigningAlgorithm};

/// Length of the signature field (bytes).
pub const SIGNATURE_LEN: usize = 16;
/// Length of the SMB2 sync/async header that every signed message starts with.
pub use crate::proto::header::HEADER_LEN as SMB2_HEADER_LEN;
/// Offset of the Signature field in the SMB2 header.
pub use crate::proto::header::SIGNATURE_OFFSET;
use crate::proto::header::{
    Command, COMMAND_OFFSET, FLAGS_OFFSET, FLAG_SERVER_TO_REDIR, MESSAGE_ID_OFFSET,
};
// The Signature field ends the header (`signature_field` relies on it).
const _: () = assert!(SIGNATURE_OFFSET + SIGNATURE_LEN == SMB2_HEADER_LEN);
const COMMAND_CANCEL: u16 = Command::Cancel as u16;

impl SigningAlgorithm {
    /// The algorithm a dialect uses when 3.1.1 negotiated no SMB2_SIGNING_CAPABILITIES:
    /// HMAC-SHA256 for 2.x, AES-CMAC for 3.x. `None` for unknown dialects.
    pub fn default_for_dialect(dialect: u16) -> Option<Self> {
        match dialect {
            0x0202 | 0x0210 => Some(Self::HmacSha256),
            0x0300 | 0x0302 | 0x0311 => Some(Self::AesCmac),
            _ => None,
        }
    }
}

/// A prepared signing key: the AES key schedule or HMAC key is built once per session, not
/// once per message.
#[derive(Clone)]
pub struct SigningKey {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Hmac(hmac::Key),
    Cmac(Box<Cmac<Aes128>>),
    Gmac(Box<GmacKey>),
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.algorithm())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Prepares `key` (16 bytes: Session.SigningKey or Channel.SigningKey) for `alg`.
    pub fn new(alg: SigningAlgorithm, key: &[u8; 16]) -> Self {
        let inner = match alg {
            SigningAlgorithm::HmacSha256 => Inner::Hmac(hmac::Key::new(hmac::HMAC_SHA256, key)),
            SigningAlgorithm::AesCmac => {
                Inner::Cmac(Box::new(<Cmac<Aes128> as KeyInit>::new(key.into())))
            }
            SigningAlgorithm::AesGmac => Inner::Gmac(Box::new(GmacKey::new(key))),
        };
        Self { inner }
    }

    /// The algorithm this key signs with.
    pub fn algorithm(&self) -> SigningAlgorithm {
        match self.inner {
            Inner::Hmac(_) => SigningAlgorithm::HmacSha256,
            Inner::Cmac(_) => SigningAlgorithm::AesCmac,
            Inner::Gmac(_) => SigningAlgorithm::AesGmac,
        }
    }

    /// Computes the signature of `msg` as if its Signature field were zero.
    pub fn compute(&self, msg: &[u8]) -> Result<[u8; SIGNATURE_LEN], CryptoError> {
        self.compute_parts(msg, &[])
    }

    /// Computes the signature of the message `head` followed by `tail` (a READ response
    /// whose data is shared with other responses), as if its Signature field were zero,
    /// without joining the two.
    pub fn compute_parts(
        &self,
        head: &[u8],
        tail: &[u8],
    ) -> Result<[u8; SIGNATURE_LEN], CryptoError> {
        let (header, body) = head
            .split_first_chunk::<SMB2_HEADER_LEN>()
            .ok_or_else(|| too_short(head.len()))?;
        let mut header = *header;
        header[SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN].fill(0);
        let mut out = [0u8; SIGNATURE_LEN];
        match &self.inner {
            Inner::Hmac(k) => {
                let mut ctx = hmac::Context::with_key(k);
                ctx.update(&header);
                ctx.update(body);
                ctx.update(tail);
                // HMAC-SHA256 truncated to the signature's 16 bytes (its tag has 32).
                let tag = ctx.sign();
                for (o, t) in out.iter_mut().zip(tag.as_ref()) {
                    *o = *t;
                }
            }
            Inner::Cmac(proto) => {
                let mut mac = (**proto).clone();
                mac.update(&header);
                mac.update(body);
                mac.update(tail);
                out.copy_from_slice(&mac.finalize().into_bytes());
            }
            Inner::Gmac(key) => out = key.tag_parts(head, tail, &gmac_nonce(&header)),
        }
        Ok(out)
    }

    /// Signs `msg` in place: writes the signature into its header. The caller sets
    /// SMB2_FLAGS_SIGNED beforehand (the flag is covered by the signature).
    pub fn sign(&self, msg: &mut [u8]) -> Result<(), CryptoError> {
        self.sign_parts(msg, &[])
    }

    /// Signs the message `head` followed by `tail` ([`SigningKey::compute_parts`]): writes
    /// the signature into `head`'s header, as [`SigningKey::sign`] does.
    pub fn sign_parts(&self, head: &mut [u8], tail: &[u8]) -> Result<(), CryptoError> {
        // The field is covered as zero; zeroing it first spares AES-GMAC's bulk engine the
        // correction it makes for a non-zero field.
        signature_field(head)?.fill(0);
        let sig = self.compute_parts(head, tail)?;
        signature_field(head)?.copy_from_slice(&sig);
        Ok(())
    }

    /// Verifies the signature in `msg`'s header, in constant time.
    pub fn verify(&self, msg: &[u8]) -> Result<(), CryptoError> {
        let header = msg
            .first_chunk::<SMB2_HEADER_LEN>()
            .ok_or_else(|| too_short(msg.len()))?;
        let sig = self.compute(msg)?;
        let got = &header[SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN];
        let diff = sig.iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff == 0 {
            Ok(())
        } else {
            Err(CryptoError::BadSignature)
        }
    }
}

/// The error for a message shorter than the SMB2 header a signature lives in.
fn too_short(len: usize) -> CryptoError {
    CryptoError::TooShort {
        what: "signed SMB2 message",
        len,
        min: SMB2_HEADER_LEN,
    }
}

/// The Signature field of the SMB2 header at the start of `msg` (it ends the header, so it
/// is there exactly when the header is).
fn signature_field(msg: &mut [u8]) -> Result<&mut [u8], CryptoError> {
    let len = msg.len();
    msg.get_mut(SIGNATURE_OFFSET..SIGNATURE_OFFSET + SIGNATURE_LEN)
        .ok_or_else(|| too_short(len))
}

/// The 12-byte AES-GMAC nonce of MS-SMB2 3.1.4.1: MessageId, then a 32-bit little-endian word
/// whose bit 0 says "sent by the server" and bit 1 "this is a CANCEL request".
fn gmac_nonce(header: &[u8; SMB2_HEADER_LEN]) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[..8].copy_from_slice(&header[MESSAGE_ID_OFFSET..MESSAGE_ID_OFFSET + 8]);
    let flags = u32::from_le_bytes([
        header[FLAGS_OFFSET],
        header[FLAGS_OFFSET + 1],
        header[FLAGS_OFFSET + 2],
        header[FLAGS_OFFSET + 3],
    ]);
    let command = u16::from_le_bytes([header[COMMAND_OFFSET], header[COMMAND_OFFSET + 1]]);
    let mut word = 0u32;
    if flags & FLAG_SERVER_TO_REDIR != 0 {
        word |= 1;
    }
    if command == COMMAND_CANCEL && flags & FLAG_SERVER_TO_REDIR == 0 {
        word |= 2;
    }
    nonce[8..].copy_from_slice(&word.to_le_bytes());
    nonce
}

#[cfg(test)]
mod tests {
    use super::*;
    use aes_gcm::aead::AeadInPlace;
    use aes_gcm::Aes128Gcm;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    fn sample_message(len: usize, flags: u32, command: u16, msg_id: u64) -> Vec<u8> {
        let mut m = vec![0u8; len];
        m[..4].copy_from_slice(b"\xfeSMB");
        m[4] = 64;
        m[12..14].copy_from_slice(&command.to_le_bytes());
        m[16..20].copy_from_slice(&(flags | 8).to_le_bytes());
        m[24..32].copy_from_slice(&msg_id.to_le_bytes());
        for (i, b) in m.iter_mut().enumerate().skip(64) {
            *b = (i * 7) as u8;
        }
        m
    }

    /// MS blog "SMB 3.1.1 encryption in Windows 10", appendix A.1: the final SESSION_SETUP
    /// response, signed with AES-128-CMAC and the 3.1.1 signing key.
    #[test]
    fn smb311_session_setup_response_cmac_vector() {
        let msg = unhex(
            "FE534D4240000100000000000100800009000000000000000200000000000000FFFE000000000000\
             25000000001000006B85A4519A0F3EEA35BA946DD3AFE6B80900000048001D00A11B3019A0030A01\
             00A3120410010000003932A87523AB660100000000",
        );
        let mut key = [0u8; 16];
        key.copy_from_slice(&unhex("8765949DFEAEE105CE9118B45BE988F0"));
        let sk = SigningKey::new(SigningAlgorithm::AesCmac, &key);
        sk.verify(&msg).unwrap();
        let mut resigned = msg.clone();
        resigned[48..64].fill(0xAA);
        sk.sign(&mut resigned).unwrap();
        assert_eq!(resigned, msg);
    }

    /// RFC 4493 section 4, examples 1-4, through the same CMAC type we sign with.
    #[test]
    fn rfc4493_cmac_vectors() {
        let key = unhex("2b7e151628aed2a6abf7158809cf4f3c");
        let msg = unhex(
            "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51\
             30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710",
        );
        let cases = [
            (0, "bb1d6929e95937287fa37d129b756746"),
            (16, "070a16b46b4d4144f79bdd9dd04a287c"),
            (40, "dfa66747de9ae63030ca32611497c827"),
            (64, "51f0bebf7e3b9d92fc49741779363cfe"),
        ];
        for (n, expected) in cases {
            let mut mac = <Cmac<Aes128> as KeyInit>::new_from_slice(&key).unwrap();
            mac.update(&msg[..n]);
            assert_eq!(
                mac.finalize().into_bytes().to_vec(),
                unhex(expected),
                "len {n}"
            );
        }
    }

    /// A message signed as head and tail carries the signature of the joined message, for
    /// every algorithm, and verifies once joined.
    #[test]
    fn signing_in_two_parts_equals_signing_the_joined_message() {
        let key = [0x17u8; 16];
        for alg in [
            SigningAlgorithm::HmacSha256,
            SigningAlgorithm::AesCmac,
            SigningAlgorithm::AesGmac,
        ] {
            let sk = SigningKey::new(alg, &key);
            for tail_len in [0, 1, 100, 300 << 10] {
                let joined = sample_message(80 + tail_len, 1, 8, 42);
                let mut whole = joined.clone();
                sk.sign(&mut whole).unwrap();
                let (head, tail) = joined.split_at(80);
                let mut head = head.to_vec();
                head[48..64].fill(0x5c);
                sk.sign_parts(&mut head, tail).unwrap();
                assert_eq!(head[..], whole[..80], "{alg:?}, tail {tail_len}");
                sk.verify(&[head, tail.to_vec()].concat()).unwrap();
            }
            let mut short = vec![0u8; 63];
            assert!(sk.sign_parts(&mut short, &[0u8; 100]).is_err(), "{alg:?}");
        }
    }

    /// GMAC must equal AES-GCM with the message as AAD and an empty plaintext, nonce per
    /// MS-SMB2 3.1.4.1, for several lengths (block-aligned and not).
    #[test]
    fn gmac_matches_aes_gcm_with_empty_plaintext() {
        let key = [0x42u8; 16];
        let sk = SigningKey::new(SigningAlgorithm::AesGmac, &key);
        for (len, flags, cmd) in [
            (64, 0, 5),
            (65, 1, 8),
            (200, 0, 0x0C),
            (4096 + 3, 1, 0x0C),
            (64 + 3 * 4096 + 5, 1, 8),
        ] {
            let mut msg = sample_message(len, flags, cmd, 0x1122_3344_5566_7788);
            sk.sign(&mut msg).unwrap();
            let mut zeroed = msg.clone();
            zeroed[48..64].fill(0);
            let mut nonce = [0u8; 12];
            nonce[..8].copy_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
            let role = flags & 1;
            let cancel = u32::from(cmd == 0x0C && role == 0) << 1;
            nonce[8..].copy_from_slice(&(role | cancel).to_le_bytes());
            let gcm = Aes128Gcm::new_from_slice(&key).unwrap();
            let mut empty: Vec<u8> = Vec::new();
            let tag = gcm
                .encrypt_in_place_detached((&nonce).into(), &zeroed, &mut empty)
                .unwrap();
            assert_eq!(&msg[48..64], tag.as_slice(), "len {len}");
            sk.verify(&msg).unwrap();
        }
    }

    #[test]
    fn hmac_sha256_is_truncated_full_hmac() {
        let key = [3u8; 16];
        let sk = SigningKey::new(SigningAlgorithm::HmacSha256, &key);
        let mut msg = sample_message(100, 1, 8, 9);
        sk.sign(&mut msg).unwrap();
        let mut zeroed = msg.clone();
        zeroed[48..64].fill(0);
        let full = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, &key), &zeroed);
        assert_eq!(&msg[48..64], &full.as_ref()[..16]);
    }

    #[test]
    fn every_algorithm_detects_tampering_and_rejects_short_input() {
        for alg in [
            SigningAlgorithm::HmacSha256,
            SigningAlgorithm::AesCmac,
            SigningAlgorithm::AesGmac,
        ] {
            let sk = SigningKey::new(alg, &[1; 16]);
            let mut msg = sample_message(150, 1, 3, 77);
            sk.sign(&mut msg).unwrap();
            sk.verify(&msg).unwrap();
            let mut bad = msg.clone();
            bad[120] ^= 1;
            assert_eq!(sk.verify(&bad), Err(CryptoError::BadSignature));
            let mut bad_sig = msg.clone();
            bad_sig[50] ^= 1;
            assert_eq!(sk.verify(&bad_sig), Err(CryptoError::BadSignature));
            assert!(matches!(
                sk.verify(&msg[..63]),
                Err(CryptoError::TooShort { .. })
            ));
            // A different key does not verify.
            let other = SigningKey::new(alg, &[2; 16]);
            assert_eq!(other.verify(&msg), Err(CryptoError::BadSignature));
        }
    }

    #[test]
    fn gmac_nonce_role_and_cancel_bits() {
        let mut h = [0u8; 64];
        h[24] = 5;
        assert_eq!(gmac_nonce(&h)[8..], [0, 0, 0, 0]);
        h[16] = 1;
        assert_eq!(gmac_nonce(&h)[8..], [1, 0, 0, 0]);
        h[16] = 0;
        h[12] = 0x0C;
        assert_eq!(gmac_nonce(&h)[8..], [2, 0, 0, 0]);
        assert_eq!(gmac_nonce(&h)[0], 5);
    }
}
