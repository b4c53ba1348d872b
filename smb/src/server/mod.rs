//! SMB server state machine and tokio transport: connections, sessions, trees, opens, credits,
//! dispatch.
//!
//! Map:
//! - this file: [`ServerConfig`] (every limit as a named constant), the [`Backend`] trait the
//!   appliance implements (users, shares, live-session registry), and [`serve`], the accept loop.
//! - [`credits`]: the MS-SMB2 3.3.1.1 sequence window (grant, charge, abuse detection). Pure.
//! - [`state`]: connection / session / tree / open tables.
//! - [`conn`]: one connection: the request loop, SMB1 upgrade, decryption, compound
//!   splitting, signature checks, and the sign/encrypt/frame of every response.
//! - [`frames`]: a connection's receiving side: direct-TCP frames read by the request loop
//!   itself, cancel-safe inside its `select!`.
//! - [`outbox`]: a connection's sending side: the writer task's queue, and the request
//!   loop's direct write when nothing is queued.
//! - [`channel`]: multichannel: the session directory, binding checks, and the forwarding
//!   of a bound channel's requests to the connection that owns the session.
//! - [`dispatch`]: routes a decoded request to its handler module in [`handlers`] (one per
//!   command family).
//!
//! # Architecture invariants
//! - Storage is reached only through [`crate::vfs`], always from the blocking pool
//!   (`spawn_blocking`), never on the reactor.
//! - Bad network input yields a protocol status or a clean disconnect, never a panic.

pub mod bufpool;
pub mod channel;
pub mod conn;
pub mod credits;
pub mod dispatch;
pub mod durable;
pub mod frames;
pub mod handlers;
pub mod nic;
pub mod outbox;
pub mod pending;
pub mod previous;
pub mod replay;
pub mod shared;
pub mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::vfs::{FsError, ShareFs};

/// Largest READ/WRITE/transact size the server offers in NEGOTIATE: 8 MiB.
pub const MAX_IO_SIZE: u32 = 8 * 1024 * 1024;
/// Credits a connection may hold at once (the sequence window size).
pub const MAX_CREDITS: u64 = 8192;
/// Bytes covered by one credit (MS-SMB2 3.3.5.2.5).
pub const CREDIT_UNIT: u64 = 65536;
/// Sessions one connection may hold.
pub const MAX_SESSIONS_PER_CONNECTION: usize = 64;
/// Tree connects one session may hold.
pub const MAX_TREES_PER_SESSION: usize = 1024;
/// Opens one session may hold.
pub const MAX_OPENS_PER_SESSION: usize = 16384;
/// Concurrent connections the server accepts; more are closed at once.
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a connection may sit before finishing NEGOTIATE + SESSION_SETUP.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Idle time after which a connection without sessions is dropped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A share as the server needs it at TREE_CONNECT.
#[derive(Clone)]
pub struct ShareConfig {
    /// Share name as configured.
    pub name: String,
    /// Comment shown by `smbclient -L`.
    pub comment: String,
    /// Writes are refused with STATUS_MEDIA_WRITE_PROTECTED... checked at CREATE time.
    pub read_only: bool,
    /// Every message to this share must be encrypted.
    pub encrypt: bool,
    /// Anonymous/guest sessions may connect.
    pub guest_ok: bool,
    /// Users allowed (case-insensitive); empty means every SMB user.
    pub users: Vec<String>,
    /// Continuously available: SMB 3 clients may ask for persistent handles, which
    /// outlive a restart of the server (see [`Backend::persist_open`]).
    pub continuously_available: bool,
}

impl ShareConfig {
    /// Whether `user` may connect to this share.
    pub fn allows(&self, user: &str, guest: bool) -> bool {
        if guest {
            return self.guest_ok;
        }
        self.users.is_empty() || self.users.iter().any(|u| u.eq_ignore_ascii_case(user))
    }
}

