//! Sealing and opening SMB2 messages behind the 52-byte SMB2 TRANSFORM_HEADER
//! (MS-SMB2 2.2.41, 3.1.4.3, 3.3.5.2.1.1).
//!
//! Layout of the transform header: ProtocolId `FD 'S' 'M' 'B'` (0..4), Signature = AEAD tag
//! (4..20), Nonce (20..36; CCM uses the first 11 bytes, GCM the first 12, the rest is zero),
//! OriginalMessageSize (36..40), Reserved (40..42), Flags/EncryptionAlgorithm = 0x0001
//! (42..44), SessionId (44..52). The AAD is bytes 20..52. Encryption happens in place on the
//! caller's buffer: no per-message allocation.

use aes::{Aes128, Aes256};
use ccm::aead::AeadInPlace;
use ccm::consts::{U11, U16};
use ccm::{Ccm, KeyInit};
use ring::aead;

use super::{Cipher, CryptoError};

/// Length of the SMB2 TRANSFORM_HEADER.
pub const TRANSFORM_HEADER_LEN: usize = 52;
/// ProtocolId of a transform header.
pub const TRANSFORM_PROTOCOL_ID: [u8; 4] = [0xFD, b'S', b'M', b'B'];
/// Flags value meaning "encrypted" (3.1.1) / EncryptionAlgorithm AES-128-CCM (3.0): both 1.
pub const TRANSFORM_FLAG_ENCRYPTED: u16 = 0x0001;
/// Largest message we seal or open: OriginalMessageSize is 32 bits, and CCM with an 11-byte
/// nonce has a 4-byte length field.
pub const MAX_SEALED_MESSAGE: usize = u32::MAX as usize;
// Field offsets. Headers are handled as `&[u8; TRANSFORM_HEADER_LEN]`, so the constant ranges
// over them cannot panic (clippy's `out_of_bounds_indexing` checks them against the length).
const SIG_OFFSET: usize = 4;
const NONCE_OFFSET: usize = 20;
const AAD_START: usize = NONCE_OFFSET;
const SIZE_OFFSET: usize = 36;
const FLAGS_OFFSET: usize = 42;
const SESSION_ID_OFFSET: usize = 44;

type Aes128Ccm = Ccm<Aes128, U16, U11>;
type Aes256Ccm = Ccm<Aes256, U16, U11>;

/// A prepared cipher key for one direction of one session.
pub struct CipherKey {
    cipher: Cipher,
    inner: Inner,
}

enum Inner {
    Gcm(Box<aead::LessSafeKey>),
    Ccm128(Box<Aes128Ccm>),
    Ccm256(Box<Aes256Ccm>),
}

impl std::fmt::Debug for CipherKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CipherKey")
            .field("cipher", &self.cipher)
            .finish_non_exhaustive()
    }
}

impl CipherKey {
    /// Prepares `key` (16 bytes for AES-128, 32 for AES-256) for `cipher`.
    pub fn new(cipher: Cipher, key: &[u8]) -> Result<Self, CryptoError> {
        let bad = || CryptoError::KeyLength {
            alg: cipher_name(cipher),
            len: key.len(),
        };
        if key.len() != cipher.key_len() {
            return Err(bad());
        }
        let inner = match cipher {
            Cipher::Aes128Gcm => Inner::Gcm(Box::new(aead::LessSafeKey::new(
                aead::UnboundKey::new(&aead::AES_128_GCM, key).map_err(|_| bad())?,
            ))),
            Cipher::Aes256Gcm => Inner::Gcm(Box::new(aead::LessSafeKey::new(
                aead::UnboundKey::new(&aead::AES_256_GCM, key).map_err(|_| bad())?,
            ))),
            Cipher::Aes128Ccm => {
                Inner::Ccm128(Box::new(Aes128Ccm::new_from_slice(key).map_err(|_| bad())?))
            }
            Cipher::Aes256Ccm => {
                Inner::Ccm256(Box::new(Aes256Ccm::new_from_slice(key).map_err(|_| bad())?))
            }
        };
        Ok(Self { cipher, inner })
    }

