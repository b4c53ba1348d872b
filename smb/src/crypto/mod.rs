//! SMB cryptography: SP800-108 KDF, preauth integrity hash, signing (HMAC-SHA256, AES-CMAC,
//! AES-GMAC), encryption (AES-CCM/GCM).
//!
//! Everything here is a pure function of bytes and keys: no I/O, no clock, no randomness (the
//! caller supplies nonces). The server layer decides *when* to sign or encrypt (MS-SMB2 3.3.4.1);
//! this module only knows *how*.
//!
//! Map:
//! - [`kdf`]: SP800-108 counter-mode KDF with HMAC-SHA256 (MS-SMB2 3.1.4.2).
//! - [`preauth`]: the SHA-512 preauth integrity hash chain of SMB 3.1.1 (MS-SMB2 3.1.1).
//! - [`keys`]: per-session signing/encryption/decryption/application keys for each dialect.
//! - [`ghash`]: GHASH through POLYVAL with batched byte reversal, for AES-GMAC signing.
//! - [`gmac`]: AES-GMAC over a message with its Signature field taken as zero; large messages
//!   go through graviola's aggregated GHASH.
//! - [`signing`]: sign and verify a whole SMB2 message (MS-SMB2 3.1.4.1 / 3.1.5.1).
//! - [`encryption`]: seal and open a message behind a 52-byte transform header (MS-SMB2 3.1.4.3).

pub mod encryption;
pub mod ghash;
pub mod gmac;
pub mod kdf;
pub mod keys;
pub mod preauth;
pub mod signing;

pub use encryption::{transform_session_id, CipherKey, NonceSequence, TRANSFORM_HEADER_LEN};
pub use kdf::kdf_counter_hmac_sha256;
pub use keys::{KeyDialect, SessionKeys};
pub use preauth::{PreauthHash, PREAUTH_HASH_LEN};
pub use signing::{SigningKey, SIGNATURE_LEN};

/// Errors from signing, verification, sealing and opening. Every variant is the peer's fault or a
/// caller bug caught before any crypto runs; none of them is ever a panic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    /// The buffer is shorter than the structure it must contain.
    #[error("{what} too short: {len} bytes, need at least {min}")]
    TooShort {
        /// Which structure was being read.
        what: &'static str,
        /// Bytes available.
        len: usize,
        /// Bytes required.
        min: usize,
    },
    /// The signature in the SMB2 header does not match the one computed over the message.
    #[error("SMB2 message signature mismatch")]
    BadSignature,
    /// The AEAD tag in the transform header does not authenticate the ciphertext.
    #[error("decryption failed: authentication tag mismatch")]
    BadTag,
    /// The transform header's ProtocolId is not 0xFD 'S' 'M' 'B'.
    #[error("not an SMB2 transform header (protocol id {0:02x?})")]
    NotTransform([u8; 4]),
    /// OriginalMessageSize in the transform header disagrees with the ciphertext length.
    #[error("transform header says {declared} bytes, ciphertext has {actual}")]
    SizeMismatch {
        /// OriginalMessageSize from the header.
        declared: u32,
        /// Bytes actually following the header.
        actual: usize,
    },
    /// A message larger than the AEAD or the wire format allows.
    #[error("message of {0} bytes is too large to seal")]
    TooLarge(usize),
    /// The key has the wrong length for the chosen algorithm (a caller bug).
    #[error("key of {len} bytes is wrong for {alg}")]
    KeyLength {
        /// Algorithm name.
        alg: &'static str,
        /// Length given.
        len: usize,
    },
}

/// Signing algorithms with their MS-SMB2 2.2.3.1.7 wire ids, so the server can map the
/// SMB2_SIGNING_CAPABILITIES context directly to an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SigningAlgorithm {
    /// HMAC-SHA256 truncated to 16 bytes: dialects 2.0.2 and 2.1.
    HmacSha256,
    /// AES-128-CMAC (RFC 4493): dialects 3.0, 3.0.2, and 3.1.1 without a signing context.
    AesCmac,
    /// AES-128-GMAC (RFC 4543): 3.1.1 when negotiated through SMB2_SIGNING_CAPABILITIES.
    AesGmac,
}