/// Live-session hooks (the appliance's session registry): byte counters, the share list, and
/// an admin-triggered disconnect.
pub trait SessionObserver: Send + Sync {
    /// Counts bytes the client read.
    fn add_read(&self, bytes: u64);
    /// Counts bytes the client wrote.
    fn add_written(&self, bytes: u64);
    /// Records the shares the session uses.
    fn set_target(&self, target: String);
    /// Cancelled when an admin disconnects the session.
    fn cancelled(&self) -> CancellationToken;
    /// Told once, when the session is set up, what protects it (for listings: admins
    /// check that clients really sign and encrypt). The default ignores it.
    fn set_security(&self, _security: SessionSecurity) {}
    /// Asked at each tree connect to a disk share for an observer of that tree's requests
    /// (per-share and per-client counters, latency). The default observes nothing.
    fn tree_observer(&self, _share: &str) -> Option<Arc<dyn OpObserver>> {
        None
    }
    /// Told of each connection the session runs over: the one that set it up, then each
    /// channel bound to it (multichannel), with that connection's live byte counters.
    /// The default ignores them.
    fn channel_added(&self, _traffic: Arc<ChannelTraffic>) {}
}

/// One connection's addresses and byte counters (frames as read and written on the socket),
/// shown per channel of a multichannel session.
#[derive(Debug)]
pub struct ChannelTraffic {
    /// The client's address.
    pub peer: SocketAddr,
    /// The server address the client connected to.
    pub local: SocketAddr,
    /// Bytes received from the client.
    pub received: std::sync::atomic::AtomicU64,
    /// Bytes sent to the client.
    pub sent: std::sync::atomic::AtomicU64,
    /// Cleared when the connection ends.
    pub open: std::sync::atomic::AtomicBool,
}

impl ChannelTraffic {
    /// Counters of a new connection.
    pub fn new(peer: SocketAddr, local: SocketAddr) -> Self {
        Self {
            peer,
            local,
            received: Default::default(),
            sent: Default::default(),
            open: std::sync::atomic::AtomicBool::new(true),
        }
    }
}

/// The request families [`OpObserver`] distinguishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// CREATE.
    Create,
    /// CLOSE.
    Close,
    /// READ.
    Read,
    /// WRITE.
    Write,
    /// FLUSH.
    Flush,
    /// LOCK.
    Lock,
    /// IOCTL / FSCTL.
    Ioctl,
    /// QUERY_DIRECTORY.
    QueryDirectory,
    /// QUERY_INFO.
    QueryInfo,
    /// SET_INFO.
    SetInfo,
    /// CHANGE_NOTIFY.
    ChangeNotify,
}

impl OpKind {
    /// Every kind, in a fixed order (for tables indexed by kind).
    pub const ALL: [OpKind; 11] = [
        OpKind::Create,
        OpKind::Close,
        OpKind::Read,
        OpKind::Write,
        OpKind::Flush,
        OpKind::Lock,
        OpKind::Ioctl,
        OpKind::QueryDirectory,
        OpKind::QueryInfo,
        OpKind::SetInfo,
        OpKind::ChangeNotify,
    ];

    /// The kind's position in [`OpKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// A lowercase name for metric labels (`query_directory`).
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Close => "close",
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Flush => "flush",
            OpKind::Lock => "lock",
            OpKind::Ioctl => "ioctl",
            OpKind::QueryDirectory => "query_directory",
            OpKind::QueryInfo => "query_info",
            OpKind::SetInfo => "set_info",
            OpKind::ChangeNotify => "change_notify",
        }
    }
}

/// Told when a request on a tree finished. Why: per-share and per-client operation,
/// byte and error counters and latency histograms, without the protocol crate knowing
/// about metrics. Called on the connection's task (or a READ/WRITE's deferred task):
/// implementations must be cheap and never block (atomics only).
pub trait OpObserver: Send + Sync {
    /// `op` finished with `status` after `elapsed` (from dispatch to the response being
    /// ready); `bytes` is the file data a READ or WRITE moved (0 otherwise).
    fn completed(&self, op: OpKind, bytes: u64, elapsed: Duration, status: u32);
}

/// The protection a session negotiated, as [`SessionObserver::set_security`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionSecurity {
    /// The dialect (0x0202 … 0x0311).
    pub dialect: u16,
    /// The signing algorithm of the session.
    pub signing: crate::crypto::SigningAlgorithm,
    /// The connection's cipher, when encryption was negotiated.
    pub cipher: Option<crate::crypto::Cipher>,
    /// Whether every message of the session is encrypted (EncryptData for the session);
    /// shares with `encrypt` encrypt their trees even when this is false.
    pub encrypt_all: bool,
}

