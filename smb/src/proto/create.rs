//! CREATE and CLOSE (MS-SMB2 2.2.13 – 2.2.16), with generic create-context parsing and the
//! MxAc / QFid response contexts.

use super::header::HEADER_LEN;
use super::wire::{len_u16, len_u32, slice_at, utf16le, Put, Reader};
use super::{FileAttrs, FileId, ProtoError};

/// CreateDisposition: supersede.
pub const FILE_SUPERSEDE: u32 = 0;
/// CreateDisposition: open existing.
pub const FILE_OPEN: u32 = 1;
/// CreateDisposition: create new, fail if it exists.
pub const FILE_CREATE: u32 = 2;
/// CreateDisposition: open or create.
pub const FILE_OPEN_IF: u32 = 3;
/// CreateDisposition: open and truncate existing.
pub const FILE_OVERWRITE: u32 = 4;
/// CreateDisposition: open-and-truncate or create.
pub const FILE_OVERWRITE_IF: u32 = 5;

/// CreateOptions: the target must be a directory.
pub const FILE_DIRECTORY_FILE: u32 = 0x0000_0001;
/// CreateOptions: write through.
pub const FILE_WRITE_THROUGH: u32 = 0x0000_0002;
/// CreateOptions: the target must not be a directory.
pub const FILE_NON_DIRECTORY_FILE: u32 = 0x0000_0040;
/// CreateOptions: delete the file when the last handle closes.
pub const FILE_DELETE_ON_CLOSE: u32 = 0x0000_1000;
/// CreateOptions: open by file id (not supported).
pub const FILE_OPEN_BY_FILE_ID: u32 = 0x0000_2000;
/// CreateOptions: open a reparse point itself.
pub const FILE_OPEN_REPARSE_POINT: u32 = 0x0020_0000;

/// CreateAction: superseded.
pub const FILE_SUPERSEDED: u32 = 0;
/// CreateAction: opened.
pub const FILE_OPENED: u32 = 1;
/// CreateAction: created.
pub const FILE_CREATED: u32 = 2;
/// CreateAction: overwritten.
pub const FILE_OVERWRITTEN: u32 = 3;

/// CLOSE flag: return the file's attributes in the response.
pub const CLOSE_FLAG_POSTQUERY_ATTRIB: u16 = 0x0001;

/// Longest path name in a CREATE (bytes of UTF-16): 32 KiB, the Windows path limit.
pub const MAX_CREATE_NAME_BYTES: usize = 32 * 1024;
/// Most create contexts parsed from one request.
pub const MAX_CREATE_CONTEXTS: usize = 32;

/// Create context name: query maximal access.
pub const CTX_MXAC: &[u8] = b"MxAc";
/// Create context name: query on-disk file id.
pub const CTX_QFID: &[u8] = b"QFid";
/// SMB2_CREATE_SD_BUFFER: the security descriptor of a file being created.
pub const CTX_SECD: &[u8] = b"SecD";
/// SMB2_CREATE_EA_BUFFER: extended attributes of a file being created.
pub const CTX_EXTA: &[u8] = b"ExtA";

/// One create context, borrowed from the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateContext<'a> {
    /// Name (usually 4 ASCII bytes or a 16-byte GUID).
    pub name: &'a [u8],
    /// Data.
    pub data: &'a [u8],
}

/// A CREATE request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateRequest<'a> {
    /// RequestedOplockLevel.
    pub oplock_level: u8,
    /// ImpersonationLevel.
    pub impersonation_level: u32,
    /// DesiredAccess.
    pub desired_access: u32,
    /// FileAttributes.
    pub file_attributes: u32,
    /// ShareAccess.
    pub share_access: u32,
    /// CreateDisposition.
    pub create_disposition: u32,
    /// CreateOptions.
    pub create_options: u32,
    /// The path relative to the share, as sent (backslash separated).
    pub name: String,
    /// Create contexts.
    pub contexts: Vec<CreateContext<'a>>,
}

/// Decodes a chain of create contexts (MS-SMB2 2.2.13.2); offsets are relative to each context.
pub fn decode_create_contexts(buf: &[u8]) -> Result<Vec<CreateContext<'_>>, ProtoError> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    loop {
        if out.len() >= MAX_CREATE_CONTEXTS {
            return Err(ProtoError::TooMany("create contexts"));
        }
        let ctx = buf.get(pos..).ok_or(ProtoError::BadOffset)?;
        let mut r = Reader::new(ctx);
        let next = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let name_off = usize::from(r.u16()?);
        let name_len = usize::from(r.u16()?);
        r.skip(2)?;
        let data_off = usize::from(r.u16()?);
        let data_len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let name = slice_at(ctx, name_off, name_len)?;
        let data = slice_at(ctx, data_off, data_len)?;
        out.push(CreateContext { name, data });
        if next == 0 {
            return Ok(out);
        }
        if next < 16 || next % 8 != 0 {
            return Err(ProtoError::BadOffset);
        }
        pos = pos.checked_add(next).ok_or(ProtoError::BadOffset)?;
    }
}