    /// The cipher of this key.
    pub fn cipher(&self) -> Cipher {
        self.cipher
    }

    /// Writes a complete transform header into `header` (exactly [`TRANSFORM_HEADER_LEN`]
    /// bytes) and encrypts `message` in place, putting the tag into the header's Signature.
    ///
    /// `nonce` must be unique per message for the life of the key; only its first
    /// [`Cipher::nonce_len`] bytes are used (the rest of the wire field is zeroed). The caller
    /// owns nonce generation (a counter is the usual choice).
    pub fn seal(
        &self,
        header: &mut [u8],
        nonce: &[u8; 16],
        session_id: u64,
        message: &mut [u8],
    ) -> Result<(), CryptoError> {
        let len = header.len();
        let header = <&mut [u8; TRANSFORM_HEADER_LEN]>::try_from(header).map_err(|_| {
            CryptoError::TooShort {
                what: "transform header buffer",
                len,
                min: TRANSFORM_HEADER_LEN,
            }
        })?;
        self.seal_header(header, nonce, session_id, message)
    }

    /// [`CipherKey::seal`] with the header buffer's length in its type.
    fn seal_header(
        &self,
        header: &mut [u8; TRANSFORM_HEADER_LEN],
        nonce: &[u8; 16],
        session_id: u64,
        message: &mut [u8],
    ) -> Result<(), CryptoError> {
        let size =
            u32::try_from(message.len()).map_err(|_| CryptoError::TooLarge(message.len()))?;
        header[..SIG_OFFSET].copy_from_slice(&TRANSFORM_PROTOCOL_ID);
        header[SIG_OFFSET..NONCE_OFFSET].fill(0);
        header[NONCE_OFFSET..SIZE_OFFSET].copy_from_slice(&nonce_field(self.cipher, nonce));
        header[SIZE_OFFSET..SIZE_OFFSET + 4].copy_from_slice(&size.to_le_bytes());
        header[SIZE_OFFSET + 4..FLAGS_OFFSET].fill(0);
        header[FLAGS_OFFSET..SESSION_ID_OFFSET]
            .copy_from_slice(&TRANSFORM_FLAG_ENCRYPTED.to_le_bytes());
        header[SESSION_ID_OFFSET..].copy_from_slice(&session_id.to_le_bytes());
        let aad: &[u8] = &header[AAD_START..];
        let tag: [u8; 16] = match &self.inner {
            Inner::Gcm(k) => {
                let t = k
                    .seal_in_place_separate_tag(
                        aead::Nonce::assume_unique_for_key(gcm_nonce(header)),
                        aead::Aad::from(aad),
                        message,
                    )
                    .map_err(|_| CryptoError::TooLarge(message.len()))?;
                let mut out = [0u8; 16];
                out.copy_from_slice(t.as_ref());
                out
            }
            Inner::Ccm128(c) => c
                .encrypt_in_place_detached(ccm_nonce(header).into(), aad, message)
                .map_err(|_| CryptoError::TooLarge(message.len()))?
                .into(),
            Inner::Ccm256(c) => c
                .encrypt_in_place_detached(ccm_nonce(header).into(), aad, message)
                .map_err(|_| CryptoError::TooLarge(message.len()))?
                .into(),
        };
        header[SIG_OFFSET..NONCE_OFFSET].copy_from_slice(&tag);
        Ok(())
    }

    /// Authenticates and decrypts `message` in place, given the transform header that
    /// preceded it. On error `message` holds unspecified bytes and must be discarded.
    pub fn open(&self, header: &[u8], message: &mut [u8]) -> Result<(), CryptoError> {
        let header = header
            .first_chunk::<TRANSFORM_HEADER_LEN>()
            .ok_or(CryptoError::TooShort {
                what: "transform header",
                len: header.len(),
                min: TRANSFORM_HEADER_LEN,
            })?;
        self.open_header(header, message)
    }

