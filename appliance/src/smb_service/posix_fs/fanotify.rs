//! Decoding the events a fanotify group reports with directory file handles and names
//! (`FAN_REPORT_DFID_NAME`): what changed, in which directory (by file handle), under which
//! name, and which process did it. Pure, so it is tested byte for byte and fuzzed; the
//! watcher that reads the group is [`super::outside`].
//!
//! Layout (linux/fanotify.h): each event is a 24-byte `fanotify_event_metadata`
//! (event_len u32, vers u8, reserved u8, metadata_len u16, mask u64, fd i32, pid i32)
//! followed by information records, each a 4-byte header (info_type u8, pad u8, len u16)
//! then, for the name-carrying types, an 8-byte fsid, a `file_handle` (handle_bytes u32,
//! handle_type i32, the handle) and a NUL-terminated name.

use thiserror::Error;

/// Size of `fanotify_event_metadata`.
pub const METADATA_LEN: usize = 24;
/// The metadata version this decoder reads (FANOTIFY_METADATA_VERSION).
pub const METADATA_VERSION: u8 = 3;
/// Most information records decoded per event (a rename carries two).
pub const MAX_RECORDS: usize = 4;
/// Largest file handle accepted (MAX_HANDLE_SZ).
pub const MAX_HANDLE_BYTES: usize = 128;

/// Information record types (FAN_EVENT_INFO_TYPE_*).
const INFO_DFID_NAME: u8 = 2;
const INFO_DFID: u8 = 3;
const INFO_OLD_DFID_NAME: u8 = 10;
const INFO_NEW_DFID_NAME: u8 = 12;

/// Which name an information record gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The entry the event is about (create, delete, attribute change, close after write).
    Entry,
    /// A rename's source.
    From,
    /// A rename's destination.
    To,
}

/// One directory-and-name record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameRecord<'a> {
    /// What the name is.
    pub role: Role,
    /// The directory's file handle: handle_type (4 bytes, little endian) then the handle.
    pub dir_handle: &'a [u8],
    /// The entry's name in that directory (empty for a record without one).
    pub name: &'a [u8],
}

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<'a> {
    /// FAN_* bits.
    pub mask: u64,
    /// The process that caused it (0 when the kernel does not say).
    pub pid: i32,
    /// Its directory-and-name records.
    pub records: Vec<NameRecord<'a>>,
}

/// Why a buffer of events could not be decoded.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// An event or record claims more bytes than there are, or fewer than its header.
    #[error("fanotify event truncated or with a bad length at byte {0}")]
    BadLength(usize),
    /// The kernel speaks a metadata version this decoder does not know.
    #[error("fanotify metadata version {0} (expected {METADATA_VERSION})")]
    Version(u8),
    /// A file handle larger than MAX_HANDLE_SZ.
    #[error("fanotify file handle of {0} bytes")]
    HandleTooLarge(usize),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes every event in `buf` (what one `read` of the group returned).
pub fn decode(buf: &[u8]) -> Result<Vec<Event<'_>>, DecodeError> {
    let mut events = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let bad = DecodeError::BadLength(at);
        let event_len = u32_at(buf, at).ok_or(bad.clone())? as usize;
        let end = at.checked_add(event_len).ok_or(bad.clone())?;
        if event_len < METADATA_LEN {
            return Err(bad);
        }
        let event = buf.get(at..end).ok_or(bad.clone())?;
        let version = event.get(4).copied().ok_or(bad.clone())?;
        if version != METADATA_VERSION {
            return Err(DecodeError::Version(version));
        }
        let metadata_len = u16_at(event, 6).ok_or(bad.clone())? as usize;
        if metadata_len < METADATA_LEN || metadata_len > event_len {
            return Err(bad);
        }
        let mask = u64_at(event, 8).ok_or(bad.clone())?;
        let pid = u32_at(event, 20).ok_or(bad.clone())? as i32;
        let after_metadata = event.get(metadata_len..).ok_or(bad)?;
        let records = decode_records(after_metadata, at + metadata_len)?;
        events.push(Event { mask, pid, records });
        at = end;
    }
    Ok(events)
}

