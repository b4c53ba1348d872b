//! The one SMB1 message the server understands: an SMB_COM_NEGOTIATE that offers SMB2 dialect
//! strings (MS-SMB2 3.3.5.3.1). Older clients and impacket start this way; the server answers
//! with an SMB2 NEGOTIATE response carrying dialect 0x02FF (wildcard: "send an SMB2 NEGOTIATE")
//! or 0x0202 when only "SMB 2.002" was offered.

use super::wire::Reader;
use super::ProtoError;

/// ProtocolId of an SMB1 message.
pub const SMB1_MAGIC: [u8; 4] = [0xFF, b'S', b'M', b'B'];
/// SMB_COM_NEGOTIATE.
const SMB_COM_NEGOTIATE: u8 = 0x72;
/// SMB1 header length.
const SMB1_HEADER_LEN: usize = 32;
/// Most dialect strings we look at before giving up.
const MAX_SMB1_DIALECTS: usize = 64;

/// What the SMB1 NEGOTIATE asked for, as far as SMB2 is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Smb1Upgrade {
    /// "SMB 2.???" was offered: answer with the 0x02FF wildcard.
    Wildcard,
    /// Only "SMB 2.002" was offered: answer with dialect 2.0.2 directly.
    Smb202,
    /// No SMB2 dialect string: the client only speaks SMB1, which this server refuses.
    None,
}

/// True when `msg` starts with the SMB1 protocol id.
pub fn is_smb1(msg: &[u8]) -> bool {
    msg.get(..4) == Some(&SMB1_MAGIC[..])
}

/// Parses an SMB1 NEGOTIATE and reports which SMB2 answer it calls for.
pub fn parse_negotiate(msg: &[u8]) -> Result<Smb1Upgrade, ProtoError> {
    let mut r = Reader::new(msg);
    if r.array::<4>()? != SMB1_MAGIC {
        return Err(ProtoError::BadMagic);
    }
    if r.u8()? != SMB_COM_NEGOTIATE {
        return Err(ProtoError::Unsupported("SMB1 command other than NEGOTIATE"));
    }
    r.skip(SMB1_HEADER_LEN - 5)?;
    let word_count = r.u8()?;
    r.skip(usize::from(word_count) * 2)?;
    let byte_count = usize::from(r.u16()?);
    let data = r.bytes(byte_count.min(r.remaining()))?;
    let mut wildcard = false;
    let mut s202 = false;
    for (i, d) in data.split(|&b| b == 0).enumerate() {
        if i >= MAX_SMB1_DIALECTS {
            break;
        }
        let name = d.strip_prefix(&[0x02]).unwrap_or(d);
        match name {
            b"SMB 2.???" => wildcard = true,
            b"SMB 2.002" => s202 = true,
            _ => {}
        }
    }
    Ok(if wildcard {
        Smb1Upgrade::Wildcard
    } else if s202 {
        Smb1Upgrade::Smb202
    } else {
        Smb1Upgrade::None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn negotiate(dialects: &[&str]) -> Vec<u8> {
        let mut m = Vec::new();
        m.extend_from_slice(&SMB1_MAGIC);
        m.push(SMB_COM_NEGOTIATE);
        m.extend_from_slice(&[0u8; 27]);
        m.push(0);
        let mut data = Vec::new();
        for d in dialects {
            data.push(2);
            data.extend_from_slice(d.as_bytes());
            data.push(0);
        }
        m.extend_from_slice(&(data.len() as u16).to_le_bytes());
        m.extend_from_slice(&data);
        m
    }

    #[test]
    fn detects_wildcard_and_202() {
        let m = negotiate(&["NT LM 0.12", "SMB 2.002", "SMB 2.???"]);
        assert!(is_smb1(&m));
        assert_eq!(parse_negotiate(&m).unwrap(), Smb1Upgrade::Wildcard);
        assert_eq!(
            parse_negotiate(&negotiate(&["NT LM 0.12", "SMB 2.002"])).unwrap(),
            Smb1Upgrade::Smb202
        );
        assert_eq!(
            parse_negotiate(&negotiate(&["NT LM 0.12"])).unwrap(),
            Smb1Upgrade::None
        );
    }

    #[test]
    fn truncated_is_an_error() {
        let m = negotiate(&["SMB 2.???"]);
        for n in 0..33 {
            assert!(parse_negotiate(&m[..n]).is_err());
        }
    }
}