/// What the server needs from the appliance. Methods may block briefly (a database lookup);
/// the server calls them from the blocking pool.
pub trait Backend: Send + Sync + 'static {
    /// The NT hash of `user` (case-insensitive), or `None` when unknown.
    fn nt_hash(&self, user: &str) -> Option<[u8; 16]>;
    /// The relative id of `user` under [`ServerConfig::machine_sid`]: stable for the
    /// user's lifetime and never shared by two users, since it names the user as owner
    /// and trustee in stored security descriptors.
    fn user_rid(&self, user: &str) -> Option<u32>;
    /// The share `name` (case-insensitive), or `None`.
    fn share(&self, name: &str) -> Option<ShareConfig>;
    /// Every share, for srvsvc NetShareEnumAll.
    fn shares(&self) -> Vec<ShareConfig>;
    /// Opens the storage of share `name` for one tree connect.
    fn share_fs(&self, name: &str) -> Result<Arc<dyn ShareFs>, FsError>;
    /// Registers an authenticated session.
    fn session_started(&self, user: &str, peer: SocketAddr) -> Box<dyn SessionObserver>;
    /// Told when a session setup fails with a logon failure (unknown user or wrong
    /// password); `user` is the name the client tried, when it got that far. Must not
    /// block. The default does nothing.
    fn auth_failed(&self, _user: Option<&str>, _peer: SocketAddr) {}
    /// When share `name`'s snapshots were taken (whole seconds since the Unix epoch,
    /// newest first): its previous versions. The default has none.
    fn share_snapshots(&self, _name: &str) -> Vec<i64> {
        Vec::new()
    }
    /// Opens, read-only, share `name` as its snapshot taken at `at` (a time
    /// [`Backend::share_snapshots`] listed) showed it. The default has none.
    fn snapshot_fs(&self, name: &str, _at: i64) -> Result<Arc<dyn ShareFs>, FsError> {
        Err(FsError::NotFound(name.to_string()))
    }
    /// Records a persistent handle so that a restarted server can give it back; called
    /// from the blocking pool when one is granted. The default keeps nothing (handles
    /// then only survive lost connections).
    fn persist_open(&self, _open: &durable::PersistedOpen) {}
    /// Replaces the byte-range locks recorded with persistent handle `persistent_id`;
    /// called from the blocking pool after each change, before the client hears of it.
    fn persist_open_locks(&self, _persistent_id: u64, _locks: &[durable::PersistedLock]) {}
    /// Forgets the persistent handle `persistent_id` (closed, expired or replaced).
    fn forget_persisted_open(&self, _persistent_id: u64) {}
    /// The persistent handles recorded before a restart.
    fn persisted_opens(&self) -> Vec<durable::PersistedOpen> {
        Vec::new()
    }
    /// Starts watching share `name` for changes made outside the server (CHANGE_NOTIFY
    /// reports them), delivering each to `sink`; the server then says which directories
    /// to watch. `None` when the backend cannot (it should log why, once). The default
    /// cannot.
    fn watch_outside_changes(
        &self,
        _name: &str,
        _sink: crate::notify::OutsideChangeSink,
    ) -> Option<Box<dyn crate::notify::OutsideWatcher>> {
        None
    }
}

/// Server-wide settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Require signing on every non-anonymous session (MS-SMB2 RequireMessageSigning).
    pub require_signing: bool,
    /// Encrypt every session that can (global EncryptData).
    pub encrypt_all: bool,
    /// ServerGuid.
    pub server_guid: [u8; 16],
    /// NetBIOS computer name announced in NTLM.
    pub computer_name: String,
    /// Workgroup/domain announced in NTLM.
    pub domain: String,
    /// Ciphers the server accepts, in its order of preference (3.1.1 picks the first the
    /// client offers; 3.0/3.0.2 encrypt only when AES-128-CCM is here). Empty: encryption
    /// is never negotiated, so encrypted shares refuse every client.
    pub ciphers: Vec<crate::crypto::Cipher>,
    /// The addresses the server listens on (set by [`serve`]), reported to multichannel
    /// clients by FSCTL_QUERY_NETWORK_INTERFACE_INFO; a wildcard address stands for the
    /// address each client connected to.
    pub interfaces: Vec<SocketAddr>,
    /// The machine SID (S-1-5-21-a-b-c) users' SIDs are formed under. It must persist
    /// across restarts: stored descriptors name owners by it.
    pub machine_sid: crate::security::Sid,
}