/// Decodes the information records after an event's metadata (`base`: their offset in the
/// whole buffer, for errors).
fn decode_records(mut rest: &[u8], mut base: usize) -> Result<Vec<NameRecord<'_>>, DecodeError> {
    let mut records = Vec::new();
    while let Some(&info_type) = rest.first() {
        let bad = DecodeError::BadLength(base);
        let len = u16_at(rest, 2).ok_or(bad.clone())? as usize;
        if len < 4 {
            return Err(bad);
        }
        let (record, after) = rest.split_at_checked(len).ok_or(bad.clone())?;
        let role = match info_type {
            INFO_DFID_NAME | INFO_DFID => Some(Role::Entry),
            INFO_OLD_DFID_NAME => Some(Role::From),
            INFO_NEW_DFID_NAME => Some(Role::To),
            _ => None,
        };
        if let (Some(role), true) = (role, records.len() < MAX_RECORDS) {
            // header 4, fsid 8, handle_bytes 4, handle_type 4, handle, [name NUL]
            let handle_bytes = u32_at(record, 12).ok_or(bad.clone())? as usize;
            if handle_bytes > MAX_HANDLE_BYTES {
                return Err(DecodeError::HandleTooLarge(handle_bytes));
            }
            let handle_end = 20 + handle_bytes;
            let dir_handle = record.get(16..handle_end).ok_or(bad.clone())?;
            let tail = record.get(handle_end..).ok_or(bad.clone())?;
            let name = if info_type == INFO_DFID {
                &[][..]
            } else {
                tail.split(|&b| b == 0)
                    .next()
                    .filter(|name| name.len() < tail.len())
                    .ok_or(bad)?
            };
            records.push(NameRecord {
                role,
                dir_handle,
                name,
            });
        }
        rest = after;
        base += len;
    }
    Ok(records)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One information record as the kernel lays it out (padded to 4 bytes).
    pub(crate) fn record(info_type: u8, handle: &[u8], name: &str) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&[7; 8]); // fsid
        body.extend_from_slice(&(handle.len() as u32).to_le_bytes());
        body.extend_from_slice(&1i32.to_le_bytes()); // handle_type
        body.extend_from_slice(handle);
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        while (body.len() + 4) % 4 != 0 {
            body.push(0);
        }
        let mut r = vec![info_type, 0];
        r.extend_from_slice(&((body.len() + 4) as u16).to_le_bytes());
        r.extend_from_slice(&body);
        r
    }

    /// One event with `records`.
    pub(crate) fn event(mask: u64, pid: i32, records: &[Vec<u8>]) -> Vec<u8> {
        let len = METADATA_LEN + records.iter().map(Vec::len).sum::<usize>();
        let mut e = Vec::new();
        e.extend_from_slice(&(len as u32).to_le_bytes());
        e.push(METADATA_VERSION);
        e.push(0);
        e.extend_from_slice(&(METADATA_LEN as u16).to_le_bytes());
        e.extend_from_slice(&mask.to_le_bytes());
        e.extend_from_slice(&(-1i32).to_le_bytes());
        e.extend_from_slice(&pid.to_le_bytes());
        for r in records {
            e.extend_from_slice(r);
        }
        e
    }

    #[test]
    fn a_create_and_a_rename_decode() {
        let mut buf = event(0x100, 42, &[record(2, &[1, 2, 3, 4], "new.txt")]);
        buf.extend(event(
            0x1000_0000,
            43,
            &[record(10, &[9; 8], "a"), record(12, &[8; 8], "b")],
        ));
        let got = decode(&buf).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].mask, 0x100);
        assert_eq!(got[0].pid, 42);
        assert_eq!(got[0].records[0].role, Role::Entry);
        assert_eq!(got[0].records[0].dir_handle, &[1, 0, 0, 0, 1, 2, 3, 4]);
        assert_eq!(got[0].records[0].name, b"new.txt");
        assert_eq!(got[1].records[0].role, Role::From);
        assert_eq!(got[1].records[1].role, Role::To);
        assert_eq!(got[1].records[1].name, b"b");
    }

    #[test]
    fn bad_lengths_and_versions_are_errors() {
        let good = event(0x100, 1, &[record(2, &[1; 8], "x")]);
        for cut in 1..good.len() {
            assert!(decode(&good[..cut]).is_err(), "cut at {cut}");
        }
        let mut v = good.clone();
        v[4] = 2;
        assert_eq!(decode(&v), Err(DecodeError::Version(2)));
        let mut huge = good.clone();
        huge[METADATA_LEN + 12..METADATA_LEN + 16].copy_from_slice(&4096u32.to_le_bytes());
        assert_eq!(decode(&huge), Err(DecodeError::HandleTooLarge(4096)));
        let mut zero = good;
        zero[0..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&zero).is_err(), "a zero length cannot loop forever");
    }

    #[test]
    fn mutated_events_never_panic() {
        let base = event(
            0x1000_0000,
            5,
            &[record(10, &[3; 12], "old"), record(12, &[4; 12], "new")],
        );
        for i in 0..base.len() {
            for v in [0u8, 1, 0x7F, 0xFF] {
                let mut m = base.clone();
                m[i] = v;
                let _ = decode(&m);
            }
        }
    }
}
