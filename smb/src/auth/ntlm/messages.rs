//! NTLMSSP message codecs (MS-NLMP 2.2): NEGOTIATE (read), CHALLENGE (written), AUTHENTICATE
//! (read), AV pairs (both), and the NTLMv2 client-challenge blob (read).
//!
//! Every field offset is checked against the message; every count has a named limit.

use super::crypto::utf16le;
use super::flags;
use crate::auth::AuthError;
use crate::proto::wire::{le_u16_at, le_u16_units, le_u32_at};

/// "NTLMSSP\0".
pub const SIGNATURE: &[u8; 8] = b"NTLMSSP\0";
/// Largest NTLMSSP message accepted (bytes). Real AUTHENTICATE messages are well under 2 KiB.
pub const MAX_MESSAGE_LEN: usize = 16 * 1024;
/// Most AV pairs read from one list.
pub const MAX_AV_PAIRS: usize = 64;
/// Longest user, domain or workstation name accepted (UTF-16 code units).
pub const MAX_NAME_UNITS: usize = 256;
/// Offset of the MIC in an AUTHENTICATE message that carries one.
pub const AUTHENTICATE_MIC_OFFSET: usize = 72;
/// Length of the fixed AUTHENTICATE header when a Version and a MIC are present.
const AUTHENTICATE_HEADER_WITH_MIC: usize = 88;
/// Fixed part of an AUTHENTICATE message without Version/MIC.
const AUTHENTICATE_MIN: usize = 64;
/// Fixed part of a NEGOTIATE message (without Version).
const NEGOTIATE_MIN: usize = 16;
/// Fixed part of the CHALLENGE we write (with Version).
const CHALLENGE_HEADER: usize = 56;
/// Smallest NTLMv2 response: NTProofStr (16) + fixed blob header (28).
pub const NTLMV2_RESPONSE_MIN: usize = 16 + 28;

/// NTLMSSP message types.
pub mod message_type {
    /// NEGOTIATE_MESSAGE.
    pub const NEGOTIATE: u32 = 1;
    /// CHALLENGE_MESSAGE.
    pub const CHALLENGE: u32 = 2;
    /// AUTHENTICATE_MESSAGE.
    pub const AUTHENTICATE: u32 = 3;
}

/// AV pair ids (MS-NLMP 2.2.2.1).
pub mod av_id {
    /// MsvAvEOL.
    pub const EOL: u16 = 0;
    /// MsvAvNbComputerName.
    pub const NB_COMPUTER_NAME: u16 = 1;
    /// MsvAvNbDomainName.
    pub const NB_DOMAIN_NAME: u16 = 2;
    /// MsvAvDnsComputerName.
    pub const DNS_COMPUTER_NAME: u16 = 3;
    /// MsvAvDnsDomainName.
    pub const DNS_DOMAIN_NAME: u16 = 4;
    /// MsvAvFlags.
    pub const FLAGS: u16 = 6;
    /// MsvAvTimestamp.
    pub const TIMESTAMP: u16 = 7;
}

/// MsvAvFlags bit: the AUTHENTICATE message carries a MIC.
pub const AV_FLAG_MIC_PRESENT: u32 = 0x0000_0002;

/// The version this server reports (Windows-style 6.1 build 7600, NTLMSSP revision 15).
pub const SERVER_VERSION: [u8; 8] = [6, 1, 0xB0, 0x1D, 0, 0, 0, 0x0F];

/// A field past the end of the message.
const TRUNCATED_FIELD: AuthError = AuthError::Malformed("NTLMSSP: truncated field");

