//! The Apple `AAPL` create context: macOS clients send a server query on their first
//! CREATE and learn which Apple extensions the server offers; the reply decides, among
//! other things, whether directory listings carry the per-file metadata Finder would
//! otherwise fetch with one round trip per file (see [`AppleDirInfo`]).
//!
//! Wire format (little-endian): a request is CommandCode (u32), Reserved (u32),
//! RequestBitmap (u64), ClientCaps (u64), exactly 24 bytes. The reply is CommandCode
//! (u32), Reserved (u32), ReplyBitmap (u64), then, in bitmap order and only when asked
//! for, ServerCaps (u64), VolumeCaps (u64) and the model (Reserved u32, length u32 in
//! bytes, UTF-16LE text). Only the server query is implemented: `kAAPL_RESOLVE_ID` needs
//! a path from a file id, which the storage layer cannot give without scanning the share.

use super::wire::{len_u32, utf16le, Put, Reader};
use super::ProtoError;

/// Create context name of the Apple extensions.
pub const CTX_AAPL: &[u8] = b"AAPL";

/// CommandCode: ask which extensions the server supports.
pub const CMD_SERVER_QUERY: u32 = 1;
/// CommandCode: resolve a file id to a path (not implemented; decoded as unsupported).
pub const CMD_RESOLVE_ID: u32 = 2;

/// Bits of the RequestBitmap / ReplyBitmap: which parts the reply carries.
pub mod query {
    /// ServerCaps.
    pub const SERVER_CAPS: u64 = 1;
    /// VolumeCaps.
    pub const VOLUME_CAPS: u64 = 2;
    /// The model string.
    pub const MODEL_INFO: u64 = 4;
}

/// Bits of ClientCaps and ServerCaps.
pub mod caps {
    /// Directory listings carry the Apple fields ([`super::AppleDirInfo`]).
    pub const SUPPORTS_READ_DIR_ATTR: u64 = 1;
    /// A copychunk of zero chunks copies the whole file with its streams and metadata.
    pub const SUPPORTS_OSX_COPYFILE: u64 = 2;
    /// The server runs on a UNIX file system (modes are meaningful).
    pub const UNIX_BASED: u64 = 4;
    /// Security descriptors carry the UNIX mode as NFS ACEs.
    pub const SUPPORTS_NFS_ACE: u64 = 8;
}

/// Bits of VolumeCaps.
pub mod volume_caps {
    /// kAAPL_RESOLVE_ID works on this volume.
    pub const SUPPORT_RESOLVE_ID: u64 = 1;
    /// Names are case-sensitive.
    pub const CASE_SENSITIVE: u64 = 2;
    /// A FLUSH makes data durable the way F_FULLFSYNC does (Time Machine needs it).
    pub const FULL_SYNC: u64 = 4;
}

/// Length of a server query request; anything else is refused, as macOS never sends it.
pub const SERVER_QUERY_LEN: usize = 24;
/// Longest model string accepted in a reply (bytes of UTF-16).
pub const MAX_MODEL_BYTES: usize = 256;

/// A decoded `AAPL` request context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerQuery {
    /// Which parts of the reply the client wants ([`query`]).
    pub request_bitmap: u64,
    /// What the client itself supports ([`caps`]).
    pub client_caps: u64,
}

impl ServerQuery {
    /// Decodes the data of an `AAPL` request context. A command other than the server
    /// query is [`ProtoError::Unsupported`]; a wrong length is [`ProtoError::Invalid`].
    pub fn decode(data: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(data);
        let cmd = r.u32()?;
        if cmd != CMD_SERVER_QUERY {
            return Err(ProtoError::Unsupported("AAPL command"));
        }
        if data.len() != SERVER_QUERY_LEN {
            return Err(ProtoError::Invalid("AAPL server query length"));
        }
        r.skip(4)?;
        let request_bitmap = r.u64()?;
        let client_caps = r.u64()?;
        Ok(Self {
            request_bitmap,
            client_caps,
        })
    }

    /// Encodes the request (tests, fuzz seeds).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(SERVER_QUERY_LEN);
        v.put_u32(CMD_SERVER_QUERY);
        v.put_u32(0);
        v.put_u64(self.request_bitmap);
        v.put_u64(self.client_caps);
        v
    }
}