/// Appends create contexts (8-aligned, chained by Next) to `out`; returns (offset, length) of
/// the chain, the offset measured from the start of `out`. `out` must start 8-aligned with
/// respect to the SMB2 header (callers add the header-relative base).
pub fn encode_create_contexts(out: &mut Vec<u8>, contexts: &[(&[u8], Vec<u8>)]) -> (u32, u32) {
    if contexts.is_empty() {
        return (0, 0);
    }
    out.pad_to(8);
    let start = out.len();
    let mut prev_next_at: Option<usize> = None;
    for (name, data) in contexts {
        out.pad_to(8);
        let here = out.len();
        if let Some(at) = prev_next_at {
            out.set_u32(at, len_u32(here - (at)));
        }
        prev_next_at = Some(here);
        out.put_u32(0);
        out.put_u16(16);
        out.put_u16(len_u16(name.len()));
        out.put_u16(0);
        let data_off_at = out.len();
        out.put_u16(0);
        out.put_u32(len_u32(data.len()));
        out.extend_from_slice(name);
        out.pad_to(8);
        let data_off = out.len() - here;
        out.set_u16(data_off_at, len_u16(data_off));
        out.extend_from_slice(data);
    }
    (len_u32(start), len_u32(out.len() - start))
}

impl<'a> CreateRequest<'a> {
    /// Decodes a CREATE request; `msg` starts at the SMB2 header.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 57 {
            return Err(ProtoError::BadStructureSize("CREATE request"));
        }
        r.skip(1)?;
        let oplock_level = r.u8()?;
        let impersonation_level = r.u32()?;
        r.skip(16)?;
        let desired_access = r.u32()?;
        let file_attributes = r.u32()?;
        let share_access = r.u32()?;
        let create_disposition = r.u32()?;
        let create_options = r.u32()?;
        let name_off = usize::from(r.u16()?);
        let name_len = usize::from(r.u16()?);
        let ctx_off = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let ctx_len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        if name_len > MAX_CREATE_NAME_BYTES {
            return Err(ProtoError::TooMany("create name bytes"));
        }
        let name = utf16le(slice_at(msg, name_off, name_len)?)?;
        let contexts = if ctx_len == 0 {
            Vec::new()
        } else {
            decode_create_contexts(slice_at(msg, ctx_off, ctx_len)?)?
        };
        Ok(Self {
            oplock_level,
            impersonation_level,
            desired_access,
            file_attributes,
            share_access,
            create_disposition,
            create_options,
            name,
            contexts,
        })
    }

    /// Finds a create context by name.
    pub fn context(&self, name: &[u8]) -> Option<&CreateContext<'a>> {
        self.contexts.iter().find(|c| c.name == name)
    }

    /// Appends the body (tests, fuzz seeds); contexts are encoded with
    /// [`encode_create_contexts`].
    pub fn encode(&self, out: &mut Vec<u8>) {
        let base = len_u32(out.len());
        out.put_u16(57);
        out.put_u8(0);
        out.put_u8(self.oplock_level);
        out.put_u32(self.impersonation_level);
        out.put_zeros(16);
        out.put_u32(self.desired_access);
        out.put_u32(self.file_attributes);
        out.put_u32(self.share_access);
        out.put_u32(self.create_disposition);
        out.put_u32(self.create_options);
        let name_bytes = super::wire::utf16_len(&self.name);
        out.put_u16(len_u16(HEADER_LEN + 56));
        out.put_u16(len_u16(name_bytes));
        let ctx_at = out.len();
        out.put_u32(0);
        out.put_u32(0);
        out.put_utf16(&self.name);
        if name_bytes == 0 {
            out.put_u8(0);
        }
        let ctxs: Vec<(&[u8], Vec<u8>)> = self
            .contexts
            .iter()
            .map(|c| (c.name, c.data.to_vec()))
            .collect();
        let (off, len) = encode_create_contexts(out, &ctxs);
        out.set_u32(
            ctx_at,
            if len == 0 {
                0
            } else {
                off - base + HEADER_LEN as u32
            },
        );
        out.set_u32(ctx_at + 4, len);
    }
}

/// A CREATE response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CreateResponse {
    /// OplockLevel granted.
    pub oplock_level: u8,
    /// CreateAction (`FILE_OPENED`...).
    pub create_action: u32,
    /// The file's attributes and times.
    pub attrs: FileAttrs,
    /// The new handle.
    pub file_id: FileId,
    /// Response create contexts (name, data).
    pub contexts: Vec<(&'static [u8], Vec<u8>)>,
}