fn u16_at(b: &[u8], off: usize) -> Result<u16, AuthError> {
    le_u16_at(b, off).ok_or(TRUNCATED_FIELD)
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, AuthError> {
    le_u32_at(b, off).ok_or(TRUNCATED_FIELD)
}

/// Reads the message type of an NTLMSSP message after checking its signature and size.
pub fn message_type_of(msg: &[u8]) -> Result<u32, AuthError> {
    if msg.len() > MAX_MESSAGE_LEN {
        return Err(AuthError::TooLarge("NTLMSSP message"));
    }
    if msg.get(..8) != Some(&SIGNATURE[..]) {
        return Err(AuthError::Malformed("NTLMSSP: bad signature"));
    }
    u32_at(msg, 8)
}

/// Resolves a security buffer descriptor (Len u16, MaxLen u16, Offset u32) at `field` to its
/// bytes. An empty buffer resolves to an empty slice regardless of its offset.
fn buffer(msg: &[u8], field: usize) -> Result<&[u8], AuthError> {
    let len = usize::from(u16_at(msg, field)?);
    let off = usize::try_from(u32_at(msg, field + 4)?)
        .map_err(|_| AuthError::Malformed("NTLMSSP: buffer offset"))?;
    if len == 0 {
        return Ok(&[]);
    }
    let end = off
        .checked_add(len)
        .ok_or(AuthError::Malformed("NTLMSSP: buffer overflow"))?;
    msg.get(off..end)
        .ok_or(AuthError::Malformed("NTLMSSP: buffer outside message"))
}

fn buffer_offset(msg: &[u8], field: usize) -> Result<Option<usize>, AuthError> {
    let len = u16_at(msg, field)?;
    let off = u32_at(msg, field + 4)?;
    Ok((len != 0).then_some(off as usize))
}

/// Decodes a name field as UTF-16LE (when `unicode`) or OEM (taken as Latin-1/ASCII).
fn decode_name(bytes: &[u8], unicode: bool) -> Result<String, AuthError> {
    if unicode {
        if !bytes.len().is_multiple_of(2) {
            return Err(AuthError::Malformed("NTLMSSP: odd-length UTF-16 string"));
        }
        if bytes.len() / 2 > MAX_NAME_UNITS {
            return Err(AuthError::TooLarge("NTLMSSP name"));
        }
        char::decode_utf16(le_u16_units(bytes))
            .collect::<Result<String, _>>()
            .map_err(|_| AuthError::Malformed("NTLMSSP: invalid UTF-16"))
    } else {
        if bytes.len() > MAX_NAME_UNITS {
            return Err(AuthError::TooLarge("NTLMSSP name"));
        }
        Ok(bytes.iter().map(|&b| char::from(b)).collect())
    }
}

/// A parsed NEGOTIATE_MESSAGE: only the flags matter to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiate {
    /// The client's NegotiateFlags.
    pub flags: u32,
}

/// Parses a NEGOTIATE_MESSAGE.
pub fn parse_negotiate(msg: &[u8]) -> Result<Negotiate, AuthError> {
    if message_type_of(msg)? != message_type::NEGOTIATE {
        return Err(AuthError::UnexpectedMessage("expected NTLMSSP NEGOTIATE"));
    }
    if msg.len() < NEGOTIATE_MIN {
        return Err(AuthError::Malformed("NEGOTIATE: too short"));
    }
    Ok(Negotiate {
        flags: u32_at(msg, 12)?,
    })
}

/// Names and time the server puts in its CHALLENGE's target info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetInfo<'a> {
    /// MsvAvNbDomainName (and the CHALLENGE's TargetName).
    pub netbios_domain: &'a str,
    /// MsvAvNbComputerName.
    pub netbios_computer: &'a str,
    /// MsvAvDnsDomainName.
    pub dns_domain: &'a str,
    /// MsvAvDnsComputerName.
    pub dns_computer: &'a str,
    /// MsvAvTimestamp (FILETIME). Its presence tells clients to send a MIC.
    pub timestamp: u64,
}

fn push_av(out: &mut Vec<u8>, id: u16, value: &[u8]) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(value.len() as u16).to_le_bytes());
    out.extend_from_slice(value);
}

/// Encodes the target info AV pair list (Windows order: NbDomain, NbComputer, DnsDomain,
/// DnsComputer, Timestamp, EOL). Names longer than [`MAX_NAME_UNITS`] are truncated.
pub fn encode_target_info(ti: &TargetInfo<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    for (id, name) in [
        (av_id::NB_DOMAIN_NAME, ti.netbios_domain),
        (av_id::NB_COMPUTER_NAME, ti.netbios_computer),
        (av_id::DNS_DOMAIN_NAME, ti.dns_domain),
        (av_id::DNS_COMPUTER_NAME, ti.dns_computer),
    ] {
        let mut v = utf16le(name);
        v.truncate(MAX_NAME_UNITS * 2);
        push_av(&mut out, id, &v);
    }
    push_av(&mut out, av_id::TIMESTAMP, &ti.timestamp.to_le_bytes());
    push_av(&mut out, av_id::EOL, &[]);
    out
}

