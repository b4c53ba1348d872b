//! The subset of DER that SPNEGO uses (X.690): single-byte tags, definite lengths. Reading is
//! bounds-checked and never recursive beyond what the caller asks for; writing builds nested
//! structures inside-out.

use super::AuthError;

/// Longest DER value we accept (bytes). SPNEGO tokens carrying NTLMSSP are a few hundred bytes;
/// the bound is far above that and far below anything that could hurt.
pub const MAX_DER_LEN: usize = 64 * 1024;

/// Tag numbers used by SPNEGO.
pub mod tag {
    /// [APPLICATION 0] constructed: the GSS-API InitialContextToken wrapper.
    pub const APPLICATION_0: u8 = 0x60;
    /// SEQUENCE.
    pub const SEQUENCE: u8 = 0x30;
    /// OBJECT IDENTIFIER.
    pub const OID: u8 = 0x06;
    /// OCTET STRING.
    pub const OCTET_STRING: u8 = 0x04;
    /// ENUMERATED.
    pub const ENUMERATED: u8 = 0x0A;
    /// BIT STRING.
    pub const BIT_STRING: u8 = 0x03;
    /// GeneralString.
    pub const GENERAL_STRING: u8 = 0x1B;
    /// Context-specific constructed tag `[n]`.
    pub const fn context(n: u8) -> u8 {
        0xA0 | n
    }
}

/// One decoded TLV: its tag, its contents, and the whole encoding (tag and length included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// The identifier octet.
    pub tag: u8,
    /// The contents octets.
    pub value: &'a [u8],
    /// The complete encoding, as needed for mechListMIC over mechTypes.
    pub raw: &'a [u8],
}

/// Reads one TLV from the front of `input`; returns it and the rest.
pub fn read_tlv(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), AuthError> {
    let (&tag_byte, rest) = input
        .split_first()
        .ok_or(AuthError::Malformed("DER: empty input"))?;
    if tag_byte & 0x1F == 0x1F {
        return Err(AuthError::Malformed("DER: multi-byte tag"));
    }
    let (&first, rest) = rest
        .split_first()
        .ok_or(AuthError::Malformed("DER: missing length"))?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        if n == 0 {
            return Err(AuthError::Malformed("DER: indefinite length"));
        }
        if n > 4 {
            return Err(AuthError::TooLarge("DER length field"));
        }
        let (bytes, rest) = rest
            .split_at_checked(n)
            .ok_or(AuthError::Malformed("DER: truncated length"))?;
        let len = bytes
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, rest)
    };
    if len > MAX_DER_LEN {
        return Err(AuthError::TooLarge("DER value"));
    }
    let (value, after) = rest
        .split_at_checked(len)
        .ok_or(AuthError::Malformed("DER: value runs past the end"))?;
    // `after` is a tail of `input`: the TLV is everything before it.
    let (raw, _) = input
        .split_at_checked(input.len() - after.len())
        .ok_or(AuthError::Malformed("DER: value runs past the end"))?;
    Ok((
        Tlv {
            tag: tag_byte,
            value,
            raw,
        },
        after,
    ))
}

/// Reads one TLV and checks its tag.
pub fn expect_tlv<'a>(
    input: &'a [u8],
    tag: u8,
    what: &'static str,
) -> Result<(Tlv<'a>, &'a [u8]), AuthError> {
    let (tlv, rest) = read_tlv(input)?;
    if tlv.tag != tag {
        return Err(AuthError::Malformed(what));
    }
    Ok((tlv, rest))
}

/// Appends the DER encoding of a TLV with `value` as contents.
pub fn write_tlv(out: &mut Vec<u8>, tag: u8, value: &[u8]) {
    out.push(tag);
    let len = value.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        // The length's big-endian bytes without leading zeros (`len` is at least 0x80).
        let bytes = (len as u32).to_be_bytes();
        let significant = bytes.iter().skip_while(|&&b| b == 0);
        out.push(0x80 | significant.clone().count() as u8);
        out.extend(significant);
    }
    out.extend_from_slice(value);
}

/// Returns the DER encoding of a TLV.
pub fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(value.len() + 6);
    write_tlv(&mut v, tag, value);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_short_and_long_lengths() {
        for n in [0usize, 1, 127, 128, 255, 256, 70000] {
            let value = vec![0xAB; n];
            let enc = tlv(0x04, &value);
            if n > MAX_DER_LEN {
                assert!(read_tlv(&enc).is_err());
                continue;
            }
            let (t, rest) = read_tlv(&enc).unwrap();
            assert_eq!(t.tag, 0x04);
            assert_eq!(t.value.len(), n);
            assert_eq!(t.raw, &enc[..]);
            assert!(rest.is_empty());
        }
    }

    #[test]
    fn rejects_bad_encodings() {
        assert!(read_tlv(&[]).is_err());
        assert!(read_tlv(&[0x30]).is_err());
        assert!(read_tlv(&[0x30, 0x80]).is_err());
        assert!(read_tlv(&[0x30, 0x85, 1, 1, 1, 1, 1]).is_err());
        assert!(read_tlv(&[0x30, 0x05, 1]).is_err());
        assert!(read_tlv(&[0x1F, 0x01, 0]).is_err());
        assert!(read_tlv(&[0x30, 0x82, 0x01]).is_err());
    }
}
