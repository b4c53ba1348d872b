//! Server-side copy (MS-SMB2 3.3.5.15.5, 3.3.5.15.6): FSCTL_SRV_REQUEST_RESUME_KEY names a
//! source open, FSCTL_SRV_COPYCHUNK(_WRITE) copies ranges from it into the target open without
//! the data crossing the network.

use crate::proto::ioctl::{
    copychunk_response, encode_ioctl_response, resume_key_response, CopyChunkRequest, IoctlRequest,
    COPYCHUNK_MAX_CHUNKS, COPYCHUNK_MAX_CHUNK_SIZE, COPYCHUNK_MAX_TOTAL, FSCTL_SRV_COPYCHUNK,
    RESUME_KEY_LEN,
};
use crate::proto::status;
use crate::vfs::FsFile;

use super::create::{FILE_EXECUTE, FILE_READ_DATA, FILE_WRITE_DATA};
use super::{blocking, file_of};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};

/// Size of SRV_COPYCHUNK_RESPONSE.
const COPYCHUNK_RESPONSE_LEN: usize = 12;

fn key_prefix(conn: &Connection) -> [u8; 8] {
    let mut p = [0u8; 8];
    p.copy_from_slice(&conn.config.server_guid[..8]);
    p
}

fn ioctl_reply(st: u32, ctl: u32, req: &IoctlRequest<'_>, ctx: &Ctx<'_>, out: &[u8]) -> Reply {
    let mut body = Vec::with_capacity(48 + out.len());
    encode_ioctl_response(&mut body, ctl, ctx.resolve(req.file_id), out);
    Reply::with_status(st, body)
}

/// FSCTL_SRV_REQUEST_RESUME_KEY: the key names this open on this server.
pub fn request_resume_key(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: &IoctlRequest<'_>,
    max_out: usize,
) -> HResult {
    if max_out < RESUME_KEY_LEN + 8 {
        return Err(status::INVALID_PARAMETER);
    }
    let prefix = key_prefix(conn);
    let open = super::open(conn, ctx, req.file_id)?;
    if open.pipe.is_some() || open.is_dir {
        return Err(status::INVALID_DEVICE_REQUEST);
    }
    let mut key = [0u8; RESUME_KEY_LEN];
    key[..8].copy_from_slice(&prefix);
    key[8..16].copy_from_slice(&open.file_id.volatile.to_le_bytes());
    key[16..].copy_from_slice(&open.file_id.persistent.to_le_bytes());
    Ok(ioctl_reply(
        status::SUCCESS,
        req.ctl_code,
        req,
        ctx,
        &resume_key_response(&key),
    ))
}

