//! QUERY_DIRECTORY request (MS-SMB2 2.2.33) and the MS-FSCC 2.4 directory entry structures.
//! Entries are 8-byte aligned and chained by NextEntryOffset; the encoder refuses an entry that
//! would overflow the client's output buffer so the server can stop and resume later. For
//! an Apple client that negotiated read-dir-attr, FileIdBothDirectoryInformation carries
//! [`AppleDirInfo`] in its EaSize, ShortName and Reserved2 fields.

use super::aapl::AppleDirInfo;
use super::header::HEADER_LEN;
use super::info::class;
use super::wire::{len_u32, slice_at, utf16_len, utf16le, Put, Reader};
use super::{FileAttrs, FileId, ProtoError};

/// Flag: restart the enumeration from the beginning.
pub const RESTART_SCANS: u8 = 0x01;
/// Flag: return at most one entry.
pub const RETURN_SINGLE_ENTRY: u8 = 0x02;
/// Flag: resume from FileIndex.
pub const INDEX_SPECIFIED: u8 = 0x04;
/// Flag: restart and take a new search pattern.
pub const REOPEN: u8 = 0x10;
/// Largest output buffer one QUERY_DIRECTORY fills (the client's limit also applies).
pub const MAX_QUERY_DIRECTORY_OUTPUT: u32 = 1024 * 1024;

/// A QUERY_DIRECTORY request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryDirectoryRequest {
    /// FileInformationClass.
    pub class: u8,
    /// Flags.
    pub flags: u8,
    /// FileIndex.
    pub file_index: u32,
    /// The directory handle.
    pub file_id: FileId,
    /// The search pattern (`*` when empty).
    pub pattern: String,
    /// OutputBufferLength.
    pub output_buffer_length: u32,
}

impl QueryDirectoryRequest {
    /// Decodes a QUERY_DIRECTORY request.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 33 {
            return Err(ProtoError::BadStructureSize("QUERY_DIRECTORY request"));
        }
        let class = r.u8()?;
        let flags = r.u8()?;
        let file_index = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let off = usize::from(r.u16()?);
        let len = usize::from(r.u16()?);
        let output_buffer_length = r.u32()?;
        let pattern = utf16le(slice_at(msg, off, len)?)?;
        Ok(Self {
            class,
            flags,
            file_index,
            file_id,
            pattern,
            output_buffer_length,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(33);
        out.put_u8(self.class);
        out.put_u8(self.flags);
        out.put_u32(self.file_index);
        self.file_id.encode(out);
        out.put_u16((HEADER_LEN + 32) as u16);
        out.put_u16(super::wire::len_u16(utf16_len(&self.pattern)));
        out.put_u32(self.output_buffer_length);
        out.put_utf16(&self.pattern);
    }
}

/// True for the information classes QUERY_DIRECTORY supports.
pub fn is_directory_class(c: u8) -> bool {
    matches!(
        c,
        class::DIRECTORY
            | class::FULL_DIRECTORY
            | class::BOTH_DIRECTORY
            | class::NAMES
            | class::ID_BOTH_DIRECTORY
            | class::ID_FULL_DIRECTORY
    )
}

/// One directory entry to encode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DirEntry {
    /// The entry's name (no path).
    pub name: String,
    /// Attributes and times.
    pub attrs: FileAttrs,
    /// Stable file id.
    pub file_id: u64,
    /// The Apple fields, for a connection that negotiated AAPL read-dir-attr; only
    /// FileIdBothDirectoryInformation carries them.
    pub apple: Option<AppleDirInfo>,
}

/// Builds a chain of directory entries into one output buffer.
#[derive(Debug)]
pub struct DirEncoder {
    class: u8,
    limit: usize,
    buf: Vec<u8>,
    last_entry: Option<usize>,
    count: usize,
}

impl DirEncoder {
    /// Starts an output buffer for `class` holding at most `limit` bytes.
    pub fn new(class: u8, limit: usize) -> Self {
        Self {
            class,
            limit,
            buf: Vec::new(),
            last_entry: None,
            count: 0,
        }
    }

    fn fixed_len(&self) -> usize {
        match self.class {
            class::DIRECTORY => 64,
            class::FULL_DIRECTORY => 68,
            class::BOTH_DIRECTORY => 94,
            class::ID_BOTH_DIRECTORY => 104,
            class::ID_FULL_DIRECTORY => 80,
            _ => 12,
        }
    }

