//! Connection, session, tree and open state (MS-SMB2 3.3.1). Plain data owned by one
//! connection task; nothing here does I/O.

use std::collections::HashMap;
use std::sync::Arc;

use crate::auth::NtlmServer;
use crate::crypto::{Cipher, CipherKey, PreauthHash, SigningAlgorithm, SigningKey};
use crate::proto::FileId;
use crate::vfs::{DirCursor, FsFile, ShareFs};

use super::credits::CreditWindow;
use super::SessionObserver;

/// What NEGOTIATE settled for this connection.
#[derive(Debug, Clone)]
pub struct Negotiated {
    /// The dialect (0x0202 … 0x0311).
    pub dialect: u16,
    /// Client capabilities.
    pub client_capabilities: u32,
    /// Client GUID.
    pub client_guid: [u8; 16],
    /// Client SecurityMode.
    pub client_security_mode: u16,
    /// Dialects the client offered (for VALIDATE_NEGOTIATE_INFO).
    pub client_dialects: Vec<u16>,
    /// Server SecurityMode sent.
    pub server_security_mode: u16,
    /// Server capabilities sent.
    pub server_capabilities: u32,
    /// The cipher (3.0: AES-128-CCM when the client has CAP_ENCRYPTION; 3.1.1: negotiated).
    pub cipher: Option<Cipher>,
    /// Signing algorithm for sessions on this connection.
    pub signing: SigningAlgorithm,
    /// Negotiated by the SMB1 upgrade straight to 2.0.2 (no SMB2 NEGOTIATE was seen).
    pub via_smb1: bool,
}

/// Per-connection state.
pub struct ConnState {
    /// Set after NEGOTIATE.
    pub negotiated: Option<Negotiated>,
    /// Connection preauth hash (3.1.1).
    pub preauth: PreauthHash,
    /// The credit window.
    pub credits: CreditWindow,
    /// Sessions by id.
    pub sessions: HashMap<u64, Session>,
    /// Sessions of other connections this connection is (or is becoming) a channel of.
    pub channels: HashMap<u64, super::channel::Channel>,
    /// The peer address (for the session registry).
    pub peer: std::net::SocketAddr,
    /// Our address on this connection (network interface info).
    pub local: std::net::SocketAddr,
    /// Whether an SMB1 negotiate already took place (a second is a protocol error).
    pub smb1_seen: bool,
    /// What the first `AAPL` create context negotiated (Apple clients), if any.
    pub aapl: Option<super::handlers::aapl::Negotiated>,
}

/// Where a session's authentication stands.
pub enum AuthState {
    /// SESSION_SETUP legs in progress.
    InProgress {
        /// The NTLM exchange.
        ntlm: Box<NtlmServer>,
        /// The session's preauth hash (3.1.1).
        preauth: PreauthHash,
    },
    /// Authenticated.
    Valid,
    /// Authenticated, with a re-authentication exchange in progress: the session stays usable
    /// and keeps its keys (MS-SMB2 3.3.5.5.3).
    Reauth {
        /// The NTLM exchange.
        ntlm: Box<NtlmServer>,
        /// Preauth hash of the exchange (not used for keys: they do not change).
        preauth: PreauthHash,
    },
    /// Logged off / expired: any further use gets USER_SESSION_DELETED.
    Expired,
}

/// One session.
pub struct Session {
    /// SessionId.
    pub id: u64,
    /// Authentication state.
    pub auth: AuthState,
    /// User name (empty for anonymous).
    pub user: String,
    /// Anonymous or guest: never signed, only shares with guest_ok.
    pub guest: bool,
    /// Signing key (absent for guest).
    pub signing_key: Option<SigningKey>,
    /// Key that seals server→client messages.
    pub encrypt_key: Option<std::sync::Arc<CipherKey>>,
    /// Key that opens client→server messages.
    pub decrypt_key: Option<Arc<CipherKey>>,
    /// Every request must be signed (unless encrypted).
    pub signing_required: bool,
    /// Every message of the session must be encrypted.
    pub encrypt_data: bool,
    /// Tree connects by id.
    pub trees: HashMap<u32, Tree>,
    /// Next tree id.
    pub next_tree_id: u32,
    /// Opens by volatile id.
    pub opens: HashMap<u64, Open>,
    /// Nonce counter for sealing.
    pub nonce_counter: u64,
    /// The appliance's session registry entry.
    pub observer: Option<std::sync::Arc<dyn SessionObserver>>,
    /// Who the session acts as in security descriptors (set when authentication ends).
    pub token: Option<Arc<crate::security::Token>>,
}

impl Session {
    /// A new session in its first SESSION_SETUP leg.
    pub fn new(id: u64, ntlm: NtlmServer, preauth: PreauthHash) -> Self {
        Self {
            id,
            auth: AuthState::InProgress {
                ntlm: Box::new(ntlm),
                preauth,
            },
            user: String::new(),
            token: None,
            guest: false,
            signing_key: None,
            encrypt_key: None,
            decrypt_key: None,
            signing_required: false,
            encrypt_data: false,
            trees: HashMap::new(),
            next_tree_id: 1,
            opens: HashMap::new(),
            nonce_counter: 0,
            observer: None,
        }
    }

    /// The session's token; before authentication ends, an anonymous one.
    pub fn token(&self) -> Arc<crate::security::Token> {
        match &self.token {
            Some(t) => t.clone(),
            None => Arc::new(crate::server::handlers::security::session_token(
                &crate::security::Sid::anonymous(),
                None,
                true,
            )),
        }
    }

