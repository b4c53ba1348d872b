//! srvsvc (MS-SRVS) NetrShareEnum (opnum 15, "NetShareEnumAll") and NetrShareGetInfo
//! (opnum 16), with their NDR request decoding and response encoding.
//!
//! Supported information levels: 0, 1, 2, 501 and 502. Levels 2 and 502 report no local path,
//! password or security descriptor (NULL pointers): clients only display them, and a file
//! server appliance has no reason to reveal its on-disk layout.

use super::ndr::{NdrReader, NdrWriter};
use super::{RpcError, ShareEntry, ShareKind};

/// NetrShareEnum.
pub const OPNUM_NETR_SHARE_ENUM: u16 = 15;
/// NetrShareGetInfo.
pub const OPNUM_NETR_SHARE_GET_INFO: u16 = 16;

/// NetrServerGetInfo.
pub const OPNUM_NETR_SERVER_GET_INFO: u16 = 21;
/// PLATFORM_ID_NT.
pub const PLATFORM_ID_NT: u32 = 500;
/// Version reported in SERVER_INFO_101 (6.1, as Samba reports).
pub const SERVER_VERSION: (u32, u32) = (6, 1);
/// SV_TYPE_WORKSTATION | SV_TYPE_SERVER | SV_TYPE_NT | SV_TYPE_SERVER_NT.
pub const SERVER_TYPE: u32 = 0x0000_0001 | 0x0000_0002 | 0x0000_1000 | 0x0000_8000;

/// Win32/NERR results carried in the WERROR return value.
pub mod werror {
    /// ERROR_SUCCESS.
    pub const OK: u32 = 0;
    /// ERROR_MORE_DATA: a resumable enumeration has more entries.
    pub const MORE_DATA: u32 = 234;
    /// ERROR_INVALID_LEVEL.
    pub const INVALID_LEVEL: u32 = 124;
    /// NERR_NetNameNotFound.
    pub const NET_NAME_NOT_FOUND: u32 = 2310;
}

/// STYPE_DISKTREE.
pub const STYPE_DISKTREE: u32 = 0;
/// STYPE_IPC.
pub const STYPE_IPC: u32 = 3;
/// STYPE_SPECIAL (administrative/hidden share).
pub const STYPE_SPECIAL: u32 = 0x8000_0000;
/// shi*_max_uses meaning "unlimited".
pub const MAX_USES_UNLIMITED: u32 = 0xFFFF_FFFF;
/// Most shares returned in one enumeration (the rest are reported through TotalEntries).
pub const MAX_ENUM_ENTRIES: usize = 4096;

fn share_type(kind: ShareKind) -> u32 {
    match kind {
        ShareKind::Disk => STYPE_DISKTREE,
        ShareKind::Ipc => STYPE_IPC | STYPE_SPECIAL,
    }
}

/// Whether `level` is one we encode.
pub fn level_supported(level: u32) -> bool {
    matches!(level, 0 | 1 | 2 | 501 | 502)
}

/// Writes the fixed (non-deferred) part of one SHARE_INFO_<level>.
fn write_info_fixed(w: &mut NdrWriter, level: u32, s: &ShareEntry) {
    w.ptr(true); // netname
    if level == 0 {
        return;
    }
    w.u32(share_type(s.kind));
    w.ptr(true); // remark
    match level {
        2 | 502 => {
            w.u32(0); // permissions
            w.u32(MAX_USES_UNLIMITED);
            w.u32(0); // current uses
            w.ptr(false); // path
            w.ptr(false); // passwd
            if level == 502 {
                w.u32(0); // reserved (= security descriptor length)
                w.ptr(false); // security descriptor
            }
        }
        501 => w.u32(0), // flags
        _ => {}
    }
}

/// Writes the deferred referents (strings) of one SHARE_INFO_<level>.
fn write_info_deferred(w: &mut NdrWriter, level: u32, s: &ShareEntry) {
    w.wstr(&s.name);
    if level != 0 {
        w.wstr(&s.comment);
    }
}

/// A decoded NetrShareEnum request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareEnumRequest {
    /// Requested information level.
    pub level: u32,
    /// PreferedMaximumLength (ignored: everything fits a response fragment train).
    pub preferred_max_len: u32,
    /// The client's resume handle, if it passed one.
    pub resume_handle: Option<u32>,
}

