//! QUERY_INFO and SET_INFO requests (MS-SMB2 2.2.37 – 2.2.40) and the MS-FSCC 2.4 file
//! information structures the server returns or accepts.

use super::header::HEADER_LEN;
use super::wire::{len_u32, slice_at, utf16_len, utf16le, Put, Reader};
use super::{FileAttrs, FileId, ProtoError};

/// InfoType: file information.
pub const INFO_FILE: u8 = 1;
/// InfoType: file-system information.
pub const INFO_FILESYSTEM: u8 = 2;
/// InfoType: security descriptor.
pub const INFO_SECURITY: u8 = 3;
/// InfoType: quota.
pub const INFO_QUOTA: u8 = 4;

/// File information classes (MS-FSCC 2.4).
pub mod class {
    /// FileDirectoryInformation.
    pub const DIRECTORY: u8 = 1;
    /// FileFullDirectoryInformation.
    pub const FULL_DIRECTORY: u8 = 2;
    /// FileBothDirectoryInformation.
    pub const BOTH_DIRECTORY: u8 = 3;
    /// FileBasicInformation.
    pub const BASIC: u8 = 4;
    /// FileStandardInformation.
    pub const STANDARD: u8 = 5;
    /// FileInternalInformation.
    pub const INTERNAL: u8 = 6;
    /// FileEaInformation.
    pub const EA: u8 = 7;
    /// FileAccessInformation.
    pub const ACCESS: u8 = 8;
    /// FileNameInformation.
    pub const NAME: u8 = 9;
    /// FileRenameInformation.
    pub const RENAME: u8 = 10;
    /// FileNamesInformation.
    pub const NAMES: u8 = 12;
    /// FileDispositionInformation.
    pub const DISPOSITION: u8 = 13;
    /// FilePositionInformation.
    pub const POSITION: u8 = 14;
    /// FileFullEaInformation.
    pub const FULL_EA: u8 = 15;
    /// FileModeInformation.
    pub const MODE: u8 = 16;
    /// FileAlignmentInformation.
    pub const ALIGNMENT: u8 = 17;
    /// FileAllInformation.
    pub const ALL: u8 = 18;
    /// FileAllocationInformation.
    pub const ALLOCATION: u8 = 19;
    /// FileEndOfFileInformation.
    pub const END_OF_FILE: u8 = 20;
    /// FileAlternateNameInformation.
    pub const ALTERNATE_NAME: u8 = 21;
    /// FileStreamInformation.
    pub const STREAM: u8 = 22;
    /// FileCompressionInformation.
    pub const COMPRESSION: u8 = 28;
    /// FileNetworkOpenInformation.
    pub const NETWORK_OPEN: u8 = 34;
    /// FileAttributeTagInformation.
    pub const ATTRIBUTE_TAG: u8 = 35;
    /// FileIdBothDirectoryInformation.
    pub const ID_BOTH_DIRECTORY: u8 = 37;
    /// FileIdFullDirectoryInformation.
    pub const ID_FULL_DIRECTORY: u8 = 38;
    /// FileValidDataLengthInformation.
    pub const VALID_DATA_LENGTH: u8 = 39;
    /// FileNormalizedNameInformation.
    pub const NORMALIZED_NAME: u8 = 48;
    /// FileDispositionInformationEx.
    pub const DISPOSITION_EX: u8 = 64;
    /// FileRenameInformationEx.
    pub const RENAME_EX: u8 = 65;
}

/// FileDispositionInformationEx flag: delete.
pub const DISPOSITION_EX_DELETE: u32 = 0x0000_0001;
/// Largest output buffer we fill for one QUERY_INFO (the client's own limit also applies).
pub const MAX_QUERY_INFO_OUTPUT: u32 = 64 * 1024;
/// Largest SET_INFO buffer we accept.
pub const MAX_SET_INFO_INPUT: usize = 64 * 1024;

/// A QUERY_INFO request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryInfoRequest<'a> {
    /// InfoType.
    pub info_type: u8,
    /// FileInfoClass.
    pub class: u8,
    /// OutputBufferLength.
    pub output_buffer_length: u32,
    /// AdditionalInformation (security information bits).
    pub additional_information: u32,
    /// Flags.
    pub flags: u32,
    /// The handle.
    pub file_id: FileId,
    /// Input buffer (EA lists, quota queries).
    pub input: &'a [u8],
}