    /// [`CipherKey::open`] with the header's length in its type.
    fn open_header(
        &self,
        header: &[u8; TRANSFORM_HEADER_LEN],
        message: &mut [u8],
    ) -> Result<(), CryptoError> {
        let mut pid = [0u8; 4];
        pid.copy_from_slice(&header[..SIG_OFFSET]);
        if pid != TRANSFORM_PROTOCOL_ID {
            return Err(CryptoError::NotTransform(pid));
        }
        let mut size = [0u8; 4];
        size.copy_from_slice(&header[SIZE_OFFSET..SIZE_OFFSET + 4]);
        let declared = u32::from_le_bytes(size);
        if usize::try_from(declared).ok() != Some(message.len()) {
            return Err(CryptoError::SizeMismatch {
                declared,
                actual: message.len(),
            });
        }
        let mut tag = [0u8; 16];
        tag.copy_from_slice(&header[SIG_OFFSET..NONCE_OFFSET]);
        let aad = &header[AAD_START..];
        match &self.inner {
            Inner::Gcm(k) => k
                .open_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(gcm_nonce(header)),
                    aead::Aad::from(aad),
                    aead::Tag::from(tag),
                    message,
                    0..,
                )
                .map(|_| ())
                .map_err(|_| CryptoError::BadTag),
            Inner::Ccm128(c) => c
                .decrypt_in_place_detached(ccm_nonce(header).into(), aad, message, (&tag).into())
                .map_err(|_| CryptoError::BadTag),
            Inner::Ccm256(c) => c
                .decrypt_in_place_detached(ccm_nonce(header).into(), aad, message, (&tag).into())
                .map_err(|_| CryptoError::BadTag),
        }
    }
}

impl CipherKey {
    /// [`CipherKey::seal`] over one buffer whose first [`TRANSFORM_HEADER_LEN`] bytes are
    /// reserved for the header and the rest is the message, so a response can be built in its
    /// final place and sealed without copying.
    pub fn seal_frame(
        &self,
        frame: &mut [u8],
        nonce: &[u8; 16],
        session_id: u64,
    ) -> Result<(), CryptoError> {
        let len = frame.len();
        let (h, m) = frame
            .split_first_chunk_mut::<TRANSFORM_HEADER_LEN>()
            .ok_or(CryptoError::TooShort {
                what: "sealed frame",
                len,
                min: TRANSFORM_HEADER_LEN,
            })?;
        self.seal_header(h, nonce, session_id, m)
    }

    /// [`CipherKey::open`] over one received frame (transform header + ciphertext); returns
    /// the decrypted message, in place.
    pub fn open_frame<'a>(&self, frame: &'a mut [u8]) -> Result<&'a mut [u8], CryptoError> {
        let len = frame.len();
        let (h, m) = frame
            .split_first_chunk_mut::<TRANSFORM_HEADER_LEN>()
            .ok_or(CryptoError::TooShort {
                what: "sealed frame",
                len,
                min: TRANSFORM_HEADER_LEN,
            })?;
        self.open_header(h, m)?;
        Ok(m)
    }
}

/// The transform header's 16-byte Nonce field for `nonce` under `cipher`: its first
/// [`Cipher::nonce_len`] bytes, then zeros (MS-SMB2 2.2.41).
fn nonce_field(cipher: Cipher, nonce: &[u8; 16]) -> [u8; 16] {
    let mut field = [0u8; 16];
    for (f, n) in field.iter_mut().zip(nonce).take(cipher.nonce_len()) {
        *f = *n;
    }
    field
}

/// The 12-byte AES-GCM nonce: the first bytes of the header's Nonce field.
fn gcm_nonce(header: &[u8; TRANSFORM_HEADER_LEN]) -> [u8; 12] {
    let mut n = [0u8; 12];
    n.copy_from_slice(&header[NONCE_OFFSET..NONCE_OFFSET + 12]);
    n
}