/// The flags the server answers with, given the client's: what both support, plus the flags
/// a CHALLENGE always carries.
pub fn challenge_flags(client: u32) -> u32 {
    let echoed = client
        & (flags::UNICODE
            | flags::SIGN
            | flags::SEAL
            | flags::ALWAYS_SIGN
            | flags::EXTENDED_SESSIONSECURITY
            | flags::VERSION
            | flags::N128
            | flags::KEY_EXCH
            | flags::N56);
    let mut f = echoed | flags::NTLM | flags::TARGET_INFO | flags::TARGET_TYPE_SERVER;
    if client & flags::REQUEST_TARGET != 0 {
        f |= flags::REQUEST_TARGET;
    }
    if client & flags::UNICODE == 0 {
        f |= flags::OEM;
    }
    f
}

/// Builds a CHALLENGE_MESSAGE (MS-NLMP 2.2.1.2).
pub fn build_challenge(flags_out: u32, server_challenge: &[u8; 8], ti: &TargetInfo<'_>) -> Vec<u8> {
    let mut target_name = if flags_out & flags::UNICODE != 0 {
        utf16le(ti.netbios_domain)
    } else {
        ti.netbios_domain.bytes().collect()
    };
    target_name.truncate(MAX_NAME_UNITS * 2);
    let info = encode_target_info(ti);
    let mut m = Vec::with_capacity(CHALLENGE_HEADER + target_name.len() + info.len());
    m.extend_from_slice(SIGNATURE);
    m.extend_from_slice(&message_type::CHALLENGE.to_le_bytes());
    let name_off = CHALLENGE_HEADER as u32;
    m.extend_from_slice(&(target_name.len() as u16).to_le_bytes());
    m.extend_from_slice(&(target_name.len() as u16).to_le_bytes());
    m.extend_from_slice(&name_off.to_le_bytes());
    m.extend_from_slice(&flags_out.to_le_bytes());
    m.extend_from_slice(server_challenge);
    m.extend_from_slice(&[0u8; 8]);
    let info_off = name_off + target_name.len() as u32;
    m.extend_from_slice(&(info.len() as u16).to_le_bytes());
    m.extend_from_slice(&(info.len() as u16).to_le_bytes());
    m.extend_from_slice(&info_off.to_le_bytes());
    m.extend_from_slice(&SERVER_VERSION);
    m.extend_from_slice(&target_name);
    m.extend_from_slice(&info);
    m
}

/// A parsed AUTHENTICATE_MESSAGE, borrowing from the message bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticate<'a> {
    /// LmChallengeResponse.
    pub lm_response: &'a [u8],
    /// NtChallengeResponse.
    pub nt_response: &'a [u8],
    /// DomainName, decoded.
    pub domain: String,
    /// UserName, decoded.
    pub user: String,
    /// Workstation, decoded.
    pub workstation: String,
    /// EncryptedRandomSessionKey.
    pub encrypted_session_key: &'a [u8],
    /// NegotiateFlags.
    pub flags: u32,
    /// Whether the header is long enough to hold Version and MIC (payload starts at >= 88).
    pub has_mic_field: bool,
}

/// Parses an AUTHENTICATE_MESSAGE (MS-NLMP 2.2.1.3).
pub fn parse_authenticate(msg: &[u8]) -> Result<Authenticate<'_>, AuthError> {
    if message_type_of(msg)? != message_type::AUTHENTICATE {
        return Err(AuthError::UnexpectedMessage(
            "expected NTLMSSP AUTHENTICATE",
        ));
    }
    if msg.len() < AUTHENTICATE_MIN {
        return Err(AuthError::Malformed("AUTHENTICATE: too short"));
    }
    let flags_in = u32_at(msg, 60)?;
    let unicode = flags_in & flags::UNICODE != 0;
    // The payload starts at the lowest offset of any non-empty buffer; the MIC field exists
    // only if that leaves room for it (MS-NLMP 2.2.1.3).
    let mut first_payload = msg.len();
    for field in [12, 20, 28, 36, 44, 52] {
        if let Some(off) = buffer_offset(msg, field)? {
            first_payload = first_payload.min(off);
        }
    }
    if first_payload < AUTHENTICATE_MIN {
        return Err(AuthError::Malformed(
            "AUTHENTICATE: payload overlaps header",
        ));
    }
    Ok(Authenticate {
        lm_response: buffer(msg, 12)?,
        nt_response: buffer(msg, 20)?,
        domain: decode_name(buffer(msg, 28)?, unicode)?,
        user: decode_name(buffer(msg, 36)?, unicode)?,
        workstation: decode_name(buffer(msg, 44)?, unicode)?,
        encrypted_session_key: buffer(msg, 52)?,
        flags: flags_in,
        has_mic_field: first_payload >= AUTHENTICATE_HEADER_WITH_MIC
            && msg.len() >= AUTHENTICATE_HEADER_WITH_MIC,
    })
}