/// The reply to a server query; each part is present exactly when its bit is in the
/// reply bitmap, which [`ServerQueryReply::encode`] derives from the parts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerQueryReply {
    /// ServerCaps ([`caps`]).
    pub server_caps: Option<u64>,
    /// VolumeCaps ([`volume_caps`]).
    pub volume_caps: Option<u64>,
    /// The model string shown by Finder.
    pub model: Option<String>,
}

impl ServerQueryReply {
    /// The ReplyBitmap these parts make.
    pub fn reply_bitmap(&self) -> u64 {
        let mut b = 0;
        if self.server_caps.is_some() {
            b |= query::SERVER_CAPS;
        }
        if self.volume_caps.is_some() {
            b |= query::VOLUME_CAPS;
        }
        if self.model.is_some() {
            b |= query::MODEL_INFO;
        }
        b
    }

    /// Encodes the data of the `AAPL` response context.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(48);
        v.put_u32(CMD_SERVER_QUERY);
        v.put_u32(0);
        v.put_u64(self.reply_bitmap());
        if let Some(c) = self.server_caps {
            v.put_u64(c);
        }
        if let Some(c) = self.volume_caps {
            v.put_u64(c);
        }
        if let Some(m) = &self.model {
            v.put_u32(0);
            let len_at = v.len();
            v.put_u32(0);
            v.put_utf16(m);
            let len = v.len() - len_at - 4;
            v.set_u32(len_at, len_u32(len));
        }
        v
    }

    /// Decodes a reply (tests and fuzzing; the server never receives one). Trailing bytes
    /// and unknown bitmap bits are refused so that decoding inverts [`Self::encode`].
    pub fn decode(data: &[u8]) -> Result<Self, ProtoError> {
        let mut r = Reader::new(data);
        if r.u32()? != CMD_SERVER_QUERY {
            return Err(ProtoError::Unsupported("AAPL command"));
        }
        r.skip(4)?;
        let bitmap = r.u64()?;
        if bitmap & !(query::SERVER_CAPS | query::VOLUME_CAPS | query::MODEL_INFO) != 0 {
            return Err(ProtoError::Invalid("AAPL reply bitmap"));
        }
        let mut out = Self::default();
        if bitmap & query::SERVER_CAPS != 0 {
            out.server_caps = Some(r.u64()?);
        }
        if bitmap & query::VOLUME_CAPS != 0 {
            out.volume_caps = Some(r.u64()?);
        }
        if bitmap & query::MODEL_INFO != 0 {
            r.skip(4)?;
            let len = usize::try_from(r.u32()?).map_err(|_| ProtoError::BadOffset)?;
            if len > MAX_MODEL_BYTES {
                return Err(ProtoError::TooMany("AAPL model bytes"));
            }
            out.model = Some(utf16le(r.bytes(len)?)?);
        }
        if r.remaining() != 0 {
            return Err(ProtoError::Invalid("AAPL reply length"));
        }
        Ok(out)
    }
}

/// `FinderInfo` creation date meaning "unknown" (AppleDouble's date origin, big-endian).
pub const DATE_UNKNOWN: u32 = 0x8000_0000;
/// Seconds from the UNIX epoch to 2000-01-01, the origin of AppleDouble dates.
pub const DATE_DELTA: i64 = 946_684_800;
/// Length of an `AFP_AfpInfo` stream: signature, version, file id, backup time (4 each),
/// FinderInfo (32), ProDOS info (6), reserved (6).
pub const AFP_INFO_LEN: usize = 60;
/// Stream holding a file's AfpInfo (Finder type, creator, flags).
pub const AFP_INFO_STREAM: &str = "AFP_AfpInfo";
/// Stream holding a file's resource fork.
pub const AFP_RESOURCE_STREAM: &str = "AFP_Resource";

