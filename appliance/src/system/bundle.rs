//! The firmware update bundle format, parsed and verified without I/O.
//!
//! A bundle is what `image/build.sh` produces next to the disk image and what an admin
//! uploads to `POST /api/v1/system/update`:
//!
//! ```text
//! magic      8 bytes   "QRYBNDL1"
//! length     u32 LE    manifest length M (at most MAX_MANIFEST_BYTES)
//! manifest   M bytes   JSON, see [`Manifest`]
//! signature  64 bytes  Ed25519 over SIGNING_CONTEXT || manifest
//! payload    the root slot image (erofs), exactly manifest.root_size bytes
//! ```
//!
//! The signature covers the manifest, and the manifest pins the payload's size and
//! SHA-256, so the header is verified before a single payload byte is written and the
//! payload is verified as it streams to the slot. Why a custom format rather than a tar:
//! the header is tiny, fixed-order and verifiable before any write.

use ring::signature::{UnparsedPublicKey, ED25519};
use serde::{Deserialize, Serialize};

/// First bytes of every bundle.
pub const MAGIC: &[u8; 8] = b"QRYBNDL1";
/// Upper bound on the manifest (it is a few hundred bytes; this stops a hostile length).
pub const MAX_MANIFEST_BYTES: usize = 64 * 1024;
/// Ed25519 signature length.
pub const SIGNATURE_BYTES: usize = 64;
/// Domain separation: a signature over anything else never verifies as a bundle.
pub const SIGNING_CONTEXT: &[u8] = b"quarry-bundle-v1\0";
/// The manifest `format` this code understands.
pub const FORMAT_VERSION: u32 = 1;
/// Largest root image a bundle may carry (the slots are 640 MiB).
pub const MAX_ROOT_BYTES: u64 = 640 * 1024 * 1024;
/// Length limit of the version and kernel strings (they end up in file names).
const MAX_NAME_CHARS: usize = 64;

/// What a bundle says about its payload; signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Bundle format version ([`FORMAT_VERSION`]).
    pub format: u32,
    /// Image version, shown in the API and boot menu and compared by systemd-boot.
    pub version: String,
    /// Kernel release inside the root image (`/boot/vmlinuz-KERNEL`).
    pub kernel: String,
    /// Exact payload length in bytes.
    pub root_size: u64,
    /// SHA-256 of the payload, lower-case hex.
    pub root_sha256: String,
}

/// Why a bundle was refused. Every variant is the uploader's fault (a 4xx).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BundleError {
    /// The stream does not start with [`MAGIC`].
    #[error("not a Quarry update bundle (bad magic)")]
    BadMagic,
    /// The stream ended inside the header.
    #[error("bundle truncated in its header")]
    Truncated,
    /// The manifest length field is out of bounds.
    #[error("manifest length {0} is out of bounds")]
    ManifestLength(usize),
    /// The manifest is not valid JSON of the expected shape.
    #[error("invalid manifest: {0}")]
    Manifest(String),
    /// The Ed25519 signature does not verify with the image's key.
    #[error("bad signature: the bundle was not signed with this appliance's update key")]
    BadSignature,
    /// The payload is longer or shorter than the manifest says.
    #[error("payload size mismatch: manifest says {expected} bytes, got {actual}")]
    SizeMismatch {
        /// Size in the manifest.
        expected: u64,
        /// Size received.
        actual: u64,
    },
    /// The payload's SHA-256 differs from the manifest's.
    #[error("payload checksum mismatch (SHA-256)")]
    ChecksumMismatch,
}

/// A parsed and signature-checked bundle header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedHeader {
    /// The signed manifest.
    pub manifest: Manifest,
    /// Bytes of header consumed; the payload starts here.
    pub header_len: usize,
}

/// Outcome of looking at the start of a stream.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderParse {
    /// More bytes are needed; at least this many in total.
    NeedMore(usize),
    /// The header is complete and verified.
    Done(VerifiedHeader),
}