impl<'a> QueryInfoRequest<'a> {
    /// Decodes a QUERY_INFO request.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 41 {
            return Err(ProtoError::BadStructureSize("QUERY_INFO request"));
        }
        let info_type = r.u8()?;
        let class = r.u8()?;
        let output_buffer_length = r.u32()?;
        let in_off = usize::from(r.u16()?);
        r.skip(2)?;
        let in_len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let additional_information = r.u32()?;
        let flags = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let input = slice_at(msg, in_off, in_len)?;
        Ok(Self {
            info_type,
            class,
            output_buffer_length,
            additional_information,
            flags,
            file_id,
            input,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(41);
        out.put_u8(self.info_type);
        out.put_u8(self.class);
        out.put_u32(self.output_buffer_length);
        out.put_u16(if self.input.is_empty() {
            0
        } else {
            (HEADER_LEN + 40) as u16
        });
        out.put_u16(0);
        out.put_u32(len_u32(self.input.len()));
        out.put_u32(self.additional_information);
        out.put_u32(self.flags);
        self.file_id.encode(out);
        if self.input.is_empty() {
            out.put_u8(0);
        } else {
            out.extend_from_slice(self.input);
        }
    }
}

/// A SET_INFO request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetInfoRequest<'a> {
    /// InfoType.
    pub info_type: u8,
    /// FileInfoClass.
    pub class: u8,
    /// AdditionalInformation.
    pub additional_information: u32,
    /// The handle.
    pub file_id: FileId,
    /// The information buffer.
    pub buffer: &'a [u8],
}

impl<'a> SetInfoRequest<'a> {
    /// Decodes a SET_INFO request.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 33 {
            return Err(ProtoError::BadStructureSize("SET_INFO request"));
        }
        let info_type = r.u8()?;
        let class = r.u8()?;
        let len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let off = usize::from(r.u16()?);
        r.skip(2)?;
        let additional_information = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        if len > MAX_SET_INFO_INPUT {
            return Err(ProtoError::TooMany("SET_INFO buffer bytes"));
        }
        let buffer = slice_at(msg, off, len)?;
        Ok(Self {
            info_type,
            class,
            additional_information,
            file_id,
            buffer,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(33);
        out.put_u8(self.info_type);
        out.put_u8(self.class);
        out.put_u32(len_u32(self.buffer.len()));
        out.put_u16((HEADER_LEN + 32) as u16);
        out.put_u16(0);
        out.put_u32(self.additional_information);
        self.file_id.encode(out);
        out.extend_from_slice(self.buffer);
    }
}

/// Appends the 2-byte SET_INFO response body.
pub fn encode_set_info_response(out: &mut Vec<u8>) {
    out.put_u16(2);
}

/// FileRenameInformation as SET_INFO carries it (MS-FSCC 2.4.37.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenameInfo {
    /// Replace an existing target.
    pub replace_if_exists: bool,
    /// New name, relative to the share root.
    pub file_name: String,
}

impl RenameInfo {
    /// Decodes the SMB2 form of FileRenameInformation.
    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(buf);
        let replace_if_exists = r.u8()? != 0;
        r.skip(7)?;
        let _root = r.u64()?;
        let len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let file_name = utf16le(r.bytes(len)?)?;
        Ok(Self {
            replace_if_exists,
            file_name,
        })
    }

    /// Encodes it (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u8(u8::from(self.replace_if_exists));
        out.put_zeros(7);
        out.put_u64(0);
        out.put_u32(len_u32(utf16_len(&self.file_name)));
        out.put_utf16(&self.file_name);
    }
}

/// FileBasicInformation as SET_INFO carries it: a time of 0 or -1 means "do not change".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BasicInfo {
    /// CreationTime.
    pub creation_time: u64,
    /// LastAccessTime.
    pub last_access_time: u64,
    /// LastWriteTime.
    pub last_write_time: u64,
    /// ChangeTime.
    pub change_time: u64,
    /// FileAttributes, 0 for "do not change".
    pub attributes: u32,
}

impl BasicInfo {
    /// Decodes FileBasicInformation (needs 36 of its 40 bytes; some clients omit the pad).
    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(buf);
        Ok(Self {
            creation_time: r.u64()?,
            last_access_time: r.u64()?,
            last_write_time: r.u64()?,
            change_time: r.u64()?,
            attributes: r.u32()?,
        })
    }
}

/// Decodes an 8-byte value (FileEndOfFile, FileAllocation, FilePosition).
pub fn decode_u64_info(buf: &[u8]) -> Result<u64, ProtoError> {
    Reader::new(buf).u64()
}

