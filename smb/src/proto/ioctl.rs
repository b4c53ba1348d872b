//! IOCTL request/response (MS-SMB2 2.2.31, 2.2.32) and the FSCTL payloads the server parses.

use super::header::HEADER_LEN;
use super::wire::{len_u32, slice_at, Put, Reader};
use super::{FileId, ProtoError};

/// IOCTL flag: the request is an FSCTL.
pub const IOCTL_IS_FSCTL: u32 = 0x0000_0001;
/// FSCTL_DFS_GET_REFERRALS.
pub const FSCTL_DFS_GET_REFERRALS: u32 = 0x0006_0194;
/// FSCTL_PIPE_TRANSCEIVE: write a request to a named pipe and read its answer.
pub const FSCTL_PIPE_TRANSCEIVE: u32 = 0x0011_C017;
/// FSCTL_SRV_REQUEST_RESUME_KEY.
pub const FSCTL_SRV_REQUEST_RESUME_KEY: u32 = 0x0014_0078;
/// FSCTL_SRV_COPYCHUNK.
pub const FSCTL_SRV_COPYCHUNK: u32 = 0x0014_40F2;
/// FSCTL_SRV_COPYCHUNK_WRITE.
pub const FSCTL_SRV_COPYCHUNK_WRITE: u32 = 0x0014_80F2;
/// FSCTL_VALIDATE_NEGOTIATE_INFO.
pub const FSCTL_VALIDATE_NEGOTIATE_INFO: u32 = 0x0014_0204;
/// FSCTL_QUERY_NETWORK_INTERFACE_INFO.
pub const FSCTL_QUERY_NETWORK_INTERFACE_INFO: u32 = 0x0014_01FC;
/// FSCTL_CREATE_OR_GET_OBJECT_ID.
pub const FSCTL_CREATE_OR_GET_OBJECT_ID: u32 = 0x0009_00C0;
/// FSCTL_SET_SPARSE.
pub const FSCTL_SET_SPARSE: u32 = 0x0009_00C4;
/// FSCTL_SET_ZERO_DATA.
pub const FSCTL_SET_ZERO_DATA: u32 = 0x0009_80C8;
/// FSCTL_QUERY_ALLOCATED_RANGES.
pub const FSCTL_QUERY_ALLOCATED_RANGES: u32 = 0x0009_40CF;
/// Largest IOCTL input we accept.
pub const MAX_IOCTL_INPUT: usize = 64 * 1024;

/// An IOCTL request with its input borrowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoctlRequest<'a> {
    /// CtlCode.
    pub ctl_code: u32,
    /// The handle (all-ones for FSCTLs that address no file).
    pub file_id: FileId,
    /// Input data.
    pub input: &'a [u8],
    /// MaxOutputResponse.
    pub max_output_response: u32,
    /// Flags (`IOCTL_IS_FSCTL`).
    pub flags: u32,
}

impl<'a> IoctlRequest<'a> {
    /// Decodes an IOCTL request.
    pub fn decode(msg: &'a [u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(msg.get(HEADER_LEN..).ok_or(ProtoError::Truncated)?);
        if r.u16()? != 57 {
            return Err(ProtoError::BadStructureSize("IOCTL request"));
        }
        r.skip(2)?;
        let ctl_code = r.u32()?;
        let file_id = FileId::decode(&mut r)?;
        let in_off = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let in_len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
        let _max_in = r.u32()?;
        let _out_off = r.u32()?;
        let _out_len = r.u32()?;
        let max_output_response = r.u32()?;
        let flags = r.u32()?;
        if in_len > MAX_IOCTL_INPUT {
            return Err(ProtoError::TooMany("IOCTL input bytes"));
        }
        let input = slice_at(msg, in_off, in_len)?;
        Ok(Self {
            ctl_code,
            file_id,
            input,
            max_output_response,
            flags,
        })
    }

    /// Appends the body (tests, fuzz seeds).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.put_u16(57);
        out.put_u16(0);
        out.put_u32(self.ctl_code);
        self.file_id.encode(out);
        out.put_u32(if self.input.is_empty() {
            0
        } else {
            (HEADER_LEN + 56) as u32
        });
        out.put_u32(len_u32(self.input.len()));
        out.put_u32(0);
        out.put_u32(0);
        out.put_u32(0);
        out.put_u32(self.max_output_response);
        out.put_u32(self.flags);
        out.put_u32(0);
        out.extend_from_slice(self.input);
    }
}

/// Appends an IOCTL response body with `output` as its output buffer.
pub fn encode_ioctl_response(out: &mut Vec<u8>, ctl_code: u32, file_id: FileId, output: &[u8]) {
    let off = (HEADER_LEN + 48) as u32;
    out.put_u16(49);
    out.put_u16(0);
    out.put_u32(ctl_code);
    file_id.encode(out);
    out.put_u32(off);
    out.put_u32(0);
    out.put_u32(off);
    out.put_u32(len_u32(output.len()));
    out.put_u32(0);
    out.put_u32(0);
    out.extend_from_slice(output);
}