    /// True once authenticated.
    pub fn is_valid(&self) -> bool {
        matches!(self.auth, AuthState::Valid | AuthState::Reauth { .. })
    }

    /// Next unique 16-byte nonce for sealing (a counter; unique per key).
    pub fn next_nonce(&mut self) -> [u8; 16] {
        self.nonce_counter += 1;
        let mut n = [0u8; 16];
        n[..8].copy_from_slice(&self.nonce_counter.to_le_bytes());
        n
    }
}

/// What a tree connect points at.
pub enum TreeKind {
    /// A disk share.
    Disk {
        /// Its storage.
        fs: Arc<dyn ShareFs>,
        /// Writes refused.
        read_only: bool,
        /// Share modes and locks shared with other connections.
        state: Arc<super::shared::ShareState>,
    },
    /// IPC$ (named pipes).
    Ipc,
}

impl Tree {
    /// The cross-connection state of a disk share.
    pub fn share_state(&self) -> Option<Arc<super::shared::ShareState>> {
        match &self.kind {
            TreeKind::Disk { state, .. } => Some(state.clone()),
            TreeKind::Ipc => None,
        }
    }
}

/// One tree connect.
pub struct Tree {
    /// The share is continuously available to this tree (persistent handles).
    pub continuously_available: bool,
    /// Share name.
    pub share: String,
    /// Disk or IPC.
    pub kind: TreeKind,
    /// Messages to this tree must be encrypted.
    pub encrypt: bool,
    /// Told of every request on this tree (per-share and per-client telemetry), when the
    /// appliance asked for it.
    pub observer: Option<Arc<dyn super::OpObserver>>,
}

/// An open file, directory or pipe.
pub struct Open {
    /// The handle as sent to the client.
    pub file_id: FileId,
    /// The tree it belongs to.
    pub tree_id: u32,
    /// The lease it holds part of, if any (its own writes do not break it).
    pub lease_key: Option<[u8; 16]>,
    /// The lease key as the client sent it (`lease_key` is it scoped by the ClientGuid,
    /// see [`crate::oplock::scoped_lease_key`]); break notifications carry this one.
    pub lease_wire_key: Option<[u8; 16]>,
    /// Storage handle (None for pipes).
    pub file: Option<Arc<dyn FsFile>>,
    /// The share's cross-connection state (None for pipes).
    pub share: Option<Arc<super::shared::ShareState>>,
    /// Named-pipe state (IPC$ srvsvc).
    pub pipe: Option<crate::rpc::SrvsvcPipe>,
    /// Granted access mask.
    pub access: u32,
    /// Directory?
    pub is_dir: bool,
    /// Stable file id (for share-mode tables and FileInternalInformation).
    pub inode: u64,
    /// Delete when the last handle closes.
    pub delete_on_close: bool,
    /// Directory enumeration in progress (taken out while a blocking call uses it).
    pub cursor: Option<Box<dyn DirCursor>>,
    /// The enumeration reached its end (NO_MORE_FILES until restarted).
    pub cursor_done: bool,
    /// The pattern of the running enumeration.
    pub pattern: String,
    /// FilePositionInformation, shared with READ/WRITE completions that finish off the
    /// connection's task.
    pub position: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// FileModeInformation / create options kept for WRITE_THROUGH.
    pub mode: u32,
    /// Path relative to the share at open time.
    pub path: String,
    /// Granted as a durable handle: kept when the connection is lost.
    pub durable: Option<super::durable::Durable>,
    /// LockSequence buckets (SMB 3 lock replay detection): the last sequence number each
    /// of the 64 buckets saw succeed, or `LOCK_SEQUENCE_UNSET`.
    pub lock_sequences: [u8; 64],
    /// The CreateGuid this open is remembered under for CREATE replays, if any.
    pub replay: Option<super::replay::ReplayKey>,
    /// The CreateAction its CREATE answered (a replayed CREATE answers it again).
    pub create_action: u32,
    /// The newest ChannelSequence a request on it carried (SMB 3.x).
    pub channel_sequence: u16,
    /// The ParentLeaseKey its CREATE gave (scoped like `lease_key`): changes it makes do
    /// not break that lease on its directory.
    pub parent_lease_key: Option<[u8; 16]>,
    /// Data was written through it: its close breaks the leases on its directory (the
    /// listing's size and times change), as on Windows.
    pub modified: bool,
}

impl Open {
    /// An open of `path` with `access` and nothing else yet (no storage handle, share,
    /// caching, durability or enumeration): callers fill in what they have with struct
    /// update syntax.
    pub fn new(file_id: FileId, tree_id: u32, path: String, access: u32) -> Open {
        Open {
            file_id,
            tree_id,
            lease_key: None,
            lease_wire_key: None,
            file: None,
            share: None,
            pipe: None,
            access,
            is_dir: false,
            inode: 0,
            delete_on_close: false,
            cursor: None,
            cursor_done: false,
            pattern: String::new(),
            position: Default::default(),
            mode: 0,
            path,
            durable: None,
            lock_sequences: [super::handlers::io::LOCK_SEQUENCE_UNSET; 64],
            replay: None,
            create_action: crate::proto::create::FILE_OPENED,
            channel_sequence: 0,
            parent_lease_key: None,
            modified: false,
        }
    }
}
