//! Authentication: SPNEGO (MS-SPNG, RFC 4178) wrapping NTLMSSP (MS-NLMP) with server-side
//! NTLMv2 verification.
//!
//! Sans-I/O: the server layer feeds each SESSION_SETUP security buffer to
//! [`NtlmServer::step`] and sends back what comes out. Credentials come through the
//! [`NtHashLookup`] trait, so this module never sees a password store; time and the server
//! challenge are passed in, so every exchange is reproducible in tests.
//!
//! Map:
//! - [`der`]: the small, bounded DER reader/writer SPNEGO needs.
//! - [`spnego`]: NegTokenInit/NegTokenInit2/NegTokenResp parsing and building.
//! - [`ntlm`]: NTLMSSP messages, AV pairs and the NTLMv2 / session-key / MIC cryptography.
//! - [`server`]: the per-exchange state machine [`NtlmServer`].

pub mod der;
pub mod ntlm;
pub mod server;
pub mod spnego;

pub use ntlm::crypto::nt_hash_from_password;
pub use server::{negotiate_security_blob, AuthStep, NtlmServer, ServerNames};

/// Where the server looks up a user's NT hash (MD4 of the UTF-16LE password).
///
/// The appliance implements this over its user table. `user` is the name as the client sent it
/// (case preserved; SMB user names are case-insensitive, so implementations should compare
/// case-insensitively); `domain` is the client's domain string, which a stand-alone server may
/// ignore. Returning `None` means "no such user" and yields [`AuthError::LogonFailure`], the
/// same result as a wrong password, so user names cannot be probed.
pub trait NtHashLookup {
    /// The user's NT hash, or `None` if the user does not exist or may not log in.
    fn nt_hash(&self, user: &str, domain: &str) -> Option<[u8; 16]>;
}

/// Why an authentication step failed. [`AuthError::nt_status`] maps each to the NTSTATUS the
/// SESSION_SETUP response carries.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// The token is not well-formed DER/SPNEGO/NTLMSSP.
    #[error("malformed security token: {0}")]
    Malformed(&'static str),
    /// A token exceeded one of the explicit size/count limits.
    #[error("security token exceeds limit: {0}")]
    TooLarge(&'static str),
    /// The client offered no mechanism we implement (only NTLMSSP is supported).
    #[error("no supported security mechanism offered")]
    UnsupportedMech,
    /// A message arrived that does not fit the exchange's current state.
    #[error("unexpected message in state {0}")]
    UnexpectedMessage(&'static str),
    /// Unknown user, wrong password, or a response that does not verify.
    #[error("logon failure")]
    LogonFailure,
    /// The NTLM MIC or SPNEGO mechListMIC did not verify: the exchange was tampered with.
    #[error("message integrity check failed ({0})")]
    IntegrityFailure(&'static str),
    /// The client only offered something we refuse (NTLMv1/LM responses).
    #[error("authentication protocol refused: {0}")]
    Refused(&'static str),
}

/// NTSTATUS values used by [`AuthError::nt_status`].
pub mod status {
    /// STATUS_LOGON_FAILURE.
    pub const LOGON_FAILURE: u32 = 0xC000_006D;
    /// STATUS_INVALID_PARAMETER.
    pub const INVALID_PARAMETER: u32 = 0xC000_000D;
    /// STATUS_MORE_PROCESSING_REQUIRED: what the server sends with [`super::AuthStep::Continue`].
    pub const MORE_PROCESSING_REQUIRED: u32 = 0xC000_0016;
    /// STATUS_ACCESS_DENIED.
    pub const ACCESS_DENIED: u32 = 0xC000_0022;
    /// STATUS_NOT_SUPPORTED.
    pub const NOT_SUPPORTED: u32 = 0xC000_00BB;
}

impl AuthError {
    /// The NTSTATUS the server should answer SESSION_SETUP with for this failure.
    pub fn nt_status(&self) -> u32 {
        match self {
            Self::Malformed(_) | Self::TooLarge(_) | Self::UnexpectedMessage(_) => {
                status::INVALID_PARAMETER
            }
            Self::UnsupportedMech => status::NOT_SUPPORTED,
            Self::LogonFailure | Self::Refused(_) => status::LOGON_FAILURE,
            Self::IntegrityFailure(_) => status::ACCESS_DENIED,
        }
    }
}
