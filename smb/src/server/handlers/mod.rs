//! One handler module per command family. Each takes the connection, the request context and
//! the decoded request, and returns a [`super::dispatch::HResult`].

pub mod aapl;
pub mod copychunk;
pub mod create;
pub mod dir;
pub mod info;
pub mod io;
pub mod ioctl;
pub mod negotiate;
pub mod notify;
pub mod oplock;
pub mod pipe;
pub mod security;
pub mod session;
pub mod tree;

use std::sync::Arc;

use crate::proto::{status, FileId};
use crate::vfs::FsError;

use super::conn::Connection;
use super::dispatch::Ctx;
use super::state::{Open, Session, Tree};

/// Runs a blocking storage call on the blocking pool and maps its error to an NTSTATUS.
pub async fn blocking<T, F>(f: F) -> Result<T, u32>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, FsError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            // An I/O error without a specific status is the server's fault (the
            // client only sees UNSUCCESSFUL or IO_DEVICE_ERROR): worth a warning.
            if matches!(e, FsError::Io { .. }) {
                tracing::warn!(error = %e, "storage call failed");
            } else {
                tracing::debug!(error = %e, "storage call failed");
            }
            Err(e.nt_status())
        }
        Err(e) => {
            tracing::error!(error = %e, "storage task failed");
            Err(status::INTERNAL_ERROR)
        }
    }
}

/// Runs a storage call that can be answered from the kernel's caches on the request's own
/// task first, `f(true)` (the call asks storage for cached answers only:
/// [`crate::vfs::ShareFs::open_cached`], [`crate::vfs::FsFile::read_cached`]), and on the
/// blocking pool, `f(false)`, when that attempt fails for any reason. Cached calls change
/// nothing unless they succeed, so the retry gives the authoritative answer. A hand-off to
/// the pool costs two thread wake-ups, most of an open's or a cached small read's cost
/// (tests/bench/RESULTS.md, step 10); a cached call never waits for the device, so it cannot
/// stall the connections sharing this worker.
pub async fn cached_first<T, F>(try_cached: bool, f: F) -> Result<T, u32>
where
    T: Send + 'static,
    F: Fn(bool) -> Result<T, FsError> + Send + 'static,
{
    if try_cached {
        match f(true) {
            Ok(v) => return Ok(v),
            Err(e) => tracing::trace!(error = %e, "cached storage call fell back to the pool"),
        }
    }
    blocking(move || f(false)).await
}

/// The session of a request (already validated by the connection).
pub fn session<'a>(conn: &'a mut Connection, ctx: &Ctx<'_>) -> Result<&'a mut Session, u32> {
    conn.state
        .sessions
        .get_mut(&ctx.session_id)
        .ok_or(status::USER_SESSION_DELETED)
}

/// The tree of a request.
pub fn tree<'a>(conn: &'a mut Connection, ctx: &Ctx<'_>) -> Result<&'a mut Tree, u32> {
    session(conn, ctx)?
        .trees
        .get_mut(&ctx.tree_id)
        .ok_or(status::NETWORK_NAME_DELETED)
}

/// The open named by `id` (after related-handle substitution), checked against the tree.
pub fn open<'a>(conn: &'a mut Connection, ctx: &Ctx<'_>, id: FileId) -> Result<&'a mut Open, u32> {
    let id = ctx.resolve(id);
    let tree_id = ctx.tree_id;
    let dialect = conn.state.negotiated.as_ref().map_or(0, |n| n.dialect);
    let s = session(conn, ctx)?;
    if !s.trees.contains_key(&tree_id) {
        return Err(status::NETWORK_NAME_DELETED);
    }
    let o = match s.opens.get_mut(&id.volatile) {
        Some(o) if o.file_id == id && o.tree_id == tree_id => o,
        _ => return Err(status::FILE_CLOSED),
    };
    if dialect >= crate::proto::negotiate::DIALECT_300 {
        check_channel_sequence(o, ctx.hdr)?;
    }
    if let Some(key) = o.replay.take() {
        // The client uses the handle, so it has the CREATE's answer: no replay of that
        // CREATE can follow, and its CreateGuid is free again (as on Windows and Samba).
        if let Some(share) = &o.share {
            share.replay().forget(key, o.file_id.volatile);
        }
    }
    Ok(o)
}

/// MS-SMB2 3.3.5.2.10: a request naming an open with a newer ChannelSequence (the client
/// moved to a new channel after a failure) makes it the open's; a WRITE, SET_INFO or IOCTL
/// still carrying an older one comes from a channel the client gave up and is refused
/// with FILE_NOT_AVAILABLE, so that a late retransmission cannot overwrite newer data.
/// A stored sequence more than 0x7FFF above the request's is taken as the client's
/// counter having wrapped (as Samba does). Outstanding-request counts are not kept:
/// a replayed request is judged like any other.
fn check_channel_sequence(o: &mut Open, hdr: &crate::proto::Header) -> Result<(), u32> {
    use crate::proto::header::Command;
    // For 3.x requests the first two bytes of the Status field carry it.
    let seq = (hdr.status & 0xFFFF) as u16;
    let modifies = matches!(
        hdr.command(),
        Some(Command::Write) | Some(Command::SetInfo) | Some(Command::Ioctl)
    );
    o.channel_sequence = next_channel_sequence(o.channel_sequence, seq, modifies)?;
    Ok(())
}

/// The open's ChannelSequence after a request carrying `seq`, or FILE_NOT_AVAILABLE for
/// a modifying request from an older channel.
fn next_channel_sequence(stored: u16, seq: u16, modifies: bool) -> Result<u16, u32> {
    let mut diff = i32::from(seq) - i32::from(stored);
    if diff.abs() > i32::from(i16::MAX) {
        diff = -diff;
    }
    if diff > 0 {
        Ok(seq)
    } else if diff < 0 && modifies {
        Err(status::FILE_NOT_AVAILABLE)
    } else {
        Ok(stored)
    }
}

/// The storage handle of an open (pipes have none).
pub fn file_of(o: &Open) -> Result<Arc<dyn crate::vfs::FsFile>, u32> {
    o.file.clone().ok_or(status::INVALID_DEVICE_REQUEST)
}

/// Converts storage metadata to the wire's attribute block.
pub fn attrs_of(i: &crate::vfs::FileInfo) -> crate::proto::FileAttrs {
    crate::proto::FileAttrs {
        creation_time: i.creation_time,
        last_access_time: i.last_access_time,
        last_write_time: i.last_write_time,
        change_time: i.change_time,
        allocation_size: i.allocation_size,
        end_of_file: i.end_of_file,
        attributes: i.attributes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_sequences_move_forward_and_stale_writes_are_refused() {
        assert_eq!(next_channel_sequence(0, 1, true), Ok(1));
        assert_eq!(next_channel_sequence(5, 5, true), Ok(5));
        assert_eq!(
            next_channel_sequence(5, 4, false),
            Ok(5),
            "a stale read passes"
        );
        assert_eq!(
            next_channel_sequence(5, 4, true),
            Err(status::FILE_NOT_AVAILABLE)
        );
        // More than 0x7FFF apart: the client's counter wrapped.
        assert_eq!(next_channel_sequence(0xFFFF, 0, true), Ok(0));
        assert_eq!(
            next_channel_sequence(0, 0x8000, true),
            Err(status::FILE_NOT_AVAILABLE)
        );
        assert_eq!(next_channel_sequence(0, 0x7FFF, true), Ok(0x7FFF));
    }
}
