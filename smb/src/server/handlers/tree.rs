//! TREE_CONNECT and TREE_DISCONNECT (MS-SMB2 3.3.5.7, 3.3.5.8): share lookup in the appliance
//! configuration, access list, read-only and encryption requirements, and IPC$.

use crate::proto::session::{
    encode_empty_response, TreeConnectRequest, TreeConnectResponse, SHAREFLAG_ENCRYPT_DATA,
    SHAREFLAG_NO_CACHING, SHARE_TYPE_DISK, SHARE_TYPE_PIPE,
};
use crate::proto::status;

use super::create::close_open;
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, Reply};
use crate::server::state::{Tree, TreeKind};
use crate::server::MAX_TREES_PER_SESSION;

/// MaximalAccess of a writable share: FILE_ALL_ACCESS.
pub const ACCESS_ALL: u32 = 0x001F_01FF;
/// MaximalAccess of a read-only share: FILE_GENERIC_READ | FILE_GENERIC_EXECUTE.
pub const ACCESS_READ: u32 = 0x0012_00A9;

/// Handles TREE_CONNECT.
pub async fn tree_connect(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: TreeConnectRequest,
) -> HResult {
    let name = req.share_name().to_string();
    let (user, guest, can_encrypt) = {
        let s = super::session(conn, ctx)?;
        if s.trees.len() >= MAX_TREES_PER_SESSION {
            return Err(status::INSUFFICIENT_RESOURCES);
        }
        (s.user.clone(), s.guest, s.encrypt_key.is_some())
    };
    let backend = conn.backend.clone();
    let (tree, resp) = if name.eq_ignore_ascii_case("IPC$") {
        if guest {
            let b = backend.clone();
            let any_guest =
                tokio::task::spawn_blocking(move || b.shares().iter().any(|s| s.guest_ok))
                    .await
                    .unwrap_or(false);
            if !any_guest {
                return Err(status::ACCESS_DENIED);
            }
        }
        (
            Tree {
                share: "IPC$".into(),
                kind: TreeKind::Ipc,
                encrypt: false,
                continuously_available: false,
                observer: None,
            },
            TreeConnectResponse {
                share_type: SHARE_TYPE_PIPE,
                share_flags: SHAREFLAG_NO_CACHING,
                capabilities: 0,
                maximal_access: ACCESS_ALL,
            },
        )
    } else {
        let b = backend.clone();
        let n = name.clone();
        let share = tokio::task::spawn_blocking(move || b.share(&n))
            .await
            .map_err(|_| status::INTERNAL_ERROR)?
            .ok_or(status::BAD_NETWORK_NAME)?;
        if !share.allows(&user, guest) {
            tracing::info!(
                user,
                share = share.name,
                "tree connect refused by the access list"
            );
            return Err(status::ACCESS_DENIED);
        }
        let session_encrypts = super::session(conn, ctx)?.encrypt_data;
        if share.encrypt && !can_encrypt {
            return Err(status::ACCESS_DENIED);
        }
        let b = backend.clone();
        let n = share.name.clone();
        let fs = super::blocking(move || b.share_fs(&n)).await?;
        let mut flags = SHAREFLAG_NO_CACHING;
        // Persistent handles are an SMB 3 feature.
        let ca = share.continuously_available
            && conn
                .state
                .negotiated
                .as_ref()
                .is_some_and(|n| n.dialect >= crate::proto::negotiate::DIALECT_300);
        if share.encrypt || session_encrypts {
            flags |= SHAREFLAG_ENCRYPT_DATA;
        }
        (
            Tree {
                share: share.name.clone(),
                kind: TreeKind::Disk {
                    fs,
                    read_only: share.read_only,
                    state: conn.shared.share(&share.name),
                },
                encrypt: share.encrypt,
                continuously_available: ca,
                observer: super::session(conn, ctx)?
                    .observer
                    .as_ref()
                    .and_then(|o| o.tree_observer(&share.name)),
            },
            TreeConnectResponse {
                share_type: SHARE_TYPE_DISK,
                share_flags: flags,
                capabilities: if ca {
                    crate::proto::session::SHARE_CAP_CONTINUOUS_AVAILABILITY
                } else {
                    0
                },
                maximal_access: if share.read_only {
                    ACCESS_READ
                } else {
                    ACCESS_ALL
                },
            },
        )
    };
    let s = super::session(conn, ctx)?;
    let tid = s.next_tree_id;
    s.next_tree_id = s.next_tree_id.wrapping_add(1).max(1);
    s.trees.insert(tid, tree);
    if let Some(o) = &s.observer {
        let mut names: Vec<&str> = s
            .trees
            .values()
            .map(|t| t.share.as_str())
            .filter(|n| *n != "IPC$")
            .collect();
        names.sort_unstable();
        names.dedup();
        o.set_target(names.join(","));
    }
    let mut body = Vec::with_capacity(16);
    resp.encode(&mut body);
    Ok(Reply {
        tree_id: Some(tid),
        ..Reply::ok(body)
    })
}

/// Handles TREE_DISCONNECT: closes the tree's opens, then forgets the tree.
pub async fn tree_disconnect(conn: &mut Connection, ctx: &mut Ctx<'_>) -> HResult {
    let tid = ctx.tree_id;
    let opens = {
        let s = super::session(conn, ctx)?;
        let Some(tree) = s.trees.remove(&tid) else {
            return Err(status::NETWORK_NAME_DELETED);
        };
        let ids: Vec<u64> = s
            .opens
            .iter()
            .filter(|(_, o)| o.tree_id == tid)
            .map(|(k, _)| *k)
            .collect();
        let opens = ids
            .into_iter()
            .filter_map(|k| s.opens.remove(&k))
            .collect::<Vec<_>>();
        let _ = tree;
        opens
    };
    for o in opens {
        let _ = close_open(o).await;
    }
    let mut body = Vec::new();
    encode_empty_response(&mut body);
    Ok(Reply::ok(body))
}
