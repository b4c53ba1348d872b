//! Live sessions (SMB sessions, NVMe controllers) as the API lists them. Protocol
//! services register a session when it authenticates and count bytes with relaxed
//! atomics (no lock on the data path); an admin's DELETE cancels its token, and the
//! service tears the connection down.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

/// Which front end a session belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// An SMB session.
    Smb,
    /// An NVMe/TCP controller (admin + I/O queues).
    NvmeTcp,
}

struct Entry {
    id: u64,
    protocol: Protocol,
    user: String,
    peer: SocketAddr,
    since: i64,
    target: Mutex<String>,
    security: Mutex<Option<Security>>,
    read: AtomicU64,
    written: AtomicU64,
    ops: AtomicU64,
    errors: AtomicU64,
    cancel: CancellationToken,
    channels: Mutex<Vec<Arc<quarry_smb::server::ChannelTraffic>>>,
}

/// One connection an SMB session runs over (several with multichannel).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ChannelInfo {
    /// Client address of the connection.
    pub client: String,
    /// Server address the client connected to.
    pub server: String,
    /// Bytes received on it (requests, write payloads), as framed on the socket.
    pub bytes_received: u64,
    /// Bytes sent on it (responses, read payloads).
    pub bytes_sent: u64,
}

/// What protects a session: the dialect, signing algorithm and cipher it negotiated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct Security {
    /// Protocol version, e.g. `3.1.1`.
    pub dialect: String,
    /// Signing algorithm, e.g. `aes-128-gmac`.
    pub signing: String,
    /// Negotiated cipher, e.g. `aes-256-gcm`; absent when encryption was not negotiated.
    pub cipher: Option<String>,
    /// Whether every message of the session is encrypted (shares with `encrypt` are
    /// encrypted even when this is false).
    pub encrypt_all: bool,
}

/// A session as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionInfo {
    /// Id to disconnect with.
    pub id: u64,
    /// Front end.
    pub protocol: Protocol,
    /// SMB user or NVMe host NQN.
    pub user: String,
    /// Client address.
    pub client: String,
    /// Connected since (RFC 3339).
    pub since: String,
    /// Share(s) or subsystem in use.
    pub target: String,
    /// Bytes read by the client.
    pub bytes_read: u64,
    /// Bytes written by the client.
    pub bytes_written: u64,
    /// Requests on files (SMB) or storage commands (NVMe) so far.
    pub operations: u64,
    /// Of those, answered with an error.
    pub errors: u64,
    /// What protects the session (SMB), once known.
    pub security: Option<Security>,
    /// The connections an SMB session runs over now: the one that set it up, then each
    /// channel bound to it (multichannel). Empty for NVMe.
    pub channels: Vec<ChannelInfo>,
}

/// Registry of live sessions, shared by every service and the API.
#[derive(Clone, Default)]
pub struct SessionRegistry {
    entries: Arc<Mutex<HashMap<u64, Arc<Entry>>>>,
    next_id: Arc<AtomicU64>,
}

/// Keeps a session listed while alive; dropping it unregisters the session.
pub struct SessionGuard {
    entry: Arc<Entry>,
    registry: SessionRegistry,
}

impl SessionGuard {
    /// Counts bytes the client read.
    pub fn add_read(&self, bytes: u64) {
        self.entry.read.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Counts bytes the client wrote.
    pub fn add_written(&self, bytes: u64) {
        self.entry.written.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Records what the session is using (share names, subsystem).
    pub fn set_target(&self, target: String) {
        *self.entry.target.lock().unwrap_or_else(|p| p.into_inner()) = target;
    }
    /// Records what protects the session.
    pub fn set_security(&self, security: Security) {
        *self
            .entry
            .security
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(security);
    }
    /// Adds a connection the session runs over (its byte counters are read at listing).
    pub fn add_channel(&self, traffic: Arc<quarry_smb::server::ChannelTraffic>) {
        let mut c = self
            .entry
            .channels
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        c.retain(|t| t.open.load(Ordering::Relaxed));
        c.push(traffic);
    }
    /// The session's id in the registry.
    pub fn id(&self) -> u64 {
        self.entry.id
    }
    /// A handle the data path counts the session's operations through.
    pub fn counters(&self) -> ClientCounters {
        ClientCounters(self.entry.clone())
    }
}

impl Entry {
    /// The session's open connections with their counters now.
    fn channel_list(&self) -> Vec<ChannelInfo> {
        let c = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        c.iter()
            .filter(|t| t.open.load(Ordering::Relaxed))
            .map(|t| ChannelInfo {
                client: t.peer.to_string(),
                server: t.local.to_string(),
                bytes_received: t.received.load(Ordering::Relaxed),
                bytes_sent: t.sent.load(Ordering::Relaxed),
            })
            .collect()
    }
}

/// A session's operation counters, cloneable into per-tree observers (relaxed atomics).
#[derive(Clone)]
pub struct ClientCounters(Arc<Entry>);

impl ClientCounters {
    /// Counts one operation, and an error when `failed`.
    pub fn op(&self, failed: bool) {
        self.0.ops.fetch_add(1, Ordering::Relaxed);
        if failed {
            self.0.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        let mut map = self
            .registry
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.remove(&self.entry.id);
    }
}

impl SessionRegistry {
    /// Registers a live session.
    pub fn register(
        &self,
        protocol: Protocol,
        user: String,
        peer: SocketAddr,
        target: String,
    ) -> (SessionGuard, CancellationToken) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let cancel = CancellationToken::new();
        let entry = Arc::new(Entry {
            id,
            protocol,
            user,
            peer,
            since: crate::db::now(),
            target: Mutex::new(target),
            security: Mutex::new(None),
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
            ops: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            cancel: cancel.clone(),
            channels: Mutex::new(Vec::new()),
        });
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, entry.clone());
        (
            SessionGuard {
                entry,
                registry: self.clone(),
            },
            cancel,
        )
    }

    /// Every live session, by id.
    pub fn list(&self) -> Vec<SessionInfo> {
        let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<SessionInfo> = map
            .values()
            .map(|e| SessionInfo {
                id: e.id,
                protocol: e.protocol,
                user: e.user.clone(),
                client: e.peer.to_string(),
                since: crate::db::rfc3339(e.since),
                target: e.target.lock().map(|t| t.clone()).unwrap_or_default(),
                bytes_read: e.read.load(Ordering::Relaxed),
                bytes_written: e.written.load(Ordering::Relaxed),
                operations: e.ops.load(Ordering::Relaxed),
                errors: e.errors.load(Ordering::Relaxed),
                security: e.security.lock().map(|s| s.clone()).unwrap_or_default(),
                channels: e.channel_list(),
            })
            .collect();
        out.sort_by_key(|s| s.id);
        out
    }

    /// Asks the owning service to disconnect a session. Returns false if it is unknown.
    pub fn disconnect(&self, id: u64) -> bool {
        let map = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match map.get(&id) {
            Some(e) => {
                e.cancel.cancel();
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn register_count_disconnect_unregister() {
        let reg = SessionRegistry::default();
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let (guard, token) = reg.register(Protocol::Smb, "alice".into(), peer, "data".into());
        guard.add_read(10);
        guard.add_written(5);
        let list = reg.list();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].bytes_read, list[0].bytes_written), (10, 5));
        assert!(reg.disconnect(guard.id()));
        assert!(token.is_cancelled());
        drop(guard);
        assert!(reg.list().is_empty());
        assert!(!reg.disconnect(1));
    }
}