/// Iterates over an AV pair list, stopping at MsvAvEOL; bounded by [`MAX_AV_PAIRS`].
pub fn parse_av_pairs(mut list: &[u8]) -> Result<Vec<(u16, &[u8])>, AuthError> {
    let mut out = Vec::new();
    loop {
        if out.len() >= MAX_AV_PAIRS {
            return Err(AuthError::TooLarge("AV pairs"));
        }
        let (&[i0, i1, l0, l1], rest) = list.split_first_chunk::<4>().ok_or(TRUNCATED_FIELD)?;
        let id = u16::from_le_bytes([i0, i1]);
        let len = usize::from(u16::from_le_bytes([l0, l1]));
        if id == av_id::EOL {
            return Ok(out);
        }
        let (value, rest) = rest
            .split_at_checked(len)
            .ok_or(AuthError::Malformed("AV pair runs past the end"))?;
        out.push((id, value));
        list = rest;
    }
}

/// The fields of an NTLMv2 response the server checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ntlmv2Response<'a> {
    /// NTProofStr.
    pub nt_proof: [u8; 16],
    /// The NTLMv2_CLIENT_CHALLENGE blob ("temp") that NTProofStr covers.
    pub temp: &'a [u8],
    /// Client timestamp.
    pub timestamp: u64,
    /// MsvAvFlags from the client's AV pairs (0 if absent).
    pub av_flags: u32,
}

/// Splits an NtChallengeResponse of NTLMv2 form and reads its AV pairs.
pub fn parse_ntlmv2_response(nt: &[u8]) -> Result<Ntlmv2Response<'_>, AuthError> {
    // NTProofStr, then the blob: RespType, HiRespType, 6 reserved, TimeStamp (8),
    // ChallengeFromClient (8), 4 reserved (28 bytes), then the AV pairs.
    const SHORT: AuthError = AuthError::Refused("NTLMv1 or malformed NT response");
    let (nt_proof, temp) = nt.split_first_chunk::<16>().ok_or(SHORT)?;
    let (blob, pairs) = temp
        .split_first_chunk::<{ NTLMV2_RESPONSE_MIN - 16 }>()
        .ok_or(SHORT)?;
    if blob[0] != 1 || blob[1] != 1 {
        return Err(AuthError::Malformed("NTLMv2 blob: bad response version"));
    }
    let timestamp = u64::from_le_bytes([
        blob[8], blob[9], blob[10], blob[11], blob[12], blob[13], blob[14], blob[15],
    ]);
    let mut av_flags = 0;
    for (id, v) in parse_av_pairs(pairs)? {
        if id == av_id::FLAGS {
            let v = <[u8; 4]>::try_from(v)
                .map_err(|_| AuthError::Malformed("MsvAvFlags: bad length"))?;
            av_flags = u32::from_le_bytes(v);
        }
    }
    Ok(Ntlmv2Response {
        nt_proof: *nt_proof,
        temp,
        timestamp,
        av_flags,
    })
}

/// Published NTLM messages shared by this crate's tests.
#[cfg(test)]
pub(crate) mod tests_vectors {
    /// MS-NLMP 4.2.4.3 CHALLENGE_MESSAGE.
    pub(crate) const NLMP_CHALLENGE: &str =
        "4e544c4d53535000020000000c000c003800000033828ae20123456789abcdef\
         00000000000000002400240044000000060070170000000f53006500720076006500720002000c0044006f\
         006d00610069006e0001000c0053006500720076006500720000000000";