/// What a FileIdBothDirectoryInformation entry carries for a client that negotiated
/// [`caps::SUPPORTS_READ_DIR_ATTR`], in fields Windows uses for other things: EaSize holds
/// the maximal access, the ShortName area (length byte 24) the resource fork size and a
/// compressed FinderInfo, and the reserved u16 before FileId the UNIX mode bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppleDirInfo {
    /// The caller's maximal access to the entry.
    pub max_access: u32,
    /// Length of the entry's resource fork (`AFP_Resource` stream), 0 when it has none.
    pub rfork_size: u64,
    /// Compressed FinderInfo: type (4), creator (4), flags (2), extended flags (2), then
    /// the creation date (u32, big-endian, seconds from 2000-01-01).
    pub finder_info: [u8; 16],
    /// The UNIX mode (type and permission bits, truncated to 16 bits as on the wire).
    pub unix_mode: u16,
}

impl AppleDirInfo {
    /// The info of an entry without Mac metadata: empty FinderInfo and an unknown date.
    pub fn plain(max_access: u32, unix_mode: u32) -> Self {
        let mut finder_info = [0u8; 16];
        finder_info[12..].copy_from_slice(&DATE_UNKNOWN.to_be_bytes());
        Self {
            max_access,
            rfork_size: 0,
            finder_info,
            // The wire field is 16 bits wide: S_IFMT and the permission bits fit.
            unix_mode: (unix_mode & 0xFFFF) as u16,
        }
    }

    /// Adds what the entry's Apple streams say: the resource fork's length, and from an
    /// `AFP_AfpInfo` stream ([`AFP_INFO_LEN`] bytes, FinderInfo at offset 16) the
    /// compressed FinderInfo, with type and creator only for files, and the creation date
    /// `created_unix` (seconds) counted from 2000 as Finder's "date added".
    pub fn with_mac_metadata(
        mut self,
        rfork_size: u64,
        afp_info: Option<&[u8]>,
        is_file: bool,
        created_unix: i64,
    ) -> Self {
        self.rfork_size = rfork_size;
        let Some(finder) = afp_info
            .filter(|a| a.len() == AFP_INFO_LEN)
            .and_then(|a| a.get(16..48))
            .and_then(|f| <&[u8; 32]>::try_from(f).ok())
        else {
            return self;
        };
        let mut out = [0u8; 16];
        if is_file {
            out[..8].copy_from_slice(&finder[..8]);
        }
        out[8..10].copy_from_slice(&finder[8..10]);
        out[10..12].copy_from_slice(&finder[24..26]);
        let since_2000 = created_unix.saturating_sub(DATE_DELTA);
        let date =
            i32::try_from(since_2000).unwrap_or(if since_2000 < 0 { i32::MIN } else { i32::MAX });
        out[12..].copy_from_slice(&date.to_be_bytes());
        self.finder_info = out;
        self
    }

