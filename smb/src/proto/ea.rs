//! Extended attributes on the wire (MS-FSCC 2.4.15 FILE_FULL_EA_INFORMATION): the chain a
//! SET_INFO FileFullEaInformation or an `ExtA` create context carries, and the chain a
//! QUERY_INFO returns. Pure, with explicit limits.

use super::wire::{len_u32, Put};
use super::ProtoError;

/// Most EAs one request may carry.
pub const MAX_EAS: usize = 256;
/// Longest EA name (the wire's one-byte length).
pub const MAX_EA_NAME: usize = 255;
/// Largest EA value the server keeps (what one Linux xattr value can hold, less room).
pub const MAX_EA_VALUE: usize = 65_000;

/// One extended attribute: an ASCII name (compared case-insensitively) and a value. An
/// empty value in a set request removes the EA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ea {
    /// EaName.
    pub name: String,
    /// EaValue.
    pub value: Vec<u8>,
    /// Flags (FILE_NEED_EA 0x80 is kept as sent).
    pub flags: u8,
}

/// Characters an EA name may not contain (MS-FSCC 2.4.15: the FAT/OS2 rules NTFS keeps).
fn valid_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .iter()
            .all(|b| b.is_ascii() && *b >= 0x20 && !b"\"*+,/:;<=>?[\\]|".contains(b))
}

/// Decodes a FILE_FULL_EA_INFORMATION chain. Malformed chains, invalid names and
/// values over [`MAX_EA_VALUE`] are refused.
pub fn decode_full_ea_list(buf: &[u8]) -> Result<Vec<Ea>, ProtoError> {
    let mut out = Vec::new();
    let mut entry = buf;
    loop {
        let (&[n0, n1, n2, n3, flags, name_len, v0, v1], rest) = entry
            .split_first_chunk::<8>()
            .ok_or(ProtoError::Truncated)?;
        let next = u32::from_le_bytes([n0, n1, n2, n3]) as usize;
        let value_len = usize::from(u16::from_le_bytes([v0, v1]));
        // EaName, its NUL, then EaValue, all inside the buffer.
        let (name, rest) = rest
            .split_at_checked(usize::from(name_len))
            .ok_or(ProtoError::BadOffset)?;
        let value = match rest.split_first() {
            Some((0, rest)) => rest.get(..value_len).ok_or(ProtoError::BadOffset)?,
            _ => return Err(ProtoError::BadOffset),
        };
        if !valid_name(name) || value_len > MAX_EA_VALUE {
            return Err(ProtoError::Invalid("EA name or value"));
        }
        if out.len() == MAX_EAS {
            return Err(ProtoError::Invalid("too many EAs"));
        }
        out.push(Ea {
            name: String::from_utf8_lossy(name).into_owned(),
            value: value.to_vec(),
            flags,
        });
        if next == 0 {
            return Ok(out);
        }
        // Entries are 4-byte aligned and must move forward past the one just read.
        let used = 8 + name.len() + 1 + value.len();
        if !next.is_multiple_of(4) || next < used {
            return Err(ProtoError::BadOffset);
        }
        entry = entry.get(next..).ok_or(ProtoError::Truncated)?;
    }
}

/// Bytes one entry takes in a chain (aligned to 4 when another follows).
fn entry_len(ea: &Ea) -> usize {
    8 + ea.name.len() + 1 + ea.value.len()
}

/// FileEaInformation.EaSize: what the chain of all EAs takes, each entry padded to 4.
pub fn ea_size(eas: &[Ea]) -> u32 {
    len_u32(eas.iter().map(|e| entry_len(e).next_multiple_of(4)).sum())
}

/// Encodes a FILE_FULL_EA_INFORMATION chain of the entries that fit in `max` bytes;
/// returns it and how many entries it holds.
pub fn encode_full_ea_list(eas: &[Ea], max: usize) -> (Vec<u8>, usize) {
    let mut out = Vec::new();
    let mut last_start = None;
    let mut count = 0;
    for ea in eas {
        let start = out.len().next_multiple_of(4);
        if start + entry_len(ea) > max {
            break;
        }
        out.resize(start, 0);
        if let Some(prev) = last_start {
            out.set_u32(prev, len_u32(start - prev));
        }
        out.put_u32(0);
        out.put_u8(ea.flags);
        out.put_u8(u8::try_from(ea.name.len()).unwrap_or(u8::MAX));
        out.put_u16(u16::try_from(ea.value.len()).unwrap_or(u16::MAX));
        out.extend_from_slice(ea.name.as_bytes());
        out.put_u8(0);
        out.extend_from_slice(&ea.value);
        last_start = Some(start);
        count += 1;
    }
    (out, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ea(name: &str, value: &[u8]) -> Ea {
        Ea {
            name: name.into(),
            value: value.to_vec(),
            flags: 0,
        }
    }

    #[test]
    fn chains_round_trip_with_alignment() {
        let eas = vec![ea("EAONE", b"VALUE1"), ea("SECONDEA", b"ValueTwo")];
        let (bytes, n) = encode_full_ea_list(&eas, 4096);
        assert_eq!(n, 2);
        assert_eq!(
            u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
            20
        );
        assert_eq!(decode_full_ea_list(&bytes).expect("decodes"), eas);
        assert_eq!(ea_size(&eas), 20 + 28);
        let (one, n) = encode_full_ea_list(&eas, 30);
        assert_eq!((n, one.len()), (1, 20), "only what fits");
    }

    #[test]
    fn malformed_chains_are_refused() {
        let (good, _) = encode_full_ea_list(&[ea("A", b"x"), ea("B", b"y")], 4096);
        for cut in 0..good.len() {
            assert!(decode_full_ea_list(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut backwards = good.clone();
        backwards[0] = 4;
        assert!(decode_full_ea_list(&backwards).is_err());
        let (bad_name, _) = encode_full_ea_list(&[ea("A:B", b"x")], 4096);
        assert!(decode_full_ea_list(&bad_name).is_err());
    }
}
