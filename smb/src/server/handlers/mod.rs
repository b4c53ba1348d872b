//! One handler module per command family. Each takes the connection, the request context and
//! the decoded request, and returns a [`super::dispatch::HResult`].

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
    let s = session(conn, ctx)?;
    if !s.trees.contains_key(&tree_id) {
        return Err(status::NETWORK_NAME_DELETED);
    }
    match s.opens.get_mut(&id.volatile) {
        Some(o) if o.file_id == id && o.tree_id == tree_id => Ok(o),
        _ => Err(status::FILE_CLOSED),
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
