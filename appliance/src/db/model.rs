//! Rows of the config database as Rust types. These are the appliance's source of truth;
//! the API turns them into its own response types.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// What a web/API user may do. SMB-only users have no role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read-only access to everything a viewer may see.
    Viewer,
    /// Manages shares, volumes, NVMe subsystems and sessions.
    Operator,
    /// Everything, including users and tokens of others.
    Admin,
}

impl Role {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Parses the database spelling.
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "viewer" => Some(Role::Viewer),
            "operator" => Some(Role::Operator),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }
}

/// A user account (SMB and, with a role, web/API).
#[derive(Debug, Clone)]
pub struct User {
    /// Row id.
    pub id: i64,
    /// Login name (unique, case-insensitive).
    pub name: String,
    /// Web/API role; `None` for SMB-only accounts.
    pub role: Option<Role>,
    /// Slow hash for web logins.
    pub password_hash: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// What the SMB server needs to authenticate a user with NTLMv2.
#[derive(Debug, Clone)]
pub struct SmbUser {
    /// Canonical user name as stored.
    pub name: String,
    /// MD4 of the UTF-16LE password.
    pub nt_hash: [u8; 16],
    /// The user's row id: the SMB server names the user by it in security descriptors.
    pub id: i64,
}

/// An SMB share as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Share {
    /// Share name (unique, case-insensitive).
    pub name: String,
    /// Free-text comment shown by `smbclient -L`.
    pub comment: String,
    /// Quota in bytes; `None` means limited only by the pool.
    pub quota_bytes: Option<u64>,
    /// Refuse every write.
    pub read_only: bool,
    /// Require SMB3 encryption for this share.
    pub encrypt: bool,
    /// Allow the guest/anonymous user.
    pub guest_ok: bool,
    /// Continuously available: SMB 3 persistent handles survive a restart.
    pub continuously_available: bool,
    /// Users allowed to connect; empty means every SMB user.
    pub users: Vec<String>,
    /// Pool dataset holding the share's files (relative to the pool).
    pub dataset: String,
    /// Unix seconds.
    pub created_at: i64,
}

/// A block volume in the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// Volume name (unique, case-insensitive).
    pub name: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Stable identity (NVMe NGUID/UUID derive from it).
    pub uuid: uuid::Uuid,
    /// Unix seconds.
    pub created_at: i64,
}

/// An NVMe-oF subsystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subsystem {
    /// NVMe Qualified Name.
    pub nqn: String,
    /// Serial number reported in Identify Controller.
    pub serial: String,
    /// Allow every host NQN.
    pub allow_any_host: bool,
    /// Allowed host NQNs (when `allow_any_host` is false).
    pub hosts: Vec<String>,
    /// Exported namespaces.
    pub namespaces: Vec<Namespace>,
    /// Unix seconds.
    pub created_at: i64,
}

/// A namespace of a subsystem, backed by a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namespace {
    /// Namespace id (1-based).
    pub nsid: u32,
    /// The backing volume's name.
    pub volume: String,
    /// Namespace UUID.
    pub uuid: uuid::Uuid,
}

/// An API token (never the secret itself).
#[derive(Debug, Clone)]
pub struct TokenInfo {
    /// Row id.
    pub id: i64,
    /// Owner.
    pub user: String,
    /// Human label.
    pub name: String,
    /// `api` (long-lived) or `session` (login).
    pub kind: String,
    /// Unix seconds.
    pub created_at: i64,
    /// Unix seconds, if it expires.
    pub expires_at: Option<i64>,
    /// Unix seconds of last use.
    pub last_used_at: Option<i64>,
}

/// The identity behind an authenticated request.
#[derive(Debug, Clone)]
pub struct Principal {
    /// User row id.
    pub user_id: i64,
    /// User name.
    pub user: String,
    /// Role (a user without a role cannot authenticate to the API).
    pub role: Role,
    /// Token row id that authenticated the request.
    pub token_id: i64,
    /// CSRF secret of a session token (cookie logins).
    pub csrf: Option<String>,
}

/// One audit row.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AuditEntry {
    /// Row id, increasing.
    pub id: i64,
    /// RFC 3339 time.
    pub at: String,
    /// Who.
    pub actor: String,
    /// From where (client address).
    pub remote: String,
    /// What (e.g. `share.create`).
    pub action: String,
    /// On what.
    pub target: String,
    /// Details (never secrets).
    pub detail: serde_json::Value,
}

/// Who made a change, for the audit log.
#[derive(Debug, Clone)]
pub struct Actor {
    /// User name (or `system`).
    pub user: String,
    /// Remote address (or `local`).
    pub remote: String,
}

impl Actor {
    /// Changes the appliance makes by itself (first start, migrations).
    pub fn system() -> Actor {
        Actor {
            user: "system".into(),
            remote: "local".into(),
        }
    }
}
