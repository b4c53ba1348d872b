//! CHANGE_NOTIFY (MS-SMB2 3.3.5.19): arms the directory open's watch and answers with what
//! it collected, at once when something is already there, else asynchronously (STATUS_PENDING,
//! then the changes, STATUS_NOTIFY_ENUM_DIR on overflow, STATUS_NOTIFY_CLEANUP when the
//! handle closes, STATUS_CANCELLED on CANCEL).

use crate::notify::{encode_changes, encode_notify_response, Collected};
use crate::proto::io::ChangeNotifyRequest;
use crate::proto::status;
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::pending::Wait;
use crate::server::MAX_IO_SIZE;

/// ChangeNotify flag: watch the whole subtree.
const WATCH_TREE: u16 = 0x0001;

/// FILE_LIST_DIRECTORY (the directory meaning of FILE_READ_DATA).
const FILE_LIST_DIRECTORY: u32 = 0x0000_0001;

/// Handles CHANGE_NOTIFY: registers (or re-arms) the handle's watch and answers at once
/// with changes already collected, or waits for the next ones.
pub fn change_notify(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: ChangeNotifyRequest,
) -> HResult {
    let open = super::open(conn, ctx, req.file_id)?;
    if !open.is_dir {
        // Validated like Windows: a file handle is an invalid parameter.
        return Err(status::INVALID_PARAMETER);
    }
    if req.output_buffer_length > MAX_IO_SIZE {
        return Err(status::INVALID_PARAMETER);
    }
    // Watching a directory lists it: the handle needs FILE_LIST_DIRECTORY.
    if open.access & FILE_LIST_DIRECTORY == 0 {
        return Err(status::ACCESS_DENIED);
    }
    let share = open.share.clone().ok_or(status::INVALID_DEVICE_REQUEST)?;
    let id = open.file_id.volatile;
    let path = open.path.clone();
    let max = req.output_buffer_length;
    let collected = share.with_notify(|h| {
        if h.watch(
            id,
            &path,
            req.flags & WATCH_TREE != 0,
            req.completion_filter,
            max,
        ) {
            Ok(h.take(id, max))
        } else {
            Err(status::INSUFFICIENT_RESOURCES)
        }
    })?;
    match collected {
        Some(Collected::Changes(list)) => {
            Ok(Reply::ok(encode_notify_response(&encode_changes(&list))))
        }
        Some(Collected::Overflow) => Ok(Reply::with_status(
            status::NOTIFY_ENUM_DIR,
            encode_notify_response(&[]),
        )),
        Some(Collected::DeletePending) => Err(status::DELETE_PENDING),
        None => Ok(Reply {
            wait: Some(Wait::Notify {
                share,
                open: id,
                max_output: max,
            }),
            ..Reply::default()
        }),
    }
}