/// FSCTL_VALIDATE_NEGOTIATE_INFO input (MS-SMB2 2.2.31.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidateNegotiateInfo {
    /// Capabilities the client sent in NEGOTIATE.
    pub capabilities: u32,
    /// ClientGuid.
    pub guid: [u8; 16],
    /// SecurityMode.
    pub security_mode: u16,
    /// Dialects.
    pub dialects: Vec<u16>,
}

impl ValidateNegotiateInfo {
    /// Decodes the input buffer.
    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(buf);
        let capabilities = r.u32()?;
        let guid = r.array()?;
        let security_mode = r.u16()?;
        let n = usize::from(r.u16()?);
        if n > super::negotiate::MAX_DIALECTS {
            return Err(ProtoError::TooMany("dialects"));
        }
        let dialects = (0..n).map(|_| r.u16()).collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            capabilities,
            guid,
            security_mode,
            dialects,
        })
    }
}

/// Output of FSCTL_VALIDATE_NEGOTIATE_INFO (MS-SMB2 2.2.32.6).
pub fn validate_negotiate_response(
    capabilities: u32,
    guid: &[u8; 16],
    security_mode: u16,
    dialect: u16,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(24);
    v.put_u32(capabilities);
    v.extend_from_slice(guid);
    v.put_u16(security_mode);
    v.put_u16(dialect);
    v
}

/// FILE_OBJECTID_BUFFER (MS-FSCC 2.1.3) for a file: the object id is derived from the stable
/// file id and the volume serial, the birth ids equal the current ones, no domain id.
pub fn object_id_buffer(file_id: u64, volume_serial: u32) -> Vec<u8> {
    let mut oid = Vec::with_capacity(16);
    oid.put_u64(file_id);
    oid.put_u32(volume_serial);
    oid.put_u32(0);
    let mut v = Vec::with_capacity(64);
    v.extend_from_slice(&oid);
    v.put_zeros(16); // BirthVolumeId
    v.extend_from_slice(&oid); // BirthObjectId
    v.put_zeros(16); // DomainId
    v
}

/// Length of a server-side copy resume key.
pub const RESUME_KEY_LEN: usize = 24;
/// Most chunks in one COPYCHUNK request (MS-SMB2 3.3.3 ServerSideCopyMaxNumberofChunks).
pub const COPYCHUNK_MAX_CHUNKS: u32 = 256;
/// Largest chunk (ServerSideCopyMaxChunkSize).
pub const COPYCHUNK_MAX_CHUNK_SIZE: u32 = 1024 * 1024;
/// Most bytes in one COPYCHUNK request (ServerSideCopyMaxDataSize).
pub const COPYCHUNK_MAX_TOTAL: u32 = 16 * 1024 * 1024;

/// SRV_REQUEST_RESUME_KEY output (MS-SMB2 2.2.32.3): the key, ContextLength 0, and the
/// 4-byte Context field that Windows always sends (Samba's NDR expects 32 bytes).
pub fn resume_key_response(key: &[u8; RESUME_KEY_LEN]) -> Vec<u8> {
    let mut v = Vec::with_capacity(RESUME_KEY_LEN + 8);
    v.extend_from_slice(key);
    v.put_u32(0);
    v.put_u32(0);
    v
}

/// One SRV_COPYCHUNK element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Offset in the source.
    pub source_offset: u64,
    /// Offset in the target.
    pub target_offset: u64,
    /// Bytes to copy.
    pub length: u32,
}

/// SRV_COPYCHUNK_COPY input (MS-SMB2 2.2.31.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyChunkRequest {
    /// The source's resume key.
    pub source_key: [u8; RESUME_KEY_LEN],
    /// The chunks; `count` may exceed the parsed ones when over the limit.
    pub chunks: Vec<Chunk>,
    /// ChunkCount as sent.
    pub count: u32,
}

impl CopyChunkRequest {
    /// Decodes the input; chunks beyond [`COPYCHUNK_MAX_CHUNKS`] are not parsed (the caller
    /// refuses the request from `count`).
    pub fn decode(buf: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(buf);
        let source_key = r.array()?;
        let count = r.u32()?;
        r.skip(4)?;
        let mut chunks = Vec::new();
        if count <= COPYCHUNK_MAX_CHUNKS {
            for _ in 0..count {
                let source_offset = r.u64()?;
                let target_offset = r.u64()?;
                let length = r.u32()?;
                r.skip(4)?;
                chunks.push(Chunk {
                    source_offset,
                    target_offset,
                    length,
                });
            }
        }
        Ok(Self {
            source_key,
            chunks,
            count,
        })
    }
}

/// SRV_COPYCHUNK_RESPONSE (MS-SMB2 2.2.32.1).
pub fn copychunk_response(
    chunks_written: u32,
    chunk_bytes_written: u32,
    total_bytes_written: u32,
) -> Vec<u8> {
    let mut v = Vec::with_capacity(12);
    v.put_u32(chunks_written);
    v.put_u32(chunk_bytes_written);
    v.put_u32(total_bytes_written);
    v
}