    /// MS-NLMP 4.2.4.3 AUTHENTICATE_MESSAGE.
    pub(crate) const NLMP_AUTHENTICATE: &str = "4e544c4d535350000300000018001800\
         6c00000054005400840000000c000c00480000000800080054000000100010005c00000010001000d8000000\
         358288e20501280a0000000f44006f006d00610069006e00550073006500720043004f004d00500055005400\
         4500520086c35097ac9cec102554764a57cccc19aaaaaaaaaaaaaaaa68cd0ab851e51c96aabc927bebef6a1c\
         01010000000000000000000000000000aaaaaaaaaaaaaaaa0000000002000c0044006f006d00610069006e00\
         01000c005300650072007600650072000000000000000000c5dad2544fc9799094ce1ce90bc9d03e";
}

#[cfg(test)]
mod tests {
    use super::tests_vectors::*;
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    #[test]
    fn parses_ms_nlmp_authenticate() {
        let msg = unhex(NLMP_AUTHENTICATE);
        let a = parse_authenticate(&msg).unwrap();
        assert_eq!(a.user, "User");
        assert_eq!(a.domain, "Domain");
        assert_eq!(a.workstation, "COMPUTER");
        assert_eq!(a.flags, 0xe2888235);
        assert_eq!(a.lm_response.len(), 24);
        assert_eq!(a.nt_response.len(), 84);
        assert_eq!(
            a.encrypted_session_key,
            &unhex("c5dad2544fc9799094ce1ce90bc9d03e")[..]
        );
        assert!(!a.has_mic_field);
        let r = parse_ntlmv2_response(a.nt_response).unwrap();
        assert_eq!(
            r.nt_proof.to_vec(),
            unhex("68cd0ab851e51c96aabc927bebef6a1c")
        );
        assert_eq!(r.timestamp, 0);
        assert_eq!(r.av_flags, 0);
    }

    /// Our CHALLENGE for the MS-NLMP example inputs has the same structure and the same AV
    /// pairs for the names it shares (the example has no DNS names and no timestamp).
    #[test]
    fn challenge_layout_matches_ms_nlmp() {
        let reference = unhex(NLMP_CHALLENGE);
        let ti = TargetInfo {
            netbios_domain: "Domain",
            netbios_computer: "Server",
            dns_domain: "",
            dns_computer: "",
            timestamp: 0,
        };
        let mut sc = [0u8; 8];
        sc.copy_from_slice(&reference[24..32]);
        let ours = build_challenge(0xe28a8233, &sc, &ti);
        assert_eq!(&ours[..40], &reference[..40]);
        let name = buffer(&ours, 12).unwrap();
        assert_eq!(name, &utf16le("Domain")[..]);
        let info = buffer(&ours, 40).unwrap();
        let pairs = parse_av_pairs(info).unwrap();
        let ref_pairs = parse_av_pairs(buffer(&reference, 40).unwrap()).unwrap();
        assert_eq!(pairs[..2], ref_pairs[..2]);
        assert_eq!(pairs.last().unwrap().0, av_id::TIMESTAMP);
    }

    #[test]
    fn challenge_flags_follow_client() {
        let f = challenge_flags(0xe2088297);
        assert_ne!(f & flags::KEY_EXCH, 0);
        assert_ne!(f & flags::TARGET_INFO, 0);
        assert_eq!(f & flags::OEM, 0);
        let f = challenge_flags(flags::OEM | flags::NTLM);
        assert_ne!(f & flags::OEM, 0);
        assert_eq!(f & flags::KEY_EXCH, 0);
    }

    #[test]
    fn hostile_buffers_are_errors() {
        let mut msg = unhex(NLMP_AUTHENTICATE);
        // User name offset pointing past the end.
        msg[40..44].copy_from_slice(&0xFFFF_FFF0u32.to_le_bytes());
        assert!(parse_authenticate(&msg).is_err());
        let mut msg = unhex(NLMP_AUTHENTICATE);
        msg[20..22].copy_from_slice(&0xFFFFu16.to_le_bytes());
        assert!(parse_authenticate(&msg).is_err());
        assert!(parse_authenticate(&msg[..40]).is_err());
        assert!(parse_negotiate(b"NTLMSSP\0\x01\0\0\0").is_err());
        assert!(parse_av_pairs(&[1, 0, 9, 0, 1]).is_err());
        assert!(parse_av_pairs(&[]).is_err());
        let many: Vec<u8> = std::iter::repeat_n([9u8, 0, 0, 0], 100).flatten().collect();
        assert_eq!(parse_av_pairs(&many), Err(AuthError::TooLarge("AV pairs")));
        assert!(parse_ntlmv2_response(&[0u8; 24]).is_err());
    }
}