/// Decodes a NetrShareEnum request stub. An unsupported level is reported with `level` set
/// and the rest defaulted, since its union arm cannot be decoded.
pub fn parse_share_enum(stub: &[u8]) -> Result<ShareEnumRequest, RpcError> {
    let mut r = NdrReader::new(stub);
    if r.ptr()? != 0 {
        r.wstr()?; // ServerName: ignored
    }
    let level = r.u32()?;
    let switch = r.u32()?;
    if switch != level {
        return Err(RpcError::Malformed(
            "SHARE_ENUM_STRUCT: switch differs from level",
        ));
    }
    if !level_supported(level) {
        return Ok(ShareEnumRequest {
            level,
            preferred_max_len: 0,
            resume_handle: None,
        });
    }
    if r.ptr()? != 0 {
        let _entries = r.u32()?;
        if r.ptr()? != 0 {
            return Err(RpcError::Malformed(
                "SHARE_INFO container must be empty in a request",
            ));
        }
    }
    let preferred_max_len = r.u32()?;
    let resume_handle = if r.ptr()? != 0 { Some(r.u32()?) } else { None };
    Ok(ShareEnumRequest {
        level,
        preferred_max_len,
        resume_handle,
    })
}

/// Encodes the NetrShareEnum response stub for `shares`.
pub fn share_enum_response(req: &ShareEnumRequest, shares: &[ShareEntry]) -> Vec<u8> {
    let mut w = NdrWriter::new();
    w.u32(req.level);
    w.u32(req.level);
    if !level_supported(req.level) {
        w.ptr(false);
        w.u32(0); // TotalEntries
        w.ptr(false); // ResumeHandle
        w.u32(werror::INVALID_LEVEL);
        return w.into_bytes();
    }
    let start = req
        .resume_handle
        .map_or(0, |h| usize::try_from(h).unwrap_or(usize::MAX))
        .min(shares.len());
    let page: Vec<&ShareEntry> = shares.iter().skip(start).take(MAX_ENUM_ENTRIES).collect();
    w.ptr(true); // container
    w.u32(page.len() as u32);
    w.ptr(!page.is_empty());
    if !page.is_empty() {
        w.u32(page.len() as u32); // conformance
        for s in &page {
            write_info_fixed(&mut w, req.level, s);
        }
        for s in &page {
            write_info_deferred(&mut w, req.level, s);
        }
    }
    w.u32(shares.len() as u32);
    let next = start + page.len();
    let more = next < shares.len();
    match req.resume_handle {
        Some(_) => {
            w.ptr(true);
            w.u32(if more { next as u32 } else { 0 });
        }
        None => w.ptr(false),
    }
    w.u32(if more { werror::MORE_DATA } else { werror::OK });
    w.into_bytes()
}

/// A decoded NetrShareGetInfo request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGetInfoRequest {
    /// The share asked about.
    pub net_name: String,
    /// Requested information level.
    pub level: u32,
}

/// Decodes a NetrShareGetInfo request stub.
pub fn parse_share_get_info(stub: &[u8]) -> Result<ShareGetInfoRequest, RpcError> {
    let mut r = NdrReader::new(stub);
    if r.ptr()? != 0 {
        r.wstr()?;
    }
    let net_name = r.wstr()?;
    let level = r.u32()?;
    Ok(ShareGetInfoRequest { net_name, level })
}

/// Encodes the NetrShareGetInfo response stub; share names match case-insensitively.
pub fn share_get_info_response(req: &ShareGetInfoRequest, shares: &[ShareEntry]) -> Vec<u8> {
    let mut w = NdrWriter::new();
    w.u32(req.level);
    if !level_supported(req.level) {
        w.ptr(false);
        w.u32(werror::INVALID_LEVEL);
        return w.into_bytes();
    }
    let found = shares
        .iter()
        .find(|s| s.name.to_lowercase() == req.net_name.to_lowercase());
    match found {
        Some(s) => {
            w.ptr(true);
            write_info_fixed(&mut w, req.level, s);
            write_info_deferred(&mut w, req.level, s);
            w.u32(werror::OK);
        }
        None => {
            w.ptr(false);
            w.u32(werror::NET_NAME_NOT_FOUND);
        }
    }
    w.into_bytes()
}

/// What NetrServerGetInfo reports about the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// NetBIOS-style server name, e.g. "QUARRY".
    pub name: String,
    /// Server comment shown by browsers.
    pub comment: String,
}

/// A decoded NetrServerGetInfo request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerGetInfoRequest {
    /// Requested level (100 and 101 are supported).
    pub level: u32,
}