/// The 11-byte AES-CCM nonce: the first bytes of the header's Nonce field.
fn ccm_nonce(header: &[u8; TRANSFORM_HEADER_LEN]) -> &[u8] {
    &header[NONCE_OFFSET..NONCE_OFFSET + 11]
}

/// Generates transform-header nonces that never repeat for one key: a 64-bit counter followed
/// by a per-key random prefix chosen by the caller (3 bytes fit CCM's 11-byte nonce, 4 GCM's
/// 12). Sans-I/O: the randomness is passed in.
#[derive(Debug, Clone)]
pub struct NonceSequence {
    next: u64,
    salt: [u8; 4],
}

impl NonceSequence {
    /// Starts a sequence; `salt` should be random per key.
    pub fn new(salt: [u8; 4]) -> Self {
        Self { next: 0, salt }
    }

    /// The next nonce for `cipher`, or `None` once 2^64 - 1 have been used (the session must
    /// then be torn down rather than reuse a nonce).
    pub fn next_nonce(&mut self, cipher: Cipher) -> Option<[u8; 16]> {
        if self.next == u64::MAX {
            return None;
        }
        let mut n = [0u8; 16];
        n[..8].copy_from_slice(&self.next.to_le_bytes());
        let salt_len = cipher.nonce_len() - 8;
        for (d, s) in n[8..12].iter_mut().zip(&self.salt).take(salt_len) {
            *d = *s;
        }
        self.next += 1;
        Some(n)
    }
}

/// Reads the SessionId of a transform header so the server can pick the session's key before
/// decrypting; `None` if `header` is not a transform header.
pub fn transform_session_id(header: &[u8]) -> Option<u64> {
    let h = header.first_chunk::<TRANSFORM_HEADER_LEN>()?;
    if h[..SIG_OFFSET] != TRANSFORM_PROTOCOL_ID {
        return None;
    }
    let mut id = [0u8; 8];
    id.copy_from_slice(&h[SESSION_ID_OFFSET..]);
    Some(u64::from_le_bytes(id))
}

