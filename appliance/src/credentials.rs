//! Secrets at rest: slow password hashes for web logins, NT hashes for SMB NTLMv2, and
//! random API tokens stored only as SHA-256 digests. No plain password or token is ever
//! stored or logged; the plain value exists only in the request that carries it.

use std::num::NonZeroU32;

use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use base64::Engine;
use md4::{Digest, Md4};
use ring::rand::{SecureRandom, SystemRandom};
use ring::{digest, pbkdf2};

/// PBKDF2-HMAC-SHA256 iterations for web passwords (OWASP 2023 recommendation).
pub const PBKDF2_ITERATIONS: u32 = 600_000;
/// Salt length for password hashes.
const SALT_LEN: usize = 16;
/// Length of a derived password hash.
const HASH_LEN: usize = 32;
/// Random bytes in an API token (256 bits: brute force is out of the question, so a fast
/// hash at rest is enough).
const TOKEN_BYTES: usize = 32;
/// Prefix that makes Quarry tokens recognisable to secret scanners.
pub const TOKEN_PREFIX: &str = "qry_";
/// Scheme tag of the stored password hash format.
const SCHEME: &str = "pbkdf2-sha256";

/// Errors from the credential helpers.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The system random number generator failed (should never happen on Linux).
    #[error("system random number generator failed")]
    Random,
}

fn random_bytes<const N: usize>() -> Result<[u8; N], CredentialError> {
    let mut buf = [0u8; N];
    SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| CredentialError::Random)?;
    Ok(buf)
}

/// Hashes a web password as `pbkdf2-sha256$ITER$SALT$HASH` (base64, no padding).
pub fn hash_password(password: &str) -> Result<String, CredentialError> {
    let salt: [u8; SALT_LEN] = random_bytes()?;
    Ok(hash_with(password, &salt, PBKDF2_ITERATIONS))
}

fn hash_with(password: &str, salt: &[u8], iterations: u32) -> String {
    let mut out = [0u8; HASH_LEN];
    let iters = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iters,
        salt,
        password.as_bytes(),
        &mut out,
    );
    format!(
        "{SCHEME}${iterations}${}${}",
        STANDARD_NO_PAD.encode(salt),
        STANDARD_NO_PAD.encode(out)
    )
}

/// Checks a password against a stored hash in constant time. A malformed stored hash
/// never verifies.
pub fn verify_password(password: &str, stored: &str) -> bool {
    let mut parts = stored.split('$');
    let (Some(scheme), Some(iters), Some(salt), Some(hash), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return false;
    };
    if scheme != SCHEME {
        return false;
    }
    let (Ok(iters), Ok(salt), Ok(hash)) = (
        iters.parse::<u32>(),
        STANDARD_NO_PAD.decode(salt),
        STANDARD_NO_PAD.decode(hash),
    ) else {
        return false;
    };
    let Some(iters) = NonZeroU32::new(iters) else {
        return false;
    };
    pbkdf2::verify(
        pbkdf2::PBKDF2_HMAC_SHA256,
        iters,
        &salt,
        password.as_bytes(),
        &hash,
    )
    .is_ok()
}

/// The NT one-way function: MD4 of the UTF-16LE password (MS-NLMP 3.3.1). NTLMv2 needs
/// it on the server, so it is stored for every user; it is as sensitive as a password.
pub fn nt_hash(password: &str) -> [u8; 16] {
    let utf16: Vec<u8> = password.encode_utf16().flat_map(u16::to_le_bytes).collect();
    Md4::digest(&utf16).into()
}

/// A freshly generated API token: the plain value is shown to the caller once; only the
/// digest is stored.
pub struct NewToken {
    /// The value the client sends as `Authorization: Bearer ...`.
    pub plain: String,
    /// SHA-256 of `plain`, hex, as stored in the database.
    pub digest: String,
}

/// Generates a random API/session token.
pub fn new_token() -> Result<NewToken, CredentialError> {
    let bytes: [u8; TOKEN_BYTES] = random_bytes()?;
    let plain = format!("{TOKEN_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let digest = token_digest(&plain);
    Ok(NewToken { plain, digest })
}

/// The stored form of a token: hex SHA-256.
pub fn token_digest(plain: &str) -> String {
    hex::encode(digest::digest(&digest::SHA256, plain.as_bytes()))
}

/// A random password for the first-start admin account: 20 characters from an
/// unambiguous alphabet (about 113 bits).
pub fn random_password() -> Result<String, CredentialError> {
    const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
    let bytes: [u8; 20] = random_bytes()?;
    Ok(bytes
        .iter()
        .filter_map(|b| ALPHABET.get(usize::from(*b) % ALPHABET.len()))
        .map(|&c| char::from(c))
        .collect())
}

/// A random opaque string (CSRF tokens, ids).
pub fn random_id() -> Result<String, CredentialError> {
    let bytes: [u8; 18] = random_bytes()?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nt_hash_matches_ms_nlmp_vector() {
        // MS-NLMP 4.2.2.1.2: NTOWFv1("Password").
        assert_eq!(
            hex::encode(nt_hash("Password")),
            "a4f49c406510bdcab6824ee7c30fd852"
        );
    }

    #[test]
    fn password_hash_round_trip_and_rejects_wrong() {
        let stored = hash_with("s3cret", b"0123456789abcdef", 1000);
        assert!(verify_password("s3cret", &stored));
        assert!(!verify_password("s3cret ", &stored));
        assert!(!verify_password("s3cret", "garbage"));
        assert!(!verify_password("s3cret", "pbkdf2-sha256$0$AA$AA"));
    }

    #[test]
    fn salts_differ_between_hashes() {
        let a = hash_with("x", b"aaaaaaaaaaaaaaaa", 1000);
        let b = hash_with("x", b"bbbbbbbbbbbbbbbb", 1000);
        assert_ne!(a, b);
    }

    #[test]
    fn token_digest_is_stable_and_tokens_unique() {
        let t1 = new_token().unwrap();
        let t2 = new_token().unwrap();
        assert_ne!(t1.plain, t2.plain);
        assert!(t1.plain.starts_with(TOKEN_PREFIX));
        assert_eq!(token_digest(&t1.plain), t1.digest);
    }
}
