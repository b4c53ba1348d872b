//! Per-session keys for each dialect family (MS-SMB2 3.3.5.5.3, "Session.SigningKey" etc.).
//!
//! All keys are from the *server's* point of view: [`SessionKeys::encryption`] seals what the
//! server sends (server-to-client), [`SessionKeys::decryption`] opens what the client sends.

use super::kdf::kdf_counter_hmac_sha256;
use super::preauth::PREAUTH_HASH_LEN;
use super::Cipher;

/// Length of the signing and application keys (bytes).
pub const SIGNING_KEY_LEN: usize = 16;
/// Longest cipher key (AES-256).
pub const MAX_CIPHER_KEY_LEN: usize = 32;

/// Which key schedule applies. 3.0 and 3.0.2 share one; 3.1.1 needs the session's final
/// preauth integrity hash (the hash *before* the final SESSION_SETUP response, MS-SMB2 3.3.5.5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyDialect {
    /// 2.0.2 and 2.1: the session key is the signing key; no encryption.
    Smb2,
    /// 3.0 and 3.0.2: constant labels and contexts.
    Smb30,
    /// 3.1.1: labels with the preauth hash as context.
    Smb311 {
        /// The session's preauth integrity hash value.
        preauth_hash: [u8; PREAUTH_HASH_LEN],
    },
}

impl KeyDialect {
    /// Maps a negotiated DialectRevision (0x0202, 0x0210, 0x0300, 0x0302, 0x0311) to its key
    /// schedule; 3.1.1 needs the session's preauth hash. `None` for unknown dialects or 3.1.1
    /// without a hash.
    pub fn for_dialect(
        dialect: u16,
        preauth_hash: Option<&[u8; PREAUTH_HASH_LEN]>,
    ) -> Option<Self> {
        match dialect {
            0x0202 | 0x0210 => Some(Self::Smb2),
            0x0300 | 0x0302 => Some(Self::Smb30),
            0x0311 => preauth_hash.map(|h| Self::Smb311 { preauth_hash: *h }),
            _ => None,
        }
    }
}

/// The keys of one authenticated session (or one channel, for the signing key).
#[derive(Clone, PartialEq, Eq)]
pub struct SessionKeys {
    signing: [u8; SIGNING_KEY_LEN],
    application: [u8; SIGNING_KEY_LEN],
    encryption: [u8; MAX_CIPHER_KEY_LEN],
    decryption: [u8; MAX_CIPHER_KEY_LEN],
    /// The cipher keys are AES-256 keys (all of `encryption` and `decryption`), not AES-128
    /// ones (their first 16 bytes).
    wide_cipher_keys: bool,
    has_cipher_keys: bool,
}

impl std::fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("SessionKeys")
            .field("cipher_key_len", &self.cipher_key_len())
            .field("has_cipher_keys", &self.has_cipher_keys)
            .finish_non_exhaustive()
    }
}

impl SessionKeys {
    /// Derives all keys from the authentication's session key (for NTLM, the 16-byte
    /// ExportedSessionKey).
    ///
    /// `cipher` is the connection's negotiated cipher; it only matters for 3.1.1, where an
    /// AES-256 cipher makes the encryption keys 256 bits (L = 256 and the full session key as
    /// Ki). For 3.0/3.0.2 the cipher is always AES-128-CCM and the keys 128 bits.
    pub fn derive(session_key: &[u8], dialect: KeyDialect, cipher: Option<Cipher>) -> Self {
        let mut keys = Self {
            signing: [0; SIGNING_KEY_LEN],
            application: [0; SIGNING_KEY_LEN],
            encryption: [0; MAX_CIPHER_KEY_LEN],
            decryption: [0; MAX_CIPHER_KEY_LEN],
            wide_cipher_keys: false,
            has_cipher_keys: false,
        };
        // MS-SMB2 3.3.5.5.3: Session.SessionKey is the first 16 bytes of the cryptographic key,
        // right-padded with zeros if shorter; it is the KDF input for 128-bit keys.
        let mut short = [0u8; 16];
        for (s, k) in short.iter_mut().zip(session_key) {
            *s = *k;
        }
        match dialect {
            KeyDialect::Smb2 => {
                keys.signing = short;
                keys.application = short;
            }
            KeyDialect::Smb30 => {
                kdf_counter_hmac_sha256(&short, b"SMB2AESCMAC\0", b"SmbSign\0", &mut keys.signing);
                kdf_counter_hmac_sha256(&short, b"SMB2APP\0", b"SmbRpc\0", &mut keys.application);
                kdf_counter_hmac_sha256(
                    &short,
                    b"SMB2AESCCM\0",
                    b"ServerOut\0",
                    &mut keys.encryption[..16],
                );
                kdf_counter_hmac_sha256(
                    &short,
                    b"SMB2AESCCM\0",
                    b"ServerIn \0",
                    &mut keys.decryption[..16],
                );
                keys.has_cipher_keys = true;
            }
            KeyDialect::Smb311 { preauth_hash } => {
                let ctx = &preauth_hash[..];
                kdf_counter_hmac_sha256(&short, b"SMBSigningKey\0", ctx, &mut keys.signing);
                kdf_counter_hmac_sha256(&short, b"SMBAppKey\0", ctx, &mut keys.application);
                let wide = cipher.is_some_and(|c| c.key_len() == MAX_CIPHER_KEY_LEN);
                // For 256-bit keys MS-SMB2 uses the full session key as Ki.
                let ki: &[u8] = if wide { session_key } else { &short };
                let enc = cipher_key_mut(&mut keys.encryption, wide);
                kdf_counter_hmac_sha256(ki, b"SMBS2CCipherKey\0", ctx, enc);
                let dec = cipher_key_mut(&mut keys.decryption, wide);
                kdf_counter_hmac_sha256(ki, b"SMBC2SCipherKey\0", ctx, dec);
                keys.wide_cipher_keys = wide;
                keys.has_cipher_keys = true;
            }
        }
        keys
    }