    /// Appends `e` if it fits; returns false (leaving the buffer unchanged) when it does not.
    pub fn push(&mut self, e: &DirEntry) -> bool {
        let start = self.buf.len().next_multiple_of(8);
        let name_len = utf16_len(&e.name);
        if start + self.fixed_len() + name_len > self.limit {
            return false;
        }
        self.buf.resize(start, 0);
        if let Some(prev) = self.last_entry {
            self.buf.set_u32(prev, len_u32(start - prev));
        }
        self.last_entry = Some(start);
        let b = &mut self.buf;
        b.put_u32(0); // NextEntryOffset
        b.put_u32(0); // FileIndex
        if self.class != class::NAMES {
            e.attrs.encode_times(b);
            b.put_u64(e.attrs.end_of_file);
            b.put_u64(e.attrs.allocation_size);
            b.put_u32(e.attrs.attributes);
        }
        b.put_u32(len_u32(name_len));
        match self.class {
            class::FULL_DIRECTORY => b.put_u32(0),
            class::BOTH_DIRECTORY => {
                b.put_u32(0);
                b.put_u8(0);
                b.put_u8(0);
                b.put_zeros(24);
            }
            class::ID_BOTH_DIRECTORY => match &e.apple {
                // EaSize, ShortNameLength, Reserved1, ShortName, Reserved2 as macOS reads them.
                Some(a) => {
                    b.put_u32(a.max_access);
                    b.extend_from_slice(&a.short_name_area());
                    b.put_u16(a.unix_mode);
                    b.put_u64(e.file_id);
                }
                None => {
                    b.put_u32(0);
                    b.put_u8(0);
                    b.put_u8(0);
                    b.put_zeros(24);
                    b.put_u16(0);
                    b.put_u64(e.file_id);
                }
            },
            class::ID_FULL_DIRECTORY => {
                b.put_u32(0);
                b.put_u32(0);
                b.put_u64(e.file_id);
            }
            _ => {}
        }
        b.put_utf16(&e.name);
        self.count += 1;
        true
    }

    /// Entries written so far.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The finished buffer.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip() {
        let q = QueryDirectoryRequest {
            class: class::ID_BOTH_DIRECTORY,
            flags: RESTART_SCANS,
            file_index: 0,
            file_id: FileId {
                persistent: 1,
                volatile: 2,
            },
            pattern: "*".into(),
            output_buffer_length: 65536,
        };
        let mut m = vec![0u8; HEADER_LEN];
        q.encode(&mut m);
        assert_eq!(QueryDirectoryRequest::decode(&m).unwrap(), q);
    }

    #[test]
    fn entries_are_aligned_and_chained() {
        let mut enc = DirEncoder::new(class::ID_BOTH_DIRECTORY, 1000);
        assert!(enc.push(&DirEntry {
            name: ".".into(),
            file_id: 1,
            ..Default::default()
        }));
        assert!(enc.push(&DirEntry {
            name: "abc".into(),
            file_id: 2,
            ..Default::default()
        }));
        let buf = enc.finish();
        // First entry 104 + 2 = 106 bytes, next at 112.
        assert_eq!(&buf[0..4], &112u32.to_le_bytes());
        assert_eq!(buf.len(), 112 + 104 + 6);
        assert_eq!(&buf[112..116], &[0, 0, 0, 0]);
        assert_eq!(&buf[112 + 96..112 + 104], &2u64.to_le_bytes());
    }

    #[test]
    fn apple_fields_fill_id_both_entries() {
        let mut enc = DirEncoder::new(class::ID_BOTH_DIRECTORY, 1000);
        let mut apple = AppleDirInfo::plain(0x001F_01FF, 0o100_640);
        apple.rfork_size = 7;
        assert!(enc.push(&DirEntry {
            name: "f".into(),
            file_id: 9,
            apple: Some(apple),
            ..Default::default()
        }));
        let buf = enc.finish();
        assert_eq!(buf.len(), 104 + 2);
        // EaSize at 64: maximal access.
        assert_eq!(&buf[64..68], &0x001F_01FFu32.to_le_bytes());
        // ShortNameLength 24, Reserved1 0, ShortName: rfork size, FinderInfo.
        assert_eq!(&buf[68..70], &[24, 0]);
        assert_eq!(&buf[70..78], &7u64.to_le_bytes());
        assert_eq!(&buf[78..90], &[0u8; 12]);
        assert_eq!(&buf[90..94], &[0x80, 0, 0, 0]);
        // Reserved2 at 94: the UNIX mode; then FileId and the name.
        assert_eq!(&buf[94..96], &0o100_640u16.to_le_bytes());
        assert_eq!(&buf[96..104], &9u64.to_le_bytes());
        assert_eq!(&buf[104..106], &[b'f', 0]);
    }

    #[test]
    fn overflow_is_refused() {
        let mut enc = DirEncoder::new(class::NAMES, 20);
        assert!(enc.push(&DirEntry {
            name: "ab".into(),
            ..Default::default()
        }));
        assert!(!enc.push(&DirEntry {
            name: "cd".into(),
            ..Default::default()
        }));
        assert_eq!(enc.count(), 1);
        assert_eq!(enc.finish().len(), 16);
    }
}