impl ServerConfig {
    /// Defaults: signing required, encryption per share, a random server GUID.
    pub fn new() -> Self {
        let mut guid = [0u8; 16];
        random_bytes(&mut guid);
        Self {
            require_signing: true,
            encrypt_all: false,
            server_guid: guid,
            computer_name: "QUARRY".into(),
            domain: "WORKGROUP".into(),
            ciphers: crate::crypto::Cipher::ALL.to_vec(),
            interfaces: Vec::new(),
            machine_sid: random_machine_sid(),
        }
    }
}

/// A fresh machine SID: S-1-5-21 and three random sub-authorities.
pub fn random_machine_sid() -> crate::security::Sid {
    let mut b = [[0u8; 4]; 3];
    random_bytes(b.as_flattened_mut());
    let [p0, p1, p2] = b.map(u32::from_le_bytes);
    crate::security::Sid::new(5, &[21, p0, p1, p2])
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// Fills `buf` from the OS random source. Failure of the OS RNG is not recoverable for a
/// security server; we fall back to a time-seeded value only to avoid a panic, and log it.
pub(crate) fn random_bytes(buf: &mut [u8]) {
    use ring::rand::SecureRandom;
    if ring::rand::SystemRandom::new().fill(buf).is_err() {
        tracing::error!("system RNG failed; using a time-derived fallback");
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (t >> ((i % 16) * 8)) as u8 ^ (i as u8);
        }
    }
}

/// The current time as a FILETIME.
pub(crate) fn now_filetime() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    crate::vfs::filetime_from_unix(i64::try_from(d.as_secs()).unwrap_or(0), d.subsec_nanos())
}

/// Serves SMB on every listener until `shutdown` is cancelled. All listeners share one
/// server state (share modes, leases, the session directory), so a client may bind
/// channels over any of them (multichannel), and each listener's address is reported in
/// FSCTL_QUERY_NETWORK_INTERFACE_INFO.
pub async fn serve(
    listeners: Vec<TcpListener>,
    backend: Arc<dyn Backend>,
    mut config: ServerConfig,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    config.interfaces = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<std::io::Result<_>>()?;
    let config = Arc::new(config);
    let shared = Arc::new(shared::SharedState::default());
    shared.set_backend(backend.clone());
    durable::restore_persisted(&shared, &backend).await;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let mut accepting = tokio::task::JoinSet::new();
    accepting.spawn(bufpool::trim_until(shared.bufs().clone(), shutdown.clone()));
    for listener in listeners {
        accepting.spawn(accept_loop(
            listener,
            backend.clone(),
            config.clone(),
            shared.clone(),
            slots.clone(),
            shutdown.clone(),
        ));
    }
    while let Some(done) = accepting.join_next().await {
        if let Err(e) = done {
            tracing::error!(error = %e, "SMB accept loop failed");
        }
    }
    Ok(())
}

/// Accepts connections on one listener until `shutdown` is cancelled.
async fn accept_loop(
    listener: TcpListener,
    backend: Arc<dyn Backend>,
    config: Arc<ServerConfig>,
    shared: Arc<shared::SharedState>,
    slots: Arc<tokio::sync::Semaphore>,
    shutdown: CancellationToken,
) {
    loop {
        let (sock, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            a = listener.accept() => match a {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "SMB accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "SMB connection refused: {MAX_CONNECTIONS} connections open");
            continue;
        };
        let _ = sock.set_nodelay(true);
        let backend = backend.clone();
        let config = config.clone();
        let shared = shared.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) =
                conn::run_connection(sock, peer, backend, config, shared, shutdown).await
            {
                tracing::debug!(%peer, error = %e, "SMB connection ended");
            }
        });
    }
}