/// FSCTL_SRV_COPYCHUNK and FSCTL_SRV_COPYCHUNK_WRITE.
pub async fn copychunk(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: &IoctlRequest<'_>,
    max_out: usize,
) -> HResult {
    if max_out < COPYCHUNK_RESPONSE_LEN {
        return Err(status::INVALID_PARAMETER);
    }
    let cc = CopyChunkRequest::decode(req.input).map_err(|_| status::INVALID_PARAMETER)?;
    let total: u64 = cc.chunks.iter().map(|c| u64::from(c.length)).sum();
    if cc.count > COPYCHUNK_MAX_CHUNKS
        || cc
            .chunks
            .iter()
            .any(|c| c.length > COPYCHUNK_MAX_CHUNK_SIZE || c.length == 0)
        || total > u64::from(COPYCHUNK_MAX_TOTAL)
    {
        let limits = copychunk_response(
            COPYCHUNK_MAX_CHUNKS,
            COPYCHUNK_MAX_CHUNK_SIZE,
            COPYCHUNK_MAX_TOTAL,
        );
        return Ok(ioctl_reply(
            status::INVALID_PARAMETER,
            req.ctl_code,
            req,
            ctx,
            &limits,
        ));
    }
    // Target: the handle the IOCTL names.
    let target = super::open(conn, ctx, req.file_id)?;
    let need = if req.ctl_code == FSCTL_SRV_COPYCHUNK {
        FILE_WRITE_DATA | FILE_READ_DATA
    } else {
        FILE_WRITE_DATA
    };
    if target.access & need != need {
        return Err(status::ACCESS_DENIED);
    }
    let tfile = file_of(target)?;
    let tshare = target.share.clone();
    let (tinode, tid) = (target.inode, target.file_id.volatile);
    // Source: the open the resume key names, in any session of this connection.
    if cc.source_key[..8] != key_prefix(conn) {
        return Err(status::OBJECT_NAME_NOT_FOUND);
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&cc.source_key[8..16]);
    let volatile = u64::from_le_bytes(v);
    let source = conn
        .state
        .sessions
        .values()
        .filter(|s| s.is_valid())
        .find_map(|s| s.opens.get(&volatile))
        .ok_or(status::OBJECT_NAME_NOT_FOUND)?;
    if source.access & (FILE_READ_DATA | FILE_EXECUTE) == 0 {
        return Err(status::ACCESS_DENIED);
    }
    let sfile = source.file.clone().ok_or(status::OBJECT_NAME_NOT_FOUND)?;
    let (sshare, sinode, sid) = (source.share.clone(), source.inode, source.file_id.volatile);
    // Failures after this point still carry a SRV_COPYCHUNK_RESPONSE saying how far it got.
    let fail = |st: u32, chunks: u32, bytes: u64| {
        let out = copychunk_response(chunks, 0, u32::try_from(bytes).unwrap_or(u32::MAX));
        Ok(ioctl_reply(st, req.ctl_code, req, ctx, &out))
    };
    for c in &cc.chunks {
        if let Some(s) = &sshare {
            if let Err(e) =
                s.locks()
                    .check_io(sinode, sid, c.source_offset, u64::from(c.length), false)
            {
                return fail(e.nt_status(), 0, 0);
            }
        }
        if let Some(s) = &tshare {
            if let Err(e) =
                s.locks()
                    .check_io(tinode, tid, c.target_offset, u64::from(c.length), true)
            {
                return fail(e.nt_status(), 0, 0);
            }
        }
    }
    let chunks = cc.chunks.clone();
    let progress = blocking(move || copy_chunks(sfile.as_ref(), tfile.as_ref(), &chunks)).await?;
    if let Some(st) = progress.error {
        return fail(st, progress.chunks, progress.bytes);
    }
    let out = copychunk_response(
        progress.chunks,
        0,
        u32::try_from(progress.bytes).unwrap_or(u32::MAX),
    );
    Ok(ioctl_reply(status::SUCCESS, req.ctl_code, req, ctx, &out))
}

/// How far a copy got.
struct Progress {
    chunks: u32,
    bytes: u64,
    error: Option<u32>,
}

/// Copies the chunks in order; a chunk reaching past the source's end stops the copy with
/// STATUS_INVALID_VIEW_SIZE (what Windows answers) before anything of it is written.
fn copy_chunks(
    source: &dyn FsFile,
    target: &dyn FsFile,
    chunks: &[crate::proto::ioctl::Chunk],
) -> Result<Progress, crate::vfs::FsError> {
    let mut total = 0u64;
    let mut done = 0u32;
    let mut buf = Vec::new();
    for c in chunks {
        let len = usize::try_from(c.length).unwrap_or(0);
        buf.resize(len, 0);
        let mut got = 0;
        while got < len {
            // `got < len == buf.len()`, so `get_mut` cannot miss.
            let Some(rest) = buf.get_mut(got..) else {
                break;
            };
            let at = c.source_offset.checked_add(got as u64).ok_or_else(|| {
                crate::vfs::FsError::InvalidParameter("copychunk source offset overflows".into())
            })?;
            let n = source.read_at(at, rest)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got < len {
            return Ok(Progress {
                chunks: done,
                bytes: total,
                error: Some(status::INVALID_VIEW_SIZE),
            });
        }
        target.write_at(c.target_offset, &buf, false)?;
        total += u64::from(c.length);
        done += 1;
    }
    Ok(Progress {
        chunks: done,
        bytes: total,
        error: None,
    })
}