/// Decodes a NetrServerGetInfo request stub.
pub fn parse_server_get_info(stub: &[u8]) -> Result<ServerGetInfoRequest, RpcError> {
    let mut r = NdrReader::new(stub);
    if r.ptr()? != 0 {
        r.wstr()?;
    }
    Ok(ServerGetInfoRequest { level: r.u32()? })
}

/// Encodes the NetrServerGetInfo response stub (SERVER_INFO_100 or _101).
pub fn server_get_info_response(req: &ServerGetInfoRequest, info: &ServerInfo) -> Vec<u8> {
    let mut w = NdrWriter::new();
    w.u32(req.level);
    match req.level {
        100 | 101 => {
            w.ptr(true);
            w.u32(PLATFORM_ID_NT);
            w.ptr(true); // name
            if req.level == 101 {
                w.u32(SERVER_VERSION.0);
                w.u32(SERVER_VERSION.1);
                w.u32(SERVER_TYPE);
                w.ptr(true); // comment
            }
            w.wstr(&info.name);
            if req.level == 101 {
                w.wstr(&info.comment);
            }
            w.u32(werror::OK);
        }
        _ => {
            w.ptr(false);
            w.u32(werror::INVALID_LEVEL);
        }
    }
    w.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn samba_like_shares() -> Vec<ShareEntry> {
        vec![
            ShareEntry {
                name: "data".into(),
                kind: ShareKind::Disk,
                comment: "Data share for tests".into(),
            },
            ShareEntry {
                name: "scratch".into(),
                kind: ShareKind::Disk,
                comment: "Second share".into(),
            },
            ShareEntry {
                name: "IPC$".into(),
                kind: ShareKind::Ipc,
                comment: "IPC Service (Samba 4.17.12-Debian)".into(),
            },
        ]
    }

    #[test]
    fn enum_request_from_smbclient_decodes() {
        // Stub of smbclient's NetShareEnumAll (level 1, server "127.0.0.1", resume handle 0).
        let stub = hex::decode(
            "00000200 0a000000 00000000 0a000000 3100320037002e0030002e0030002e003100 0000\
             01000000 01000000 04000200 00000000 00000000 ffffffff 08000200 00000000"
                .replace(' ', ""),
        )
        .unwrap();
        let req = parse_share_enum(&stub).unwrap();
        assert_eq!(req.level, 1);
        assert_eq!(req.preferred_max_len, 0xffff_ffff);
        assert_eq!(req.resume_handle, Some(0));
    }

    #[test]
    fn get_info_found_not_found_and_bad_level() {
        let shares = samba_like_shares();
        let ok = share_get_info_response(
            &ShareGetInfoRequest {
                net_name: "DATA".into(),
                level: 1,
            },
            &shares,
        );
        assert_eq!(&ok[ok.len() - 4..], &[0, 0, 0, 0]);
        let missing = share_get_info_response(
            &ShareGetInfoRequest {
                net_name: "nope".into(),
                level: 1,
            },
            &shares,
        );
        assert_eq!(missing, [1, 0, 0, 0, 0, 0, 0, 0, 0x06, 0x09, 0, 0]);
        let bad = share_get_info_response(
            &ShareGetInfoRequest {
                net_name: "data".into(),
                level: 7,
            },
            &shares,
        );
        assert_eq!(&bad[bad.len() - 4..], &124u32.to_le_bytes());
    }

    #[test]
    fn enum_pages_with_resume_handle() {
        let shares = samba_like_shares();
        let r = share_enum_response(
            &ShareEnumRequest {
                level: 0,
                preferred_max_len: u32::MAX,
                resume_handle: Some(2),
            },
            &shares,
        );
        // level, switch, container ptr, 1 entry, buffer ptr, conformance 1, netname ptr,
        // "IPC$" string, total 3, resume ptr, resume 0, WERR_OK.
        let mut rd = NdrReader::new(&r);
        assert_eq!(rd.u32().unwrap(), 0);
        assert_eq!(rd.u32().unwrap(), 0);
        assert_ne!(rd.ptr().unwrap(), 0);
        assert_eq!(rd.u32().unwrap(), 1);
        assert_ne!(rd.ptr().unwrap(), 0);
        assert_eq!(rd.u32().unwrap(), 1);
        assert_ne!(rd.ptr().unwrap(), 0);
        assert_eq!(rd.wstr().unwrap(), "IPC$");
        assert_eq!(rd.u32().unwrap(), 3);
        assert_ne!(rd.ptr().unwrap(), 0);
        assert_eq!(rd.u32().unwrap(), 0);
        assert_eq!(rd.u32().unwrap(), 0);
    }
}
