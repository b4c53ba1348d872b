//! NTLMv2 cryptography (MS-NLMP 3.3.2, 3.4.4, 3.4.5): NT hash, NTOWFv2, NTProofStr, session
//! base key, key exchange, MIC, and the GSS_GetMIC signature SPNEGO's mechListMIC uses.

use hmac::{Hmac, Mac};
use md4::Md4;
use md5::{Digest, Md5};
use rc4::{consts::U16, KeyInit, Rc4, StreamCipher};

type HmacMd5 = Hmac<Md5>;

/// UTF-16LE encoding, as NTLM uses for every string.
pub fn utf16le(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(u16::to_le_bytes).collect()
}

/// The NT hash: MD4 of the UTF-16LE password (MS-NLMP 3.3.1 NTOWFv1). This is what the
/// appliance stores and [`super::super::NtHashLookup`] returns.
pub fn nt_hash_from_password(password: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    out.copy_from_slice(&Md4::digest(utf16le(password)));
    out
}

/// HMAC-MD5 over the concatenation of `parts`.
pub fn hmac_md5(key: &[u8], parts: &[&[u8]]) -> [u8; 16] {
    // HMAC accepts keys of any length; new_from_slice cannot fail for HMAC.
    let mut mac = match <HmacMd5 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0u8; 16],
    };
    for p in parts {
        mac.update(p);
    }
    let mut out = [0u8; 16];
    out.copy_from_slice(&mac.finalize().into_bytes());
    out
}

/// Upper-cases the way Windows' RtlUpcaseUnicodeString does for NTOWFv2: character by
/// character, never changing the length (so 'ß' stays 'ß' where Rust's full mapping gives "SS").
pub fn upcase_like_windows(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut up = c.to_uppercase();
            match (up.next(), up.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}

/// NTOWFv2 = HMAC_MD5(NT hash, UTF-16LE(Uppercase(user) || domain)).
pub fn ntowfv2(nt_hash: &[u8; 16], user: &str, domain: &str) -> [u8; 16] {
    let mut ud = upcase_like_windows(user);
    ud.push_str(domain);
    hmac_md5(nt_hash, &[&utf16le(&ud)])
}

/// NTProofStr = HMAC_MD5(ResponseKeyNT, ServerChallenge || temp), where `temp` is the
/// client's NTLMv2_CLIENT_CHALLENGE blob (the NT response after its first 16 bytes).
pub fn nt_proof_str(
    response_key_nt: &[u8; 16],
    server_challenge: &[u8; 8],
    temp: &[u8],
) -> [u8; 16] {
    hmac_md5(response_key_nt, &[server_challenge, temp])
}

/// SessionBaseKey = HMAC_MD5(ResponseKeyNT, NTProofStr); for NTLMv2 it is also the
/// KeyExchangeKey.
pub fn session_base_key(response_key_nt: &[u8; 16], nt_proof: &[u8; 16]) -> [u8; 16] {
    hmac_md5(response_key_nt, &[nt_proof])
}

/// RC4 with a 16-byte key over `data`, in place (used for key exchange and sealing).
pub fn rc4_in_place(key: &[u8; 16], data: &mut [u8]) {
    let mut c = Rc4::<U16>::new(key.into());
    c.apply_keystream(data);
}

/// The AUTHENTICATE MIC: HMAC_MD5(ExportedSessionKey, NEGOTIATE || CHALLENGE || AUTHENTICATE
/// with its MIC field zeroed).
pub fn compute_mic(
    exported_session_key: &[u8; 16],
    negotiate: &[u8],
    challenge: &[u8],
    authenticate_zeroed: &[u8],
) -> [u8; 16] {
    hmac_md5(
        exported_session_key,
        &[negotiate, challenge, authenticate_zeroed],
    )
}

fn md5_key(key: &[u8; 16], magic: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(key);
    h.update(magic);
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.finalize());
    out
}

const CLIENT_SIGN_MAGIC: &[u8] = b"session key to client-to-server signing key magic constant\0";
const SERVER_SIGN_MAGIC: &[u8] = b"session key to server-to-client signing key magic constant\0";
const CLIENT_SEAL_MAGIC: &[u8] = b"session key to client-to-server sealing key magic constant\0";
const SERVER_SEAL_MAGIC: &[u8] = b"session key to server-to-client sealing key magic constant\0";

/// The four NTLM session-security keys (MS-NLMP 3.4.5.2, 3.4.5.3), for 128-bit sealing with
/// extended session security: the only combination SPNEGO's mechListMIC needs here.
#[derive(Clone, PartialEq, Eq)]
pub struct SessionSecurityKeys {
    /// ClientSigningKey.
    pub client_signing: [u8; 16],
    /// ServerSigningKey.
    pub server_signing: [u8; 16],
    /// ClientSealingKey.
    pub client_sealing: [u8; 16],
    /// ServerSealingKey.
    pub server_sealing: [u8; 16],
}