/// Parses and verifies the header at the start of `buf` against the raw 32-byte
/// Ed25519 `public_key`. Call again with more bytes on `NeedMore`.
pub fn parse_header(buf: &[u8], public_key: &[u8]) -> Result<HeaderParse, BundleError> {
    let prefix = MAGIC.len() + 4;
    let Some(magic) = buf.get(..MAGIC.len()) else {
        return if MAGIC.starts_with(buf) {
            Ok(HeaderParse::NeedMore(prefix))
        } else {
            Err(BundleError::BadMagic)
        };
    };
    if magic != MAGIC {
        return Err(BundleError::BadMagic);
    }
    let Some(len_bytes) = buf.get(MAGIC.len()..prefix) else {
        return Ok(HeaderParse::NeedMore(prefix));
    };
    let mut len = [0u8; 4];
    len.copy_from_slice(len_bytes);
    let manifest_len = u32::from_le_bytes(len) as usize;
    if manifest_len == 0 || manifest_len > MAX_MANIFEST_BYTES {
        return Err(BundleError::ManifestLength(manifest_len));
    }
    let header_len = prefix + manifest_len + SIGNATURE_BYTES;
    let (Some(manifest_bytes), Some(signature)) = (
        buf.get(prefix..prefix + manifest_len),
        buf.get(prefix + manifest_len..header_len),
    ) else {
        return Ok(HeaderParse::NeedMore(header_len));
    };
    let mut signed = Vec::with_capacity(SIGNING_CONTEXT.len() + manifest_len);
    signed.extend_from_slice(SIGNING_CONTEXT);
    signed.extend_from_slice(manifest_bytes);
    UnparsedPublicKey::new(&ED25519, public_key)
        .verify(&signed, signature)
        .map_err(|_| BundleError::BadSignature)?;
    let manifest: Manifest =
        serde_json::from_slice(manifest_bytes).map_err(|e| BundleError::Manifest(e.to_string()))?;
    validate(&manifest)?;
    Ok(HeaderParse::Done(VerifiedHeader {
        manifest,
        header_len,
    }))
}

/// Checks the manifest's fields (even signed input is kept within bounds).
fn validate(m: &Manifest) -> Result<(), BundleError> {
    let bad = |what: &str| Err(BundleError::Manifest(what.to_string()));
    if m.format != FORMAT_VERSION {
        return bad("unsupported format version");
    }
    for (name, value) in [("version", &m.version), ("kernel", &m.kernel)] {
        let ok = !value.is_empty()
            && value.len() <= MAX_NAME_CHARS
            && !value.starts_with('.')
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+' | '~'));
        if !ok {
            return Err(BundleError::Manifest(format!(
                "{name} must be 1-{MAX_NAME_CHARS} characters of [A-Za-z0-9.+_~-]"
            )));
        }
    }
    if m.root_size == 0 || m.root_size > MAX_ROOT_BYTES {
        return bad("root_size out of bounds");
    }
    if m.root_sha256.len() != 64
        || !m
            .root_sha256
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
    {
        return bad("root_sha256 must be 64 lower-case hex digits");
    }
    Ok(())
}

/// Streams the payload through SHA-256 and checks it against the manifest at the end.
pub struct PayloadVerifier {
    expected_size: u64,
    expected_sha256: String,
    seen: u64,
    digest: ring::digest::Context,
}

impl PayloadVerifier {
    /// Starts verifying the payload the manifest describes.
    pub fn new(manifest: &Manifest) -> PayloadVerifier {
        PayloadVerifier {
            expected_size: manifest.root_size,
            expected_sha256: manifest.root_sha256.clone(),
            seen: 0,
            digest: ring::digest::Context::new(&ring::digest::SHA256),
        }
    }

    /// Accounts for the next payload bytes; refuses as soon as the payload is too long.
    pub fn update(&mut self, chunk: &[u8]) -> Result<(), BundleError> {
        self.seen += chunk.len() as u64;
        if self.seen > self.expected_size {
            return Err(BundleError::SizeMismatch {
                expected: self.expected_size,
                actual: self.seen,
            });
        }
        self.digest.update(chunk);
        Ok(())
    }

    /// Bytes seen so far.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Final check once the stream ended.
    pub fn finish(self) -> Result<(), BundleError> {
        if self.seen != self.expected_size {
            return Err(BundleError::SizeMismatch {
                expected: self.expected_size,
                actual: self.seen,
            });
        }
        if hex::encode(self.digest.finish().as_ref()) != self.expected_sha256 {
            return Err(BundleError::ChecksumMismatch);
        }
        Ok(())
    }
}