    /// The 26 bytes written where ShortNameLength, Reserved1 and ShortName would be.
    pub fn short_name_area(&self) -> [u8; 26] {
        let mut a = [0u8; 26];
        // ShortNameLength 24 (what macOS expects), Reserved1 0.
        a[0] = 24;
        a[2..10].copy_from_slice(&self.rfork_size.to_le_bytes());
        a[10..26].copy_from_slice(&self.finder_info);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The query macOS (and smbtorture's vfs.fruit) sends: all three parts, with the client
    /// supporting read-dir-attr, UNIX and NFS ACEs.
    const MAC_QUERY: &str = "01000000000000000700000000000000\
                             0d00000000000000";

    #[test]
    fn server_query_decodes_byte_exact() {
        let data = hex::decode(MAC_QUERY).unwrap();
        let q = ServerQuery::decode(&data).unwrap();
        assert_eq!(
            q,
            ServerQuery {
                request_bitmap: query::SERVER_CAPS | query::VOLUME_CAPS | query::MODEL_INFO,
                client_caps: caps::SUPPORTS_READ_DIR_ATTR
                    | caps::UNIX_BASED
                    | caps::SUPPORTS_NFS_ACE,
            }
        );
        assert_eq!(q.encode(), data);
    }

    #[test]
    fn malformed_queries_are_refused() {
        let data = hex::decode(MAC_QUERY).unwrap();
        for n in 0..data.len() {
            assert!(ServerQuery::decode(&data[..n]).is_err(), "{n} bytes");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert_eq!(
            ServerQuery::decode(&longer),
            Err(ProtoError::Invalid("AAPL server query length"))
        );
        let mut resolve = data.clone();
        resolve[0] = CMD_RESOLVE_ID as u8;
        assert_eq!(
            ServerQuery::decode(&resolve),
            Err(ProtoError::Unsupported("AAPL command"))
        );
    }

    #[test]
    fn reply_encodes_byte_exact() {
        let reply = ServerQueryReply {
            server_caps: Some(caps::UNIX_BASED | caps::SUPPORTS_READ_DIR_ATTR),
            volume_caps: Some(volume_caps::FULL_SYNC),
            model: Some("Quarry".into()),
        };
        let bytes = reply.encode();
        assert_eq!(
            hex::encode(&bytes),
            "01000000000000000700000000000000\
             0500000000000000\
             0400000000000000\
             000000000c000000\
             510075006100720072007900"
        );
        // 40 fixed bytes plus the UTF-16 model, as smbtorture checks.
        assert_eq!(bytes.len(), 40 + 2 * "Quarry".len());
        assert_eq!(ServerQueryReply::decode(&bytes).unwrap(), reply);
    }

    #[test]
    fn reply_parts_follow_the_bitmap() {
        let reply = ServerQueryReply {
            server_caps: None,
            volume_caps: Some(volume_caps::FULL_SYNC),
            model: None,
        };
        let bytes = reply.encode();
        assert_eq!(
            hex::encode(&bytes),
            "010000000000000002000000000000000400000000000000"
        );
        assert_eq!(ServerQueryReply::decode(&bytes).unwrap(), reply);
    }

    #[test]
    fn malformed_replies_are_refused() {
        let bytes = ServerQueryReply {
            server_caps: Some(1),
            volume_caps: Some(2),
            model: Some("Q".into()),
        }
        .encode();
        for n in 0..bytes.len() {
            assert!(ServerQueryReply::decode(&bytes[..n]).is_err(), "{n} bytes");
        }
        let mut huge = bytes.clone();
        huge[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(ServerQueryReply::decode(&huge).is_err());
        let mut odd_bits = bytes;
        odd_bits[8] |= 0x80;
        assert!(ServerQueryReply::decode(&odd_bits).is_err());
    }

    #[test]
    fn finder_info_is_compressed_from_afp_info() {
        let mut afp = [0u8; AFP_INFO_LEN];
        afp[..4].copy_from_slice(b"AFP\0");
        afp[4..8].copy_from_slice(&[0, 0, 1, 0]);
        afp[16..24].copy_from_slice(b"TEXTttxt");
        afp[24..26].copy_from_slice(&[0x40, 0x00]);
        afp[40..42].copy_from_slice(&[0x00, 0x20]);
        // 2001-01-01: 366 days after the AppleDouble origin.
        let created = DATE_DELTA + 366 * 86_400;
        let info =
            AppleDirInfo::plain(1, 0o100_644).with_mac_metadata(5, Some(&afp), true, created);
        assert_eq!(info.rfork_size, 5);
        assert_eq!(
            hex::encode(info.finder_info),
            format!("544558547474787440000020{:08x}", 366 * 86_400)
        );
        // A directory keeps only the flags; a short stream is ignored.
        let dir = AppleDirInfo::plain(1, 0o40_755).with_mac_metadata(0, Some(&afp), false, created);
        assert_eq!(&dir.finder_info[..8], &[0u8; 8]);
        assert_eq!(&dir.finder_info[8..12], &[0x40, 0, 0, 0x20]);
        let short = AppleDirInfo::plain(1, 0).with_mac_metadata(0, Some(&afp[..59]), true, created);
        assert_eq!(short, AppleDirInfo::plain(1, 0));
        // Dates before 2000 count backwards.
        let old = AppleDirInfo::plain(1, 0).with_mac_metadata(0, Some(&afp), true, 0);
        assert_eq!(&old.finder_info[12..], &(-DATE_DELTA as i32).to_be_bytes());
    }

    #[test]
    fn dir_info_short_name_area_layout() {
        let mut info = AppleDirInfo::plain(0x001F_01FF, 0o100_644);
        assert_eq!(info.unix_mode, 0o100_644);
        info.rfork_size = 0x0102;
        info.finder_info[..4].copy_from_slice(b"TEXT");
        let a = info.short_name_area();
        assert_eq!(
            hex::encode(a),
            "1800\
             0201000000000000\
             544558540000000000000000\
             80000000"
        );
    }
}
