//! READ, WRITE, FLUSH, LOCK, ECHO, CANCEL and CHANGE_NOTIFY (MS-SMB2 2.2.17 – 2.2.30, 2.2.35).
//! READ and WRITE keep the data borrowed so the server can hand it to storage without a copy.

use super::header::HEADER_LEN;
use super::wire::{slice_at, Put, Reader};
use super::{Command, FileId, ProtoError};

/// Offset of READ response data from the header start (header + 16-byte fixed part).
pub const READ_DATA_OFFSET: usize = HEADER_LEN + 16;
/// WRITE flag: write through to stable storage before answering.
pub const WRITEFLAG_WRITE_THROUGH: u32 = 0x0000_0001;
/// LOCK flag: shared lock.
pub const LOCKFLAG_SHARED: u32 = 0x0000_0001;
/// LOCK flag: exclusive lock.
pub const LOCKFLAG_EXCLUSIVE: u32 = 0x0000_0002;
/// LOCK flag: unlock.
pub const LOCKFLAG_UNLOCK: u32 = 0x0000_0004;
/// LOCK flag: fail at once instead of waiting.
pub const LOCKFLAG_FAIL_IMMEDIATELY: u32 = 0x0000_0010;
/// Most lock elements in one LOCK request.
pub const MAX_LOCK_ELEMENTS: usize = 64;

/// A READ request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadRequest {
    /// Padding (the client's preferred data offset in the response; informational).
    pub padding: u8,
    /// Flags.
    pub flags: u8,
    /// Bytes to read.
    pub length: u32,
    /// File offset.
    pub offset: u64,
    /// The handle.
    pub file_id: FileId,
    /// Fewer bytes than this is an error (STATUS_END_OF_FILE).
    pub minimum_count: u32,
}

impl ReadRequest {
    /// Decodes a READ request.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 49 {
            return Err(ProtoError::BadStructureSize("READ request"));
        }
        let padding = r.u8()?;
        let flags = r.u8()?;
        let length = r.u32()?;
        let offset = r.u64()?;
        let file_id = FileId::decode(&mut r)?;
        let minimum_count = r.u32()?;
        Ok(Self {
            padding,
            flags,
            length,
            offset,
            file_id,
            minimum_count,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(49);
        out.put_u8(self.padding);
        out.put_u8(self.flags);
        out.put_u32(self.length);
        out.put_u64(self.offset);
        self.file_id.encode(out);
        out.put_u32(self.minimum_count);
        out.put_zeros(13);
    }
}

/// Length of a READ response's fixed part (MS-SMB2 2.2.20), the bytes before its data.
pub const READ_RESPONSE_FIXED_LEN: usize = 16;

/// The fixed part of a READ response announcing `data_len` bytes of data, as an array:
/// the server writes it in place in front of data already read into a pooled buffer, so
/// a READ allocates nothing for it.
pub fn read_response_fixed(data_len: u32) -> [u8; READ_RESPONSE_FIXED_LEN] {
    let mut fixed = [0u8; READ_RESPONSE_FIXED_LEN];
    let (size, rest) = fixed.split_at_mut(2);
    size.copy_from_slice(&17u16.to_le_bytes());
    let (offset, rest) = rest.split_at_mut(2);
    // DataOffset, then Reserved (0).
    offset.copy_from_slice(&[READ_DATA_OFFSET as u8, 0]);
    let (length, _remaining_and_flags) = rest.split_at_mut(4);
    length.copy_from_slice(&data_len.to_le_bytes());
    fixed
}

/// Appends the fixed part of a READ response ([`read_response_fixed`]); the caller appends
/// `data_len` bytes of data right after it (or writes them with a vectored write).
pub fn encode_read_response_fixed(out: &mut Vec<u8>, data_len: u32) {
    out.extend_from_slice(&read_response_fixed(data_len));
}

/// A WRITE request with its data borrowed from the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRequest<'a> {
    /// File offset.
    pub offset: u64,
    /// The handle.
    pub file_id: FileId,
    /// Flags (`WRITEFLAG_WRITE_THROUGH`).
    pub flags: u32,
    /// The data.
    pub data: &'a [u8],
}

/// The fixed part of a WRITE request, everything before its data: what
/// [`WriteRequest::decode`] and [`write_data_placement`] both read.
struct WriteFixed {
    data_off: usize,
    len: usize,
    offset: u64,
    file_id: FileId,
    flags: u32,
}

impl WriteFixed {
    /// Decodes the fixed part after the SMB2 header of `msg` (which need not hold the data).
    fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 49 {
            return Err(ProtoError::BadStructureSize("WRITE request"));
        }
        let data_off = usize::from(r.u16()?);
        let len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let offset = r.u64()?;
        let file_id = FileId::decode(&mut r)?;
        let _channel = r.u32()?;
        let _remaining = r.u32()?;
        let _wci_off = r.u16()?;
        let _wci_len = r.u16()?;
        let flags = r.u32()?;
        Ok(WriteFixed {
            data_off,
            len,
            offset,
            file_id,
            flags,
        })
    }
}