/// Parses the public key file shipped in the image (64 hex digits, whitespace ignored).
pub fn parse_public_key_hex(text: &str) -> Option<[u8; 32]> {
    let bytes = hex::decode(text.trim()).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{Ed25519KeyPair, KeyPair};

    fn keypair() -> Ed25519KeyPair {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).unwrap()
    }

    fn bundle(key: &Ed25519KeyPair, payload: &[u8], tamper: impl Fn(&mut Manifest)) -> Vec<u8> {
        let mut m = Manifest {
            format: 1,
            version: "0.1.1".into(),
            kernel: "6.1.0-56-amd64".into(),
            root_size: payload.len() as u64,
            root_sha256: hex::encode(ring::digest::digest(&ring::digest::SHA256, payload).as_ref()),
        };
        tamper(&mut m);
        let json = serde_json::to_vec(&m).unwrap();
        let mut signed = SIGNING_CONTEXT.to_vec();
        signed.extend_from_slice(&json);
        let sig = key.sign(&signed);
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(json.len() as u32).to_le_bytes());
        out.extend_from_slice(&json);
        out.extend_from_slice(sig.as_ref());
        out.extend_from_slice(payload);
        out
    }

    fn parse_all(b: &[u8], pk: &[u8]) -> Result<VerifiedHeader, BundleError> {
        match parse_header(b, pk)? {
            HeaderParse::Done(h) => Ok(h),
            HeaderParse::NeedMore(_) => Err(BundleError::Truncated),
        }
    }

    #[test]
    fn good_bundle_verifies_and_payload_checks() {
        let k = keypair();
        let payload = vec![7u8; 10_000];
        let b = bundle(&k, &payload, |_| {});
        let h = parse_all(&b, k.public_key().as_ref()).unwrap();
        assert_eq!(h.manifest.version, "0.1.1");
        let mut v = PayloadVerifier::new(&h.manifest);
        for chunk in b[h.header_len..].chunks(333) {
            v.update(chunk).unwrap();
        }
        v.finish().unwrap();
    }

    #[test]
    fn header_arrives_in_pieces() {
        let k = keypair();
        let b = bundle(&k, b"payload", |_| {});
        let pk = k.public_key().as_ref().to_vec();
        let mut need = 0;
        for n in 0..b.len() {
            match parse_header(&b[..n], &pk).unwrap() {
                HeaderParse::NeedMore(total) => {
                    assert!(total > n);
                    need = total;
                }
                HeaderParse::Done(h) => {
                    assert_eq!(n, need);
                    assert_eq!(h.header_len, n);
                    return;
                }
            }
        }
        panic!("header never completed");
    }

    #[test]
    fn wrong_key_is_refused() {
        let signer = keypair();
        let other = keypair();
        let b = bundle(&signer, b"payload", |_| {});
        assert_eq!(
            parse_all(&b, other.public_key().as_ref()),
            Err(BundleError::BadSignature)
        );
    }

    #[test]
    fn tampered_manifest_is_refused() {
        let k = keypair();
        let mut b = bundle(&k, b"payload", |_| {});
        // Flip a byte inside the manifest's version string.
        let pos = b.windows(5).position(|w| w == b"0.1.1").unwrap();
        b[pos] = b'9';
        assert_eq!(
            parse_all(&b, k.public_key().as_ref()),
            Err(BundleError::BadSignature)
        );
    }

    #[test]
    fn payload_checksum_and_size_are_enforced() {
        let k = keypair();
        let b = bundle(&k, b"payload", |_| {});
        let h = parse_all(&b, k.public_key().as_ref()).unwrap();
        let mut v = PayloadVerifier::new(&h.manifest);
        v.update(b"paylaod").unwrap();
        assert_eq!(v.finish(), Err(BundleError::ChecksumMismatch));
        let mut v = PayloadVerifier::new(&h.manifest);
        v.update(b"payloa").unwrap();
        assert!(matches!(v.finish(), Err(BundleError::SizeMismatch { .. })));
        let mut v = PayloadVerifier::new(&h.manifest);
        assert!(matches!(
            v.update(b"payload+extra"),
            Err(BundleError::SizeMismatch { .. })
        ));
    }

    #[test]
    fn hostile_headers_are_refused() {
        let k = keypair();
        let pk = k.public_key().as_ref().to_vec();
        assert_eq!(parse_header(b"NOTABUND", &pk), Err(BundleError::BadMagic));
        assert_eq!(parse_header(b"QRY", &pk), Ok(HeaderParse::NeedMore(12)));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            parse_header(&huge, &pk),
            Err(BundleError::ManifestLength(_))
        ));
        // Signed but nonsensical manifests are still refused.
        let b = bundle(&k, b"x", |m| m.version = "../../etc".into());
        assert!(matches!(parse_all(&b, &pk), Err(BundleError::Manifest(_))));
        let b = bundle(&k, b"x", |m| m.root_size = MAX_ROOT_BYTES + 1);
        assert!(matches!(parse_all(&b, &pk), Err(BundleError::Manifest(_))));
    }

    #[test]
    fn public_key_file_parses() {
        let hexkey = "ab".repeat(32);
        assert_eq!(
            parse_public_key_hex(&format!("{hexkey}\n")),
            Some([0xab; 32])
        );
        assert_eq!(parse_public_key_hex("abcd"), None);
    }
}
