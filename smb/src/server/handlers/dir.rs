//! QUERY_DIRECTORY (MS-SMB2 3.3.5.18): resumable enumeration through a [`crate::vfs::DirCursor`]
//! kept in the open, bounded by the client's output buffer. A connection that negotiated
//! AAPL read-dir-attr gets the Apple fields in FileIdBothDirectoryInformation entries.

use crate::proto::aapl::AppleDirInfo;
use crate::proto::dir::{
    is_directory_class, DirEncoder, DirEntry, QueryDirectoryRequest, MAX_QUERY_DIRECTORY_OUTPUT,
    REOPEN, RESTART_SCANS, RETURN_SINGLE_ENTRY,
};
use crate::proto::info::class;
use crate::proto::io::encode_buffer_response;
use crate::proto::status;

use super::tree::{ACCESS_ALL, ACCESS_READ};
use super::{attrs_of, blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::state::TreeKind;
use crate::vfs::{filetime_to_unix, DirEntry as VfsDirEntry};

/// Handles QUERY_DIRECTORY.
pub async fn query_directory(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: QueryDirectoryRequest,
) -> HResult {
    if !is_directory_class(req.class) {
        return Err(status::INVALID_INFO_CLASS);
    }
    let limit = req.output_buffer_length.min(MAX_QUERY_DIRECTORY_OUTPUT);
    conn.state
        .credits
        .check_charge(ctx.hdr.credit_charge, u64::from(limit))
        .map_err(|_| status::INVALID_PARAMETER)?;
    let apple_access = apple_max_access(conn, ctx, req.class)?;
    let negotiated = conn.state.aapl;
    let open = super::open(conn, ctx, req.file_id)?;
    if !open.is_dir {
        return Err(status::INVALID_PARAMETER);
    }
    let f = file_of(open)?;
    let restart = req.flags & (RESTART_SCANS | REOPEN) != 0;
    let reopen = req.flags & REOPEN != 0 || open.cursor.is_none();
    if open.cursor_done && !restart && !reopen {
        return Err(status::NO_MORE_FILES);
    }
    let pattern = if req.pattern.is_empty() {
        "*".to_string()
    } else {
        req.pattern.clone()
    };
    let first = reopen;
    let cursor = if reopen { None } else { open.cursor.take() };
    open.pattern = pattern.clone();
    let single = req.flags & RETURN_SINGLE_ENTRY != 0;
    let class = req.class;
    let result = blocking(move || {
        let mut cursor = match cursor {
            Some(mut c) => {
                if restart {
                    c.restart()?;
                }
                c
            }
            None => f.list_dir(&pattern)?,
        };
        if apple_access.is_some() {
            cursor.want_mac_metadata();
        }
        let mut enc = DirEncoder::new(class, usize::try_from(limit).unwrap_or(0));
        let mut ended = false;
        loop {
            let Some(e) = cursor.next_entry()? else {
                ended = true;
                break;
            };
            let de = DirEntry {
                name: e.name.clone(),
                attrs: attrs_of(&e.info),
                file_id: super::aapl::client_file_id(negotiated, e.info.file_id),
                apple: apple_access.map(|a| apple_info(a, &e)),
            };
            if !enc.push(&de) {
                cursor.unread(e);
                break;
            }
            if single {
                break;
            }
        }
        Ok((cursor, enc.count(), enc.finish(), ended))
    })
    .await;
    let open = super::open(conn, ctx, req.file_id)?;
    let (cursor, count, buf, ended) = match result {
        Ok(v) => v,
        Err(st) => {
            open.cursor = None;
            return Err(st);
        }
    };
    open.cursor = Some(cursor);
    open.cursor_done = ended && count == 0;
    if count == 0 {
        return Err(if !ended {
            status::INFO_LENGTH_MISMATCH
        } else if first {
            status::NO_SUCH_FILE
        } else {
            status::NO_MORE_FILES
        });
    }
    let mut body = Vec::with_capacity(buf.len() + 8);
    encode_buffer_response(&mut body, &buf);
    Ok(Reply::ok(body))
}

/// The maximal access to report in Apple listing entries, or `None` when this listing
/// carries no Apple fields (not negotiated, or another class). It is the tree's bound (read
/// only on a read-only share): a stored security descriptor may allow less, which the
/// open itself then enforces; reading every entry's descriptor would cost a listing the
/// round trips this extension exists to save.
fn apple_max_access(
    conn: &mut Connection,
    ctx: &Ctx<'_>,
    info_class: u8,
) -> Result<Option<u32>, u32> {
    if info_class != class::ID_BOTH_DIRECTORY || !conn.state.aapl.is_some_and(|a| a.read_dir_attr())
    {
        return Ok(None);
    }
    let read_only = match &super::tree(conn, ctx)?.kind {
        TreeKind::Disk { read_only, .. } => *read_only,
        TreeKind::Ipc => true,
    };
    Ok(Some(if read_only { ACCESS_READ } else { ACCESS_ALL }))
}

/// The Apple fields of a listed entry.
fn apple_info(max_access: u32, e: &VfsDirEntry) -> AppleDirInfo {
    let plain = AppleDirInfo::plain(max_access, e.info.unix_mode);
    match &e.mac {
        Some(m) => plain.with_mac_metadata(
            m.rfork_size,
            m.afp_info.as_deref(),
            !e.info.is_dir,
            filetime_to_unix(e.info.creation_time).0,
        ),
        None => plain,
    }
}
