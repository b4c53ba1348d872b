//! The Apple `AAPL` create context (see [`crate::proto::aapl`]): the first server query on a
//! connection fixes which Apple extensions it uses; later queries are answered from that
//! state without changing it, so a connection's listings never switch format midway.
//!
//! What Quarry offers, and why:
//! - `UNIX_BASED`: shares are POSIX directories and listings carry real modes.
//! - `SUPPORTS_READ_DIR_ATTR` when the client asks for it: listings carry the Apple fields.
//! - not `SUPPORTS_OSX_COPYFILE`: copychunk copies data only, not streams and metadata.
//! - not `SUPPORTS_NFS_ACE`: security descriptors carry no mode ACEs.
//! - volume `FULL_SYNC`: FLUSH is `fdatasync`, which reaches stable storage as F_FULLFSYNC
//!   asks; not `CASE_SENSITIVE` (names resolve case-insensitively); not
//!   `SUPPORT_RESOLVE_ID` (a file id cannot be turned into a path without a scan).
//!
//! Once negotiated, the connection sees on-disk file ids as 0 ([`client_file_id`]).

use crate::proto::aapl::{caps, query, volume_caps, ServerQuery, ServerQueryReply, CTX_AAPL};
use crate::proto::create::CreateRequest;
use crate::proto::status;
use crate::server::conn::Connection;

/// The model string Finder shows for the server.
pub const MODEL: &str = "Quarry";

/// What a connection negotiated with its first `AAPL` server query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The server capabilities granted ([`caps`]); 0 when the query did not ask for them.
    pub server_caps: u64,
}

impl Negotiated {
    /// Whether FileIdBothDirectoryInformation listings carry the Apple fields.
    pub fn read_dir_attr(&self) -> bool {
        self.server_caps & caps::SUPPORTS_READ_DIR_ATTR != 0
    }
}

/// The answer to the `AAPL` context of a CREATE, if it has one: the connection's
/// (possibly new) negotiated state and the response context's data. A malformed context
/// or another command is INVALID_PARAMETER, before anything is opened.
pub fn server_query(
    conn: &Connection,
    req: &CreateRequest<'_>,
) -> Result<Option<(Negotiated, Vec<u8>)>, u32> {
    let Some(ctx) = req.context(CTX_AAPL) else {
        return Ok(None);
    };
    let q = ServerQuery::decode(ctx.data).map_err(|_| status::INVALID_PARAMETER)?;
    let first = Negotiated {
        server_caps: if q.request_bitmap & query::SERVER_CAPS != 0 {
            caps::UNIX_BASED | (q.client_caps & caps::SUPPORTS_READ_DIR_ATTR)
        } else {
            0
        },
    };
    let negotiated = conn.state.aapl.unwrap_or(first);
    Ok(Some((negotiated, reply(&q, &negotiated).encode())))
}

/// The reply to `q` for a connection in state `negotiated`.
fn reply(q: &ServerQuery, negotiated: &Negotiated) -> ServerQueryReply {
    let asked = |bit| q.request_bitmap & bit != 0;
    ServerQueryReply {
        server_caps: asked(query::SERVER_CAPS).then_some(negotiated.server_caps | caps::UNIX_BASED),
        volume_caps: asked(query::VOLUME_CAPS).then_some(volume_caps::FULL_SYNC),
        model: asked(query::MODEL_INFO).then(|| MODEL.to_string()),
    }
}

/// Records what the CREATE carrying the query negotiated (once it succeeded); a
/// connection keeps its first negotiation.
pub fn commit(conn: &mut Connection, negotiated: Negotiated) {
    conn.state.aapl.get_or_insert(negotiated);
}

/// The on-disk file id to show a connection: 0 once it negotiated AAPL. macOS takes file
/// ids for HFS+ catalog node ids, which are never reused; inode numbers are, and a zero id
/// makes the client stop trusting them (as Samba's `fruit:zero_file_id` does by default).
pub fn client_file_id(negotiated: Option<Negotiated>, id: u64) -> u64 {
    if negotiated.is_some() {
        0
    } else {
        id
    }
}

/// The response context for the answer of [`server_query`].
pub fn response_context(data: Vec<u8>) -> (&'static [u8], Vec<u8>) {
    (CTX_AAPL, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_offers_only_what_quarry_does() {
        let q = ServerQuery {
            request_bitmap: query::SERVER_CAPS | query::VOLUME_CAPS | query::MODEL_INFO,
            client_caps: caps::SUPPORTS_READ_DIR_ATTR | caps::UNIX_BASED | caps::SUPPORTS_NFS_ACE,
        };
        let n = Negotiated {
            server_caps: caps::UNIX_BASED | caps::SUPPORTS_READ_DIR_ATTR,
        };
        assert!(n.read_dir_attr());
        let r = reply(&q, &n);
        assert_eq!(
            r.server_caps,
            Some(caps::UNIX_BASED | caps::SUPPORTS_READ_DIR_ATTR)
        );
        assert_eq!(r.volume_caps, Some(volume_caps::FULL_SYNC));
        assert_eq!(r.model.as_deref(), Some("Quarry"));
        assert_eq!(client_file_id(Some(n), 42), 0);
        assert_eq!(client_file_id(None, 42), 42);
        let only_volume = ServerQuery {
            request_bitmap: query::VOLUME_CAPS,
            client_caps: 0,
        };
        assert_eq!(
            reply(&only_volume, &n),
            ServerQueryReply {
                volume_caps: Some(volume_caps::FULL_SYNC),
                ..Default::default()
            }
        );
    }
}