/// Decodes FileDispositionInformation's DeletePending byte.
pub fn decode_disposition(buf: &[u8]) -> Result<bool, ProtoError> {
    Ok(Reader::new(buf).u8()? != 0)
}

/// Decodes FileDispositionInformationEx flags.
pub fn decode_disposition_ex(buf: &[u8]) -> Result<u32, ProtoError> {
    Reader::new(buf).u32()
}

/// The per-open facts the file information classes report beside [`FileAttrs`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OpenFacts {
    /// Stable 64-bit file id (FileInternalInformation).
    pub file_index: u64,
    /// Hard link count.
    pub links: u32,
    /// Delete-on-close pending.
    pub delete_pending: bool,
    /// The object is a directory.
    pub directory: bool,
    /// Access granted to the handle.
    pub access: u32,
    /// Current byte offset (FilePositionInformation).
    pub position: u64,
    /// Mode flags (FileModeInformation).
    pub mode: u32,
    /// The name relative to the share, with a leading backslash.
    pub name: String,
    /// The file's data streams (FileStreamInformation): name (empty for the unnamed
    /// one), size and allocation. Filled only for that class.
    pub streams: Vec<(String, u64, u64)>,
    /// FileEaInformation.EaSize (also in FileAllInformation).
    pub ea_size: u32,
}

/// Appends FileBasicInformation (40 bytes).
pub fn put_basic(out: &mut Vec<u8>, a: &FileAttrs) {
    a.encode_times(out);
    out.put_u32(a.attributes);
    out.put_u32(0);
}

/// Appends FileStandardInformation (24 bytes).
pub fn put_standard(out: &mut Vec<u8>, a: &FileAttrs, f: &OpenFacts) {
    out.put_u64(a.allocation_size);
    out.put_u64(a.end_of_file);
    out.put_u32(f.links);
    out.put_u8(u8::from(f.delete_pending));
    out.put_u8(u8::from(f.directory));
    out.put_u16(0);
}

/// Appends FileNetworkOpenInformation (56 bytes).
pub fn put_network_open(out: &mut Vec<u8>, a: &FileAttrs) {
    a.encode_times(out);
    out.put_u64(a.allocation_size);
    out.put_u64(a.end_of_file);
    out.put_u32(a.attributes);
    out.put_u32(0);
}

/// Appends FileAllInformation (100 bytes + name).
pub fn put_all(out: &mut Vec<u8>, a: &FileAttrs, f: &OpenFacts) {
    put_basic(out, a);
    put_standard(out, a, f);
    out.put_u64(f.file_index);
    out.put_u32(f.ea_size); // EaSize
    out.put_u32(f.access);
    out.put_u64(f.position);
    out.put_u32(f.mode);
    out.put_u32(0); // AlignmentRequirement
    out.put_u32(len_u32(utf16_len(&f.name)));
    out.put_utf16(&f.name);
}

/// Whether `class` reports the open's name ([`OpenFacts::name`]): only these need the
/// path looked up (a `/proc/self/fd` readlink on Linux).
pub fn class_reports_name(class: u8) -> bool {
    matches!(
        class,
        class::ALL | class::NAME | class::NORMALIZED_NAME | class::ALTERNATE_NAME
    )
}