/// One network interface as FSCTL_QUERY_NETWORK_INTERFACE_INFO reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetInterface {
    /// IfIndex: channels over the same index share a NIC.
    pub if_index: u32,
    /// LinkSpeed in bits per second.
    pub link_speed: u64,
    /// The NIC has several receive queues (RSS_CAPABLE: clients open several channels
    /// over it).
    pub rss_capable: bool,
    /// The address (port is not sent).
    pub addr: std::net::IpAddr,
}

/// NETWORK_INTERFACE_INFO Capability bit: the interface is RSS-capable.
pub const NET_IFACE_RSS_CAPABLE: u32 = 0x0000_0001;

/// Length of one NETWORK_INTERFACE_INFO entry: 24 bytes plus a 128-byte SOCKADDR_STORAGE.
pub const NETWORK_INTERFACE_INFO_LEN: usize = 152;

/// The NETWORK_INTERFACE_INFO list (MS-SMB2 2.2.32.5): entries chained by Next, IPv4 as
/// SOCKADDR_IN and IPv6 as SOCKADDR_IN6, each padded to 128 bytes.
pub fn network_interface_info(interfaces: &[NetInterface]) -> Vec<u8> {
    let mut v = Vec::with_capacity(interfaces.len() * NETWORK_INTERFACE_INFO_LEN);
    for (i, ni) in interfaces.iter().enumerate() {
        let last = i + 1 == interfaces.len();
        v.put_u32(if last {
            0
        } else {
            NETWORK_INTERFACE_INFO_LEN as u32
        });
        v.put_u32(ni.if_index);
        // Capability: RSS when the NIC spreads receive work; never RDMA (no SMB Direct).
        v.put_u32(if ni.rss_capable {
            NET_IFACE_RSS_CAPABLE
        } else {
            0
        });
        v.put_u32(0);
        v.put_u64(ni.link_speed);
        let start = v.len();
        match ni.addr {
            std::net::IpAddr::V4(a) => {
                v.put_u16(0x0002); // AF_INET
                v.put_u16(0); // port
                v.extend_from_slice(&a.octets());
            }
            std::net::IpAddr::V6(a) => {
                v.put_u16(0x0017); // AF_INET6
                v.put_u16(0); // port
                v.put_u32(0); // flow info
                v.extend_from_slice(&a.octets());
                v.put_u32(0); // scope id
            }
        }
        let used = v.len() - start;
        v.put_zeros(128 - used);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_round_trip() {
        let mut input = Vec::new();
        input.put_u32(0x7f);
        input.extend_from_slice(&[9u8; 16]);
        input.put_u16(1);
        input.put_u16(2);
        input.put_u16(0x0300);
        input.put_u16(0x0302);
        let req = IoctlRequest {
            ctl_code: FSCTL_VALIDATE_NEGOTIATE_INFO,
            file_id: FileId::ALL_ONES,
            input: &input,
            max_output_response: 24,
            flags: IOCTL_IS_FSCTL,
        };
        let mut m = vec![0u8; HEADER_LEN];
        req.encode(&mut m);
        let back = IoctlRequest::decode(&m).unwrap();
        assert_eq!(back, req);
        let v = ValidateNegotiateInfo::decode(back.input).unwrap();
        assert_eq!(v.dialects, vec![0x0300, 0x0302]);
        let mut out = Vec::new();
        encode_ioctl_response(
            &mut out,
            FSCTL_VALIDATE_NEGOTIATE_INFO,
            FileId::ALL_ONES,
            &validate_negotiate_response(1, &[0; 16], 1, 0x0302),
        );
        assert_eq!(out.len(), 48 + 24);
        let two = network_interface_info(&[
            NetInterface {
                if_index: 1,
                link_speed: 1,
                rss_capable: true,
                addr: [127, 0, 0, 1].into(),
            },
            NetInterface {
                if_index: 2,
                link_speed: 25_000_000_000,
                rss_capable: false,
                addr: std::net::Ipv6Addr::LOCALHOST.into(),
            },
        ]);
        assert_eq!(two.len(), 2 * NETWORK_INTERFACE_INFO_LEN);
        assert_eq!(&two[0..4], &152u32.to_le_bytes());
        assert_eq!(&two[152..156], &0u32.to_le_bytes());
        assert_eq!(&two[24..26], &2u16.to_le_bytes());
        assert_eq!(&two[28..32], &[127, 0, 0, 1]);
        assert_eq!(&two[152 + 24..152 + 26], &0x17u16.to_le_bytes());
        assert_eq!(two[152 + 32 + 15], 1);
        assert_eq!(&two[8..12], &NET_IFACE_RSS_CAPABLE.to_le_bytes());
        assert_eq!(&two[152 + 8..152 + 12], &0u32.to_le_bytes());
        assert_eq!(&two[152 + 16..152 + 24], &25_000_000_000u64.to_le_bytes());
    }
}
