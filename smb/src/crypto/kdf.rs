//! SP800-108 key derivation in counter mode with HMAC-SHA256 as the PRF, as MS-SMB2 3.1.4.2
//! uses it: `K(i) = HMAC(Ki, [i]_32 || Label || 0x00 || Context || [L]_32)`, r = 32.

use ring::hmac;

/// Largest output this KDF will produce (bytes). SMB needs at most 32; the bound keeps the
/// counter and L fields far from overflow.
pub const MAX_KDF_OUTPUT: usize = 64;
const _: () = assert!(MAX_KDF_OUTPUT.is_multiple_of(32));

/// Derives `out.len()` bytes from `key` with the given label and context.
///
/// `label` and `context` are passed *without* their SMB trailing NUL handling: MS-SMB2 writes
/// labels like `"SMB2AESCMAC\0"` with the terminator included in the label, and the KDF itself
/// inserts one more 0x00 separator, so callers pass the label bytes exactly as the spec lists
/// them (including the terminator). `out.len()` must be at most [`MAX_KDF_OUTPUT`]; longer
/// requests are truncated to that bound (callers in this crate ask for 16 or 32).
pub fn kdf_counter_hmac_sha256(key: &[u8], label: &[u8], context: &[u8], out: &mut [u8]) {
    let out_len = out.len().min(MAX_KDF_OUTPUT);
    let l_bits = u32::try_from(out_len * 8).unwrap_or(u32::MAX);
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    // The first `out_len` bytes: MAX_KDF_OUTPUT is a whole number of 32-byte blocks, so
    // that many chunks end exactly there.
    for (i, chunk) in out.chunks_mut(32).take(MAX_KDF_OUTPUT / 32).enumerate() {
        let counter = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let mut ctx = hmac::Context::with_key(&k);
        ctx.update(&counter.to_be_bytes());
        ctx.update(label);
        ctx.update(&[0u8]);
        ctx.update(context);
        ctx.update(&l_bits.to_be_bytes());
        let tag = ctx.sign();
        // K(i) has 32 bytes; a last, shorter chunk takes its first ones.
        for (o, t) in chunk.iter_mut().zip(tag.as_ref()) {
            *o = *t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// MS open specifications blog "SMB 3.1.1 pre-authentication integrity in Windows 10":
    /// session key, final preauth hash, and the resulting signing key.
    #[test]
    fn smb311_signing_key_vector() {
        let key = unhex("419FDDF34C1E001909D362AE7FB6AF79");
        let ctx = unhex(
            "B23F3CBFD69487D9832B79B1594A367CDD950909B774C3A4C412B4FCEA9EDDDBA7DB256BA2EA30E9\
             77F11F9B113247578E0E915C6D2A513B8F2FCA5707DC8770",
        );
        let mut out = [0u8; 16];
        kdf_counter_hmac_sha256(&key, b"SMBSigningKey\0", &ctx, &mut out);
        assert_eq!(out.to_vec(), unhex("8765949DFEAEE105CE9118B45BE988F0"));
    }

    /// MS blog "Encryption in SMB 3.0: a protocol perspective".
    #[test]
    fn smb30_encryption_keys_vector() {
        let key = unhex("B4546771B515F766A86735532DD6C4F0");
        let mut out = [0u8; 16];
        kdf_counter_hmac_sha256(&key, b"SMB2AESCCM\0", b"ServerIn \0", &mut out);
        assert_eq!(out.to_vec(), unhex("261B72350558F2E9DCF613070383EDBF"));
        kdf_counter_hmac_sha256(&key, b"SMB2AESCCM\0", b"ServerOut\0", &mut out);
        assert_eq!(out.to_vec(), unhex("8FE2B57EC34D2DB5B1A9727F526BBDB5"));
    }

    #[test]
    fn longer_output_uses_l_in_every_block() {
        // A 256-bit request is one HMAC block with L = 256, not the 128-bit key extended.
        let key = [7u8; 16];
        let mut a = [0u8; 16];
        let mut b = [0u8; 32];
        kdf_counter_hmac_sha256(&key, b"x\0", b"y\0", &mut a);
        kdf_counter_hmac_sha256(&key, b"x\0", b"y\0", &mut b);
        assert_ne!(a[..], b[..16]);
        let mut big = [0u8; 200];
        kdf_counter_hmac_sha256(&key, b"x\0", b"y\0", &mut big);
        assert!(big[MAX_KDF_OUTPUT..].iter().all(|&x| x == 0));
    }
}