impl SessionSecurityKeys {
    /// Derives the keys from the ExportedSessionKey and the negotiated flags (which decide how
    /// much of the key the sealing keys use: 128, 56 or 40 bits).
    pub fn derive(exported_session_key: &[u8; 16], negotiated_flags: u32) -> Self {
        let seal_key: &[u8] = if negotiated_flags & super::flags::N128 != 0 {
            exported_session_key
        } else if negotiated_flags & super::flags::N56 != 0 {
            &exported_session_key[..7]
        } else {
            &exported_session_key[..5]
        };
        let seal = |magic: &[u8]| {
            let mut h = Md5::new();
            h.update(seal_key);
            h.update(magic);
            let mut out = [0u8; 16];
            out.copy_from_slice(&h.finalize());
            out
        };
        Self {
            client_signing: md5_key(exported_session_key, CLIENT_SIGN_MAGIC),
            server_signing: md5_key(exported_session_key, SERVER_SIGN_MAGIC),
            client_sealing: seal(CLIENT_SEAL_MAGIC),
            server_sealing: seal(SERVER_SEAL_MAGIC),
        }
    }
}

/// GSS_GetMIC with extended session security (MS-NLMP 3.4.4.2): Version 1, the first 8 bytes
/// of HMAC_MD5(SigningKey, SeqNum || message), RC4-encrypted with a fresh sealing handle when
/// `key_exch` was negotiated, then SeqNum. SPNEGO's mechListMIC is the first message of each
/// direction, so the RC4 handle is new and SeqNum is 0.
pub fn gss_get_mic(
    signing_key: &[u8; 16],
    sealing_key: &[u8; 16],
    key_exch: bool,
    seq_num: u32,
    message: &[u8],
) -> [u8; 16] {
    let seq = seq_num.to_le_bytes();
    let mac = hmac_md5(signing_key, &[&seq, message]);
    let mut checksum = [0u8; 8];
    checksum.copy_from_slice(&mac[..8]);
    if key_exch {
        rc4_in_place(sealing_key, &mut checksum);
    }
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(&1u32.to_le_bytes());
    out[4..12].copy_from_slice(&checksum);
    out[12..].copy_from_slice(&seq);
    out
}

/// Compares two byte strings in time independent of where they differ.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// MS-NLMP 4.2.4: User "User", domain "Domain", password "Password", server challenge
    /// 0123456789abcdef, client challenge aa..., time 0, target info {NbDomain "Domain",
    /// NbComputer "Server"}.
    #[test]
    fn ms_nlmp_4_2_4_values() {
        let nt = nt_hash_from_password("Password");
        assert_eq!(nt.to_vec(), unhex("a4f49c406510bdcab6824ee7c30fd852"));
        let key = ntowfv2(&nt, "User", "Domain");
        assert_eq!(key.to_vec(), unhex("0c868a403bfd7a93a3001ef22ef02e3f"));
        assert_eq!(ntowfv2(&nt, "user", "Domain"), key);
        assert_ne!(ntowfv2(&nt, "User", "domain"), key);
        let mut temp = unhex("01010000000000000000000000000000aaaaaaaaaaaaaaaa00000000");
        temp.extend(unhex(
            "02000c0044006f006d00610069006e0001000c0053006500720076006500720000000000",
        ));
        temp.extend([0u8; 4]);
        let mut sc = [0u8; 8];
        sc.copy_from_slice(&unhex("0123456789abcdef"));
        let proof = nt_proof_str(&key, &sc, &temp);
        assert_eq!(proof.to_vec(), unhex("68cd0ab851e51c96aabc927bebef6a1c"));
        let base = session_base_key(&key, &proof);
        assert_eq!(base.to_vec(), unhex("8de40ccadbc14a82f15cb0ad0de95ca3"));
        let mut enc = [0x55u8; 16];
        rc4_in_place(&base, &mut enc);
        assert_eq!(enc.to_vec(), unhex("c5dad2544fc9799094ce1ce90bc9d03e"));
        let keys = SessionSecurityKeys::derive(&[0x55; 16], 0xe2888235);
        assert_eq!(
            keys.client_signing.to_vec(),
            unhex("4788dc861b4782f35d43fd98fe1a2d39")
        );
        assert_eq!(
            keys.client_sealing.to_vec(),
            unhex("59f600973cc4960a25480a7c196e4c58")
        );
    }

    #[test]
    fn upcase_keeps_length() {
        assert_eq!(upcase_like_windows("alice"), "ALICE");
        assert_eq!(upcase_like_windows("straße"), "STRAßE");
        assert_eq!(upcase_like_windows("élan"), "ÉLAN");
    }

    #[test]
    fn ct_eq_works() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
