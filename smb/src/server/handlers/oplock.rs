//! OPLOCK_BREAK (MS-SMB2 3.3.5.22): a client acknowledging an oplock or lease break the
//! server sent, lowering what it caches; answered with the state now held.

use crate::proto::oplock::{
    encode_lease_break_response, encode_oplock_break, BreakAck, OPLOCK_LEVEL_LEASE,
};
use crate::proto::status;
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};

/// Handles an oplock or lease break acknowledgment.
pub fn acknowledge(conn: &mut Connection, ctx: &mut Ctx<'_>, ack: BreakAck) -> HResult {
    let mut body = Vec::with_capacity(36);
    match ack {
        BreakAck::Oplock { level, file_id } => {
            if level == OPLOCK_LEVEL_LEASE {
                return Err(status::INVALID_PARAMETER);
            }
            let open = super::open(conn, ctx, file_id)?;
            let share = open.share.clone().ok_or(status::INVALID_OPLOCK_PROTOCOL)?;
            let held = share
                .oplocks()
                .ack_oplock(open.inode, open.file_id.volatile, level)?;
            encode_oplock_break(&mut body, held, open.file_id);
        }
        BreakAck::Lease { key, state } => {
            let share = super::tree(conn, ctx)?
                .share_state()
                .ok_or(status::OBJECT_NAME_NOT_FOUND)?;
            let scoped = conn.lease_scope(&key);
            let (held, next) =
                share
                    .oplocks()
                    .ack_lease(&scoped, state, std::time::Instant::now())?;
            encode_lease_break_response(&mut body, &key, held);
            crate::server::shared::deliver(next.into_iter().collect());
        }
    }
    Ok(Reply::ok(body))
}