impl<'a> WriteRequest<'a> {
    /// Decodes a WRITE request.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let fixed = WriteFixed::decode(msg)?;
        let data = slice_at(msg, fixed.data_off, fixed.len)?;
        Ok(Self {
            offset: fixed.offset,
            file_id: fixed.file_id,
            flags: fixed.flags,
            data,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(49);
        out.put_u16((HEADER_LEN + 48) as u16);
        out.put_u32(super::wire::len_u32(self.data.len()));
        out.put_u64(self.offset);
        self.file_id.encode(out);
        out.put_zeros(12);
        out.put_u32(self.flags);
        out.extend_from_slice(self.data);
    }
}

/// Appends a WRITE response body.
pub fn encode_write_response(out: &mut Vec<u8>, count: u32) {
    out.put_u16(17);
    out.put_u16(0);
    out.put_u32(count);
    out.put_u32(0);
    out.put_u16(0);
    out.put_u16(0);
}

/// Decodes a FLUSH request; returns the handle.
pub fn decode_flush(msg: &[u8]) -> Result<FileId, ProtoError> {
    let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
    if r.u16()? != 24 {
        return Err(ProtoError::BadStructureSize("FLUSH request"));
    }
    r.skip(6)?;
    FileId::decode(&mut r)
}

/// One LOCK element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockElement {
    /// Start of the range.
    pub offset: u64,
    /// Length of the range.
    pub length: u64,
    /// Flags (`LOCKFLAG_*`).
    pub flags: u32,
}

/// A LOCK request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRequest {
    /// LockSequence (number and index, for resilient handles).
    pub lock_sequence: u32,
    /// The handle.
    pub file_id: FileId,
    /// The ranges.
    pub locks: Vec<LockElement>,
}

impl LockRequest {
    /// Decodes a LOCK request.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 48 {
            return Err(ProtoError::BadStructureSize("LOCK request"));
        }
        let count = usize::from(r.u16()?);
        if count == 0 {
            return Err(ProtoError::Invalid("LOCK with no elements"));
        }
        if count > MAX_LOCK_ELEMENTS {
            return Err(ProtoError::TooMany("lock elements"));
        }
        let lock_sequence = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let mut locks = Vec::with_capacity(count);
        for _ in 0..count {
            let offset = r.u64()?;
            let length = r.u64()?;
            let flags = r.u32()?;
            r.skip(4)?;
            locks.push(LockElement {
                offset,
                length,
                flags,
            });
        }
        Ok(Self {
            lock_sequence,
            file_id,
            locks,
        })
    }
}

/// A CHANGE_NOTIFY request (decoded so it can be refused properly; notifications are served
/// by a later issue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeNotifyRequest {
    /// Flags (WATCH_TREE).
    pub flags: u16,
    /// OutputBufferLength.
    pub output_buffer_length: u32,
    /// The directory handle.
    pub file_id: FileId,
    /// CompletionFilter.
    pub completion_filter: u32,
}

impl ChangeNotifyRequest {
    /// Decodes a CHANGE_NOTIFY request.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 32 {
            return Err(ProtoError::BadStructureSize("CHANGE_NOTIFY request"));
        }
        let flags = r.u16()?;
        let output_buffer_length = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let completion_filter = r.u32()?;
        Ok(Self {
            flags,
            output_buffer_length,
            file_id,
            completion_filter,
        })
    }
}

/// Appends an SMB2 ERROR response body (MS-SMB2 2.2.2) with no error data.
pub fn encode_error_response(out: &mut Vec<u8>) {
    out.put_u16(9);
    out.put_u8(0);
    out.put_u8(0);
    out.put_u32(0);
    out.put_u8(0);
}

/// Appends an error response carrying ErrorData (MS-SMB2 2.2.2), e.g. the size a
/// BUFFER_TOO_SMALL answer says is needed.
pub fn encode_error_response_with_data(out: &mut Vec<u8>, data: &[u8]) {
    out.put_u16(9);
    out.put_u8(0);
    out.put_u8(0);
    out.put_u32(super::wire::len_u32(data.len()));
    out.extend_from_slice(data);
}

/// Appends the common "StructureSize 9, offset, length, buffer" response body used by
/// QUERY_DIRECTORY and QUERY_INFO.
pub fn encode_buffer_response(out: &mut Vec<u8>, data: &[u8]) {
    out.put_u16(9);
    out.put_u16(if data.is_empty() {
        0
    } else {
        (HEADER_LEN + 8) as u16
    });
    out.put_u32(super::wire::len_u32(data.len()));
    if data.is_empty() {
        out.put_u8(0);
    } else {
        out.extend_from_slice(data);
    }
}

/// Bytes of a received message [`write_data_placement`] looks at: an SMB2 header and the
/// fixed part of a WRITE request (where a WRITE's data starts when it follows at once).
pub const WRITE_PLACEMENT_PREFIX: usize = HEADER_LEN + 48;