/// Encodes the file information class `class` for an open; `None` when the class is not
/// supported for querying.
pub fn encode_file_info(class: u8, a: &FileAttrs, f: &OpenFacts) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    match class {
        class::BASIC => put_basic(&mut out, a),
        class::STANDARD => put_standard(&mut out, a, f),
        class::INTERNAL => out.put_u64(f.file_index),
        class::EA => out.put_u32(f.ea_size),
        class::ACCESS => out.put_u32(f.access),
        class::POSITION => out.put_u64(f.position),
        class::MODE => out.put_u32(f.mode),
        class::ALIGNMENT => out.put_u32(0),
        class::ALL => put_all(&mut out, a, f),
        class::NETWORK_OPEN => put_network_open(&mut out, a),
        class::ATTRIBUTE_TAG => {
            out.put_u32(a.attributes);
            out.put_u32(0);
        }
        class::NAME => {
            out.put_u32(len_u32(utf16_len(&f.name)));
            out.put_utf16(&f.name);
        }
        class::NORMALIZED_NAME => {
            // The share-relative path as stored, without the leading separator (empty
            // for the root).
            let name = f.name.trim_start_matches('\\');
            out.put_u32(len_u32(utf16_len(name)));
            out.put_utf16(name);
        }
        class::ALTERNATE_NAME => {
            // The root has no name, so no short name; others get their 8.3 form.
            let last = f.name.rsplit('\\').next().unwrap_or("");
            if last.is_empty() {
                return None;
            }
            let short = crate::vfs::names::short_name(last);
            out.put_u32(len_u32(utf16_len(&short)));
            out.put_utf16(&short);
        }
        class::STREAM => {
            // FILE_STREAM_INFORMATION entries, each 8-byte aligned and chained.
            for (i, (name, size, allocation)) in f.streams.iter().enumerate() {
                let wire_name = format!(":{name}:$DATA");
                let name_len = utf16_len(&wire_name);
                // NextEntryOffset, StreamNameLength, StreamSize, StreamAllocationSize, name.
                let len = 24 + name_len;
                let last = i + 1 == f.streams.len();
                let padded = len.next_multiple_of(8);
                out.put_u32(if last { 0 } else { len_u32(padded) });
                out.put_u32(len_u32(name_len));
                out.put_u64(*size);
                out.put_u64(*allocation);
                out.put_utf16(&wire_name);
                if !last {
                    out.put_zeros(padded - len);
                }
            }
        }
        class::COMPRESSION => {
            out.put_u64(a.end_of_file);
            out.put_u16(0);
            out.put_u8(0);
            out.put_u8(0);
            out.put_u8(0);
            out.put_zeros(3);
        }
        _ => return None,
    }
    Some(out)
}

/// Minimum output buffer length for a fixed-size class; a shorter buffer gets
/// STATUS_INFO_LENGTH_MISMATCH (MS-SMB2 3.3.5.20.1). Variable classes report their fixed part.
pub fn min_output_len(class: u8) -> usize {
    match class {
        class::BASIC => 40,
        class::STANDARD => 24,
        class::INTERNAL | class::POSITION | class::ATTRIBUTE_TAG => 8,
        class::EA | class::ACCESS | class::MODE | class::ALIGNMENT => 4,
        class::ALL => 104,
        class::ALTERNATE_NAME => 8,
        class::NETWORK_OPEN => 56,
        class::NAME | class::NORMALIZED_NAME => 4,
        class::STREAM => 32,
        class::COMPRESSION => 16,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_name_classes_depend_on_the_name() {
        let a = FileAttrs::default();
        let named = |name: &str| OpenFacts {
            name: name.into(),
            ..Default::default()
        };
        for c in 0..=u8::MAX {
            let one = encode_file_info(c, &a, &named("\\dir\\one.txt"));
            let other = encode_file_info(c, &a, &named("\\another.bin"));
            assert_eq!(one != other, class_reports_name(c), "class {c}");
        }
    }

    #[test]
    fn query_info_round_trip() {
        let q = QueryInfoRequest {
            info_type: INFO_FILE,
            class: class::ALL,
            output_buffer_length: 4096,
            additional_information: 0,
            flags: 0,
            file_id: FileId {
                persistent: 3,
                volatile: 4,
            },
            input: &[],
        };
        let mut m = vec![0u8; HEADER_LEN];
        q.encode(&mut m);
        assert_eq!(QueryInfoRequest::decode(&m).unwrap(), q);
    }

    #[test]
    fn rename_info_round_trip() {
        let ri = RenameInfo {
            replace_if_exists: true,
            file_name: "a\\b.txt".into(),
        };
        let mut b = Vec::new();
        ri.encode(&mut b);
        assert_eq!(b.len(), 20 + 14);
        assert_eq!(RenameInfo::decode(&b).unwrap(), ri);
        let mut m = vec![0u8; HEADER_LEN];
        SetInfoRequest {
            info_type: INFO_FILE,
            class: class::RENAME,
            additional_information: 0,
            file_id: FileId::default(),
            buffer: &b,
        }
        .encode(&mut m);
        let s = SetInfoRequest::decode(&m).unwrap();
        assert_eq!(RenameInfo::decode(s.buffer).unwrap(), ri);
    }

    #[test]
    fn fixed_sizes_match_fscc() {
        let a = FileAttrs::default();
        let f = OpenFacts {
            name: "\\x".into(),
            ..Default::default()
        };
        for (c, n) in [
            (class::BASIC, 40),
            (class::STANDARD, 24),
            (class::NETWORK_OPEN, 56),
            (class::ALL, 104),
            (class::ATTRIBUTE_TAG, 8),
        ] {
            assert_eq!(encode_file_info(c, &a, &f).unwrap().len(), n, "class {c}");
        }
        assert!(encode_file_info(200, &a, &f).is_none());
    }
}