impl CreateResponse {
    /// Appends the body.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let base = len_u32(out.len());
        out.put_u16(89);
        out.put_u8(self.oplock_level);
        out.put_u8(0);
        out.put_u32(self.create_action);
        self.attrs.encode_times(out);
        out.put_u64(self.attrs.allocation_size);
        out.put_u64(self.attrs.end_of_file);
        out.put_u32(self.attrs.attributes);
        out.put_u32(0);
        self.file_id.encode(out);
        let ctx_at = out.len();
        out.put_u32(0);
        out.put_u32(0);
        if self.contexts.is_empty() {
            out.put_u8(0);
        } else {
            let ctxs: Vec<(&[u8], Vec<u8>)> =
                self.contexts.iter().map(|(n, d)| (*n, d.clone())).collect();
            let (off, len) = encode_create_contexts(out, &ctxs);
            out.set_u32(
                ctx_at,
                if len == 0 {
                    0
                } else {
                    off - base + HEADER_LEN as u32
                },
            );
            out.set_u32(ctx_at + 4, len);
        }
    }
}

/// Data of an MxAc response context: QueryStatus and MaximalAccess.
pub fn mxac_response(status: u32, maximal_access: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(8);
    v.put_u32(status);
    v.put_u32(maximal_access);
    v
}

/// Data of a QFid response context: 32 opaque bytes, the file id then the volume id.
pub fn qfid_response(file_id: u64, volume_id: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(32);
    v.put_u64(file_id);
    v.put_u64(volume_id);
    v.put_zeros(16);
    v
}

/// A CLOSE request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseRequest {
    /// Flags (`CLOSE_FLAG_POSTQUERY_ATTRIB`).
    pub flags: u16,
    /// The handle.
    pub file_id: FileId,
}

impl CloseRequest {
    /// Decodes a CLOSE request.
    pub fn decode(msg: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 24 {
            return Err(ProtoError::BadStructureSize("CLOSE request"));
        }
        let flags = r.u16()?;
        r.skip(4)?;
        let file_id = FileId::decode(&mut r)?;
        Ok(Self { flags, file_id })
    }
}

/// Appends a CLOSE response body; `attrs` is `Some` when post-query attributes were asked for.
pub fn encode_close_response(out: &mut Vec<u8>, attrs: Option<&FileAttrs>) {
    out.put_u16(60);
    match attrs {
        Some(a) => {
            out.put_u16(CLOSE_FLAG_POSTQUERY_ATTRIB);
            out.put_u32(0);
            a.encode_times(out);
            out.put_u64(a.allocation_size);
            out.put_u64(a.end_of_file);
            out.put_u32(a.attributes);
        }
        None => out.put_zeros(58),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_request_round_trip_with_contexts() {
        let req = CreateRequest {
            oplock_level: 0,
            impersonation_level: 2,
            desired_access: 0x0012_0089,
            file_attributes: 0,
            share_access: 7,
            create_disposition: FILE_OPEN,
            create_options: FILE_NON_DIRECTORY_FILE,
            name: "dir\\file.txt".into(),
            contexts: vec![
                CreateContext {
                    name: CTX_MXAC,
                    data: &[],
                },
                CreateContext {
                    name: CTX_QFID,
                    data: &[],
                },
            ],
        };
        let mut msg = vec![0u8; HEADER_LEN];
        req.encode(&mut msg);
        let back = CreateRequest::decode(&msg).unwrap();
        assert_eq!(back, req);
        assert!(back.context(CTX_QFID).is_some());
        for n in 0..msg.len() {
            let _ = CreateRequest::decode(&msg[..n]);
        }
    }

    /// An smbclient CREATE context chain (MxAc + QFid) laid out as MS-SMB2 2.2.13.2 requires.
    #[test]
    fn context_chain_bytes() {
        let mut out = Vec::new();
        let (off, len) =
            encode_create_contexts(&mut out, &[(CTX_MXAC, vec![]), (CTX_QFID, vec![])]);
        assert_eq!((off, len), (0, 48));
        assert_eq!(
            hex::encode(&out),
            "180000001000040000001800000000004d78416300000000\
             000000001000040000001800000000005146696400000000"
        );
        let back = decode_create_contexts(&out).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].name, CTX_QFID);
    }

    #[test]
    fn context_loop_is_refused() {
        // Next = 0 would end; Next pointing to itself (8 < 16) is invalid.
        let mut out = Vec::new();
        encode_create_contexts(&mut out, &[(CTX_MXAC, vec![])]);
        out[0] = 8;
        assert!(decode_create_contexts(&out).is_err());
    }

    #[test]
    fn close_response_sizes() {
        let mut out = Vec::new();
        encode_close_response(&mut out, None);
        assert_eq!(out.len(), 60);
        let mut out2 = Vec::new();
        encode_close_response(
            &mut out2,
            Some(&FileAttrs {
                end_of_file: 5,
                ..Default::default()
            }),
        );
        assert_eq!(out2.len(), 60);
        assert_eq!(&out2[48..56], &5u64.to_le_bytes());
    }
}