/// Where a received message's payload is and which file offset it is for, judged from
/// its first bytes (`prefix`, up to [`WRITE_PLACEMENT_PREFIX`] of them): a plain WRITE's data
/// offset and file offset; for an encrypted message (whose request cannot be read yet)
/// the data offset of a lone WRITE behind the transform header, for an aligned file
/// offset (checkpoints write whole MiBs); `(0, 0)` for anything else. A guess only ever
/// costs a copy later, never correctness.
pub fn write_data_placement(prefix: &[u8]) -> (usize, u64) {
    if crate::proto::transform::is_transform(prefix) {
        return (
            crate::proto::transform::TRANSFORM_LEN + WRITE_PLACEMENT_PREFIX,
            0,
        );
    }
    let is_write =
        crate::proto::Header::decode(prefix).is_ok_and(|h| h.command() == Some(Command::Write));
    match WriteFixed::decode(prefix) {
        Ok(fixed) if is_write => (fixed.data_off, fixed.offset),
        _ => (0, 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_round_trip_and_fixed_response() {
        let req = ReadRequest {
            padding: 0x50,
            flags: 0,
            length: 65536,
            offset: 4096,
            file_id: FileId {
                persistent: 1,
                volatile: 2,
            },
            minimum_count: 0,
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        assert_eq!(m.len(), HEADER_LEN + 49);
        assert_eq!(ReadRequest::decode(&m).unwrap(), req);
        let mut out = Vec::new();
        encode_read_response_fixed(&mut out, 3);
        assert_eq!(hex::encode(out), "11005000030000000000000000000000");
        assert_eq!(
            hex::encode(read_response_fixed(0x0102_0304)),
            "11005000040302010000000000000000"
        );
    }

    #[test]
    fn write_placement_reads_a_plain_write_and_guesses_for_a_sealed_one() {
        let mut m = Vec::new();
        crate::proto::Header {
            command: Command::Write as u16,
            ..Default::default()
        }
        .encode(&mut m);
        WriteRequest {
            offset: 0x1234_5678_9abc,
            file_id: FileId::default(),
            flags: 0,
            data: b"data",
        }
        .encode(&mut m);
        let data_at =
            WriteRequest::decode(&m).unwrap().data.as_ptr() as usize - m.as_ptr() as usize;
        let placed = write_data_placement(&m[..WRITE_PLACEMENT_PREFIX]);
        assert_eq!(placed, (data_at, 0x1234_5678_9abc));
        // Too short to hold the offset, another command, another magic: no placement.
        assert_eq!(write_data_placement(&m[..HEADER_LEN + 8]), (0, 0));
        let mut read = m.clone();
        read[12] = Command::Read as u8;
        assert_eq!(write_data_placement(&read), (0, 0));
        assert_eq!(write_data_placement(b"junk"), (0, 0));
        let sealed = crate::proto::transform::TRANSFORM_MAGIC;
        let lead = crate::proto::transform::TRANSFORM_LEN + WRITE_PLACEMENT_PREFIX;
        assert_eq!(write_data_placement(&sealed), (lead, 0));
    }

    #[test]
    fn write_borrows_data() {
        let req = WriteRequest {
            offset: 7,
            file_id: FileId {
                persistent: 9,
                volatile: 10,
            },
            flags: WRITEFLAG_WRITE_THROUGH,
            data: b"hello",
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        let back = WriteRequest::decode(&m).unwrap();
        assert_eq!(back, req);
        // Length past the end is refused.
        m[HEADER_LEN + 4] = 6;
        assert_eq!(WriteRequest::decode(&m), Err(ProtoError::BadOffset));
        let mut out = Vec::new();
        encode_write_response(&mut out, 5);
        assert_eq!(hex::encode(out), "11000000050000000000000000000000");
    }

    #[test]
    fn lock_limits() {
        let mut m = vec![0u8; HEADER_LEN];
        m.put_u16(48);
        m.put_u16(1);
        m.put_u32(0);
        FileId {
            persistent: 1,
            volatile: 1,
        }
        .encode(&mut m);
        m.put_u64(10);
        m.put_u64(20);
        m.put_u32(LOCKFLAG_EXCLUSIVE);
        m.put_u32(0);
        let l = LockRequest::decode(&m).unwrap();
        assert_eq!(
            l.locks,
            vec![LockElement {
                offset: 10,
                length: 20,
                flags: 2
            }]
        );
        m.set_u16(HEADER_LEN + 2, 2);
        assert!(LockRequest::decode(&m).is_err());
        m.set_u16(HEADER_LEN + 2, 0xFFFF);
        assert_eq!(
            LockRequest::decode(&m),
            Err(ProtoError::TooMany("lock elements"))
        );
    }

    #[test]
    fn error_response_is_nine_bytes() {
        let mut out = Vec::new();
        encode_error_response(&mut out);
        assert_eq!(hex::encode(out), "090000000000000000");
    }
}