fn cipher_name(c: Cipher) -> &'static str {
    match c {
        Cipher::Aes128Ccm => "AES-128-CCM",
        Cipher::Aes128Gcm => "AES-128-GCM",
        Cipher::Aes256Ccm => "AES-256-CCM",
        Cipher::Aes256Gcm => "AES-256-GCM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{KeyDialect, SessionKeys};

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    fn nonce16(s: &str) -> [u8; 16] {
        let mut n = [0u8; 16];
        let v = unhex(s);
        n[..v.len()].copy_from_slice(&v);
        n
    }

    /// MS blog "Encryption in SMB 3.0: a protocol perspective": the client's WRITE request
    /// sealed with AES-128-CCM. We play the client here, so we use the *decryption* key of
    /// the server-side schedule (= client's encryption key).
    #[test]
    fn smb30_ccm_blog_vector_seal_and_open() {
        let keys = SessionKeys::derive(
            &unhex("B4546771B515F766A86735532DD6C4F0"),
            KeyDialect::Smb30,
            Some(Cipher::Aes128Ccm),
        );
        let client_enc = CipherKey::new(Cipher::Aes128Ccm, keys.decryption().unwrap()).unwrap();
        let plain = unhex(
            "FE534D4240000100000000000900400008000000000000000400000000000000\
             FFFE0000010000001100001400E4080000000000000000000000000000000000\
             3100700017000000000000000000000015010000390000020100000039020000\
             00000000000000007000000000000000536D623320656E6372797074696F6E20\
             74657374696E67",
        );
        let expected = unhex(
            "FD534D4281A286535415445DAE393921E44FA42E66E69A111892584FB5ED524A\
             744DA3EE87000000000001001100001400E4080025C8FEE16605A437832D1CD5\
             2DA9F4645333482A175FE5384563F45FCDAFAEF38BC62BA4D5C62897996625A4\
             4C29BE5658DE2E6117585779E7B59FFD971278D08580D7FA899E410E910EABF5\
             AA1DB43050B33B49182637759AC15D84BFCDF5B6B238993C0F4CF4D6012023F6\
             C627297075D84B7803912D0A9639634453595EF3E33FFE4E7AC2AB",
        );
        let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
        frame.extend_from_slice(&plain);
        let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
        client_enc
            .seal(
                h,
                &nonce16("66E69A111892584FB5ED524A744DA3EE"),
                0x8E40014000011,
                m,
            )
            .unwrap();
        // The blog's sender filled all 16 nonce bytes; CCM uses 11 and MS-SMB2 2.2.41 says the
        // other 5 are reserved (we send zeros). They are part of the AAD, so the tag differs,
        // but the nonce and the ciphertext must be identical.
        assert_eq!(frame[20..31], expected[20..31]);
        assert_eq!(frame[36..], expected[36..]);
        // And the server opens the blog's exact bytes.
        let mut wire = expected.clone();
        let (h, m) = wire.split_at_mut(TRANSFORM_HEADER_LEN);
        let server_dec = CipherKey::new(Cipher::Aes128Ccm, keys.decryption().unwrap()).unwrap();
        server_dec.open(h, m).unwrap();
        assert_eq!(m, &plain[..]);
        assert_eq!(transform_session_id(&wire), Some(0x8E40014000011));
    }

    /// Same blog: the server's READ response, which the client decrypts.
    #[test]
    fn smb30_ccm_blog_vector_server_response() {
        let keys = SessionKeys::derive(
            &unhex("B4546771B515F766A86735532DD6C4F0"),
            KeyDialect::Smb30,
            Some(Cipher::Aes128Ccm),
        );
        let wire = unhex(
            "FD534D42A6015530A18F6D9AFFE22AFAE8E66484860000000000000011000014\
             00E4080050000000000001001100001400E40800DBF46435C5F14169293CE079\
             E344479BF670227E49873F458672C3098DAC467DD5809F369D67409166515787\
             1483E01F7BECD02064EAC3E235F913668BBC2F097980D4B378F1993EFF6E60D1\
             77309E5B",
        );
        let plain = unhex(
            "FE534D4240000100000000000900210009000000000000000400000000000000\
             FFFE0000010000001100001400E4080000000000000000000000000000000000\
             11000000170000000000000000000000",
        );
        let enc = CipherKey::new(Cipher::Aes128Ccm, keys.encryption().unwrap()).unwrap();
        let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
        frame.extend_from_slice(&plain);
        let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
        enc.seal(h, &nonce16("8600000000000000110000"), 0x8E40014000011, m)
            .unwrap();
        // Reserved nonce bytes differ (see above): same nonce and ciphertext, different tag.
        assert_eq!(frame[20..31], wire[20..31]);
        assert_eq!(frame[36..], wire[36..]);
        // Opening the blog's exact bytes (reserved nonce bytes and all) succeeds.
        let mut wire = wire;
        let (h, m) = wire.split_at_mut(TRANSFORM_HEADER_LEN);
        enc.open(h, m).unwrap();
        assert_eq!(m, &plain[..]);
    }

    /// MS blog "SMB 3.1.1 encryption in Windows 10": AES-128-GCM, both directions.
    #[test]
    fn smb311_gcm_blog_vectors() {
        let mut hash = [0u8; 64];
        hash.copy_from_slice(&unhex(
            "B23F3CBFD69487D9832B79B1594A367CDD950909B774C3A4C412B4FCEA9EDDDB\
             A7DB256BA2EA30E977F11F9B113247578E0E915C6D2A513B8F2FCA5707DC8770",
        ));
        let keys = SessionKeys::derive(
            &unhex("419FDDF34C1E001909D362AE7FB6AF79"),
            KeyDialect::Smb311 { preauth_hash: hash },
            Some(Cipher::Aes128Gcm),
        );
        let plain = unhex(
            "FE534D4240000100000000000900010008000000000000000500000000000000FFFE000001000000\
             25000000001000000000000000000000000000000000000031007000170000000000000000000000\
             0600000004000000010000000400000000000000000000007000000000000000536D623320656E63\
             72797074696F6E2074657374696E67",
        );
        let expected = unhex(
            "FD534D42BD73D97D2BC9001BCAFAC0FDFF5FEEBCC7D6822D269CAF48904C664C0000000087000000\
             0000010025000000001000006ECDD2A7AFC7B47763057A041B8FD4DAFFE990B70C9E09D36C084E02\
             D14EF247F8BDE38ACF6256F8B1D3B56F77FBDEB312FEA5E92CBCC1ED8FB2EBBFAA75E49A4A394BB4\
             4576545567C24D4C014D47C9FBDFDAFD2C4F9B72F8D256452620A299F48E29E53D6B61D1C13A19E9\
             1AF013F00D17E3ABC2FC3D36C8C1B6B93973253852DBD442E46EE8",
        );
        let client_enc = CipherKey::new(Cipher::Aes128Gcm, keys.decryption().unwrap()).unwrap();
        let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
        frame.extend_from_slice(&plain);
        let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
        client_enc
            .seal(h, &nonce16("C7D6822D269CAF48904C664C"), 0x100000000025, m)
            .unwrap();
        assert_eq!(frame, expected);

        // Server -> client response from the same blog.
        let wire = unhex(
            "FD534D42ACBE1CB7ED343ADF1725EF144D90D4B0E06831DD2E8EB7B4000000000000000050000000\
             00000100250000000010000026BBBF949983A6C1C796559D0F2C510CB651D1F7B6AC8DED32A2A0B8\
             F2D793A815C6F6B848D69767A215841A42D400AE6DDB5F0B44173A014973321FDD7950DA6179159B\
             82E03C9E18A050FF0EA1C967",
        );
        let resp_plain = unhex(
            "FE534D4240000100000000000900010001000000000000000500000000000000FFFE000001000000\
             25000000001000000000000000000000000000000000000011000000170000000000000000000000",
        );
        let server_enc = CipherKey::new(Cipher::Aes128Gcm, keys.encryption().unwrap()).unwrap();
        let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
        frame.extend_from_slice(&resp_plain);
        let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
        server_enc
            .seal(h, &nonce16("E06831DD2E8EB7B4"), 0x100000000025, m)
            .unwrap();
        assert_eq!(frame, wire);
        let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
        server_enc.open(h, m).unwrap();
        assert_eq!(m, &resp_plain[..]);
    }

    /// NIST GCM test cases 2 and 3 (McGrew & Viega, "The Galois/Counter Mode of Operation"),
    /// through the ring key type we seal with.
    #[test]
    fn nist_gcm_vectors_through_ring() {
        let k =
            aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &[0; 16]).unwrap());
        let mut pt = [0u8; 16];
        let tag = k
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key([0; 12]),
                aead::Aad::empty(),
                &mut pt,
            )
            .unwrap();
        assert_eq!(pt.to_vec(), unhex("0388dace60b6a392f328c2b971b2fe78"));
        assert_eq!(
            tag.as_ref().to_vec(),
            unhex("ab6e47d42cec13bdf53a67b21257bddf")
        );

        let key = unhex("feffe9928665731c6d6a8f9467308308");
        let mut pt = unhex(
            "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72\
             1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255",
        );
        let k = aead::LessSafeKey::new(aead::UnboundKey::new(&aead::AES_128_GCM, &key).unwrap());
        let mut n = [0u8; 12];
        n.copy_from_slice(&unhex("cafebabefacedbaddecaf888"));
        let tag = k
            .seal_in_place_separate_tag(
                aead::Nonce::assume_unique_for_key(n),
                aead::Aad::empty(),
                &mut pt,
            )
            .unwrap();
        assert_eq!(
            tag.as_ref().to_vec(),
            unhex("4d5c2af327cd64a62cf35abd2ba6fab4")
        );
        assert_eq!(pt[..4], [0x42, 0x83, 0x1e, 0xc2]);
    }

    #[test]
    fn every_cipher_round_trips_and_rejects_tampering() {
        for cipher in [
            Cipher::Aes128Ccm,
            Cipher::Aes128Gcm,
            Cipher::Aes256Ccm,
            Cipher::Aes256Gcm,
        ] {
            let key = vec![0x5a; cipher.key_len()];
            let k = CipherKey::new(cipher, &key).unwrap();
            let plain: Vec<u8> = (0..1000u32).map(|i| (i * 31) as u8).collect();
            let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
            frame.extend_from_slice(&plain);
            let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
            k.seal(h, &[7; 16], 42, m).unwrap();
            assert_ne!(&frame[TRANSFORM_HEADER_LEN..], &plain[..]);
            assert!(frame[20 + cipher.nonce_len()..36].iter().all(|&b| b == 0));
            for flip in [5usize, 25, 45, 60, 1051] {
                let mut bad = frame.clone();
                bad[flip] ^= 0x80;
                let (h, m) = bad.split_at_mut(TRANSFORM_HEADER_LEN);
                assert_eq!(
                    k.open(h, m),
                    Err(CryptoError::BadTag),
                    "{cipher:?} flip {flip}"
                );
            }
            let (h, m) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
            k.open(h, m).unwrap();
            assert_eq!(m, &plain[..]);
            assert!(CipherKey::new(cipher, &key[1..]).is_err());
        }
    }

    #[test]
    fn frame_helpers_and_nonce_sequence() {
        let k = CipherKey::new(Cipher::Aes256Gcm, &[9; 32]).unwrap();
        let mut seq = NonceSequence::new([1, 2, 3, 4]);
        let n0 = seq.next_nonce(Cipher::Aes256Gcm).unwrap();
        let n1 = seq.next_nonce(Cipher::Aes256Gcm).unwrap();
        assert_ne!(n0, n1);
        assert_eq!(&n0[8..12], &[1, 2, 3, 4]);
        assert_eq!(&seq.next_nonce(Cipher::Aes128Ccm).unwrap()[11..], &[0; 5]);
        let mut frame = vec![0u8; TRANSFORM_HEADER_LEN];
        frame.extend_from_slice(b"\xfeSMB hello");
        k.seal_frame(&mut frame, &n0, 5).unwrap();
        assert_eq!(k.open_frame(&mut frame).unwrap(), b"\xfeSMB hello");
        assert!(k.open_frame(&mut [0u8; 10]).is_err());
        let mut exhausted = NonceSequence {
            next: u64::MAX,
            salt: [0; 4],
        };
        assert!(exhausted.next_nonce(Cipher::Aes128Gcm).is_none());
    }

    #[test]
    fn open_rejects_malformed_headers() {
        let k = CipherKey::new(Cipher::Aes128Gcm, &[1; 16]).unwrap();
        let mut m = [0u8; 10];
        assert!(matches!(
            k.open(&[0; 10], &mut m),
            Err(CryptoError::TooShort { .. })
        ));
        let mut h = [0u8; 52];
        h[..4].copy_from_slice(b"\xfeSMB");
        assert!(matches!(
            k.open(&h, &mut m),
            Err(CryptoError::NotTransform(_))
        ));
        h[..4].copy_from_slice(&TRANSFORM_PROTOCOL_ID);
        h[36] = 11;
        assert!(matches!(
            k.open(&h, &mut m),
            Err(CryptoError::SizeMismatch { .. })
        ));
        h[36] = 10;
        assert_eq!(k.open(&h, &mut m), Err(CryptoError::BadTag));
    }
}