    /// Key for signing and verifying messages of this session.
    pub fn signing(&self) -> &[u8; SIGNING_KEY_LEN] {
        &self.signing
    }

    /// The application key (exposed to RPC over named pipes, MS-SMB2 3.3.1.8).
    pub fn application(&self) -> &[u8; SIGNING_KEY_LEN] {
        &self.application
    }

    /// Key the server seals its responses with (server-to-client); `None` for 2.x.
    pub fn encryption(&self) -> Option<&[u8]> {
        self.has_cipher_keys
            .then(|| cipher_key(&self.encryption, self.wide_cipher_keys))
    }

    /// Key the server opens client requests with (client-to-server); `None` for 2.x.
    pub fn decryption(&self) -> Option<&[u8]> {
        self.has_cipher_keys
            .then(|| cipher_key(&self.decryption, self.wide_cipher_keys))
    }

    /// Length of the cipher keys (16 or 32 bytes).
    fn cipher_key_len(&self) -> usize {
        cipher_key(&self.encryption, self.wide_cipher_keys).len()
    }
}

/// A cipher key in its buffer: all of it for AES-256 (`wide`), the first 16 bytes for AES-128.
fn cipher_key(buf: &[u8; MAX_CIPHER_KEY_LEN], wide: bool) -> &[u8] {
    if wide {
        buf
    } else {
        &buf[..16]
    }
}

/// [`cipher_key`], to derive the key into.
fn cipher_key_mut(buf: &mut [u8; MAX_CIPHER_KEY_LEN], wide: bool) -> &mut [u8] {
    if wide {
        buf
    } else {
        &mut buf[..16]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    const BLOG_311_HASH: &str = "B23F3CBFD69487D9832B79B1594A367CDD950909B774C3A4C412B4FCEA9EDDDB\
                                 A7DB256BA2EA30E977F11F9B113247578E0E915C6D2A513B8F2FCA5707DC8770";

    #[test]
    fn dialect_mapping() {
        assert_eq!(
            KeyDialect::for_dialect(0x0210, None),
            Some(KeyDialect::Smb2)
        );
        assert_eq!(
            KeyDialect::for_dialect(0x0302, None),
            Some(KeyDialect::Smb30)
        );
        assert_eq!(KeyDialect::for_dialect(0x0311, None), None);
        assert!(KeyDialect::for_dialect(0x0311, Some(&[0; 64])).is_some());
        assert_eq!(KeyDialect::for_dialect(0x02FF, None), None);
    }

    #[test]
    fn smb2_signing_key_is_session_key_padded() {
        let k = SessionKeys::derive(&[1, 2, 3], KeyDialect::Smb2, None);
        assert_eq!(&k.signing()[..4], &[1, 2, 3, 0]);
        assert!(k.encryption().is_none() && k.decryption().is_none());
    }

    /// MS blog "Encryption in SMB 3.0: a protocol perspective": the client's encryption key
    /// is the server's decryption key and vice versa.
    #[test]
    fn smb30_vectors() {
        let k = SessionKeys::derive(
            &unhex("B4546771B515F766A86735532DD6C4F0"),
            KeyDialect::Smb30,
            Some(Cipher::Aes128Ccm),
        );
        assert_eq!(
            k.decryption().unwrap(),
            unhex("261B72350558F2E9DCF613070383EDBF")
        );
        assert_eq!(
            k.encryption().unwrap(),
            unhex("8FE2B57EC34D2DB5B1A9727F526BBDB5")
        );
    }

    /// MS blog "SMB 3.1.1 encryption in Windows 10".
    #[test]
    fn smb311_vectors() {
        let mut h = [0u8; 64];
        h.copy_from_slice(&unhex(BLOG_311_HASH));
        let k = SessionKeys::derive(
            &unhex("419FDDF34C1E001909D362AE7FB6AF79"),
            KeyDialect::Smb311 { preauth_hash: h },
            Some(Cipher::Aes128Gcm),
        );
        assert_eq!(
            k.signing().to_vec(),
            unhex("8765949DFEAEE105CE9118B45BE988F0")
        );
        assert_eq!(
            k.decryption().unwrap(),
            unhex("A2F5E80E5D59103034F32E52F698E5EC")
        );
        assert_eq!(
            k.encryption().unwrap(),
            unhex("748C50868C90F302962A5C35F5F9A8BF")
        );
        assert_eq!(
            k.application().to_vec(),
            unhex("099D610789FBE82055B313601C3E8CC4")
        );
    }

    #[test]
    fn smb311_aes256_keys_are_32_bytes_and_differ_from_128() {
        let h = [9u8; 64];
        let k128 = SessionKeys::derive(&[5; 16], KeyDialect::Smb311 { preauth_hash: h }, None);
        let k256 = SessionKeys::derive(
            &[5; 16],
            KeyDialect::Smb311 { preauth_hash: h },
            Some(Cipher::Aes256Gcm),
        );
        assert_eq!(k256.encryption().unwrap().len(), 32);
        assert_ne!(
            k256.encryption().unwrap()[..16],
            *k128.encryption().unwrap()
        );
        assert_eq!(k128.signing(), k256.signing());
    }
}