impl SigningAlgorithm {
    /// The algorithm's id in SMB2_SIGNING_CAPABILITIES.
    pub fn wire_id(self) -> u16 {
        match self {
            Self::HmacSha256 => 0,
            Self::AesCmac => 1,
            Self::AesGmac => 2,
        }
    }

    /// The algorithm's name for listings (`aes-128-gmac`).
    pub fn name(self) -> &'static str {
        match self {
            Self::HmacSha256 => "hmac-sha256",
            Self::AesCmac => "aes-128-cmac",
            Self::AesGmac => "aes-128-gmac",
        }
    }

    /// Maps a wire id from SMB2_SIGNING_CAPABILITIES; `None` for ids we do not implement.
    pub fn from_wire_id(id: u16) -> Option<Self> {
        match id {
            0 => Some(Self::HmacSha256),
            1 => Some(Self::AesCmac),
            2 => Some(Self::AesGmac),
            _ => None,
        }
    }
}

/// Encryption ciphers with their MS-SMB2 2.2.3.1.2 wire ids (SMB2_ENCRYPTION_CAPABILITIES).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cipher {
    /// AES-128-CCM, 11-byte nonce: the only cipher of 3.0/3.0.2.
    Aes128Ccm,
    /// AES-128-GCM, 12-byte nonce.
    Aes128Gcm,
    /// AES-256-CCM, 11-byte nonce, 3.1.1 only.
    Aes256Ccm,
    /// AES-256-GCM, 12-byte nonce, 3.1.1 only.
    Aes256Gcm,
}

impl Cipher {
    /// The cipher's id in SMB2_ENCRYPTION_CAPABILITIES and the transform header's algorithm
    /// field of 3.0.
    pub fn wire_id(self) -> u16 {
        match self {
            Self::Aes128Ccm => 1,
            Self::Aes128Gcm => 2,
            Self::Aes256Ccm => 3,
            Self::Aes256Gcm => 4,
        }
    }

    /// Every cipher, in the server's default order of preference (AES-128 first: some
    /// clients derive only 128-bit keys).
    pub const ALL: [Cipher; 4] = [
        Self::Aes128Gcm,
        Self::Aes128Ccm,
        Self::Aes256Gcm,
        Self::Aes256Ccm,
    ];

    /// The cipher's name as admins write it (`aes-128-gcm`), for settings and listings.
    pub fn name(self) -> &'static str {
        match self {
            Self::Aes128Ccm => "aes-128-ccm",
            Self::Aes128Gcm => "aes-128-gcm",
            Self::Aes256Ccm => "aes-256-ccm",
            Self::Aes256Gcm => "aes-256-gcm",
        }
    }

    /// Parses [`Cipher::name`] (case-insensitive); `None` for anything else.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Maps a wire id; `None` for ids we do not implement.
    pub fn from_wire_id(id: u16) -> Option<Self> {
        match id {
            1 => Some(Self::Aes128Ccm),
            2 => Some(Self::Aes128Gcm),
            3 => Some(Self::Aes256Ccm),
            4 => Some(Self::Aes256Gcm),
            _ => None,
        }
    }

    /// Key length in bytes (16 or 32); the KDF's L is this times eight.
    pub fn key_len(self) -> usize {
        match self {
            Self::Aes128Ccm | Self::Aes128Gcm => 16,
            Self::Aes256Ccm | Self::Aes256Gcm => 32,
        }
    }

    /// How many leading bytes of the transform header's 16-byte Nonce field the AEAD uses.
    pub fn nonce_len(self) -> usize {
        match self {
            Self::Aes128Ccm | Self::Aes256Ccm => 11,
            Self::Aes128Gcm | Self::Aes256Gcm => 12,
        }
    }
}
