//! Multichannel (MS-SMB2 3.3.5.5.2, session binding): one session served over several
//! connections.
//!
//! A session lives in the connection that authenticated it (its *owner*): its trees, opens,
//! pending operations and keys stay in that connection's task, so no handler ever takes a
//! lock to reach them. Another connection of the same client binds to the session with a
//! SESSION_SETUP carrying `SMB2_SESSION_FLAG_BINDING`; once bound it becomes a *channel*: it
//! checks credits and signatures (with the channel's own signing key) and decrypts, then
//! hands each request to the owner through the owner's [`Forward`] inbox, and sends the
//! owner's answers, signed with the channel key, on its own socket. READ and WRITE payloads
//! are finished on the channel's task, so a bulk transfer spreads over the channels' sockets.
//!
//! The [`SessionDirectory`] is where a binding connection finds a session by id: the owner
//! publishes what binding needs (dialect, cipher, signing algorithm and key, user) when the
//! session is established and withdraws it when the session ends. A channel whose owner is
//! gone answers USER_SESSION_DELETED: the session ended with its owner's connection.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::auth::NtlmServer;
use crate::crypto::{Cipher, CipherKey, PreauthHash, SigningAlgorithm, SigningKey};
use crate::proto::negotiate::DIALECT_300;
use crate::proto::status;

use super::conn::{ConnError, Processed};
use super::outbox::Outbox;

/// Channels one session may have besides the connection that owns it (Windows allows 32
/// channels in all; smbtorture's multichannel.generic.num_channels expects the 33rd bind
/// to fail with INSUFFICIENT_RESOURCES).
pub const MAX_BOUND_CHANNELS: usize = 31;
/// Requests a session's owner queues from its channels before they wait.
pub const FORWARD_QUEUE: usize = 64;

/// What a connection needs to bind to a session, published by the session's owner.
pub struct SessionEntry {
    /// SessionId.
    pub session_id: u64,
    /// The owner connection's id.
    pub owner_conn: u64,
    /// Where the owner takes requests that arrive on channels.
    pub owner: tokio::sync::mpsc::Sender<Inbound>,
    /// Authenticated user (a binding must authenticate as the same user).
    pub user: String,
    /// The owner's dialect (a channel must have negotiated the same).
    pub dialect: u16,
    /// The owner's cipher (a channel must have negotiated the same).
    pub cipher: Option<Cipher>,
    /// The session's signing key: binding requests are signed with it.
    pub signing_key: SigningKey,
    /// The key that opens requests encrypted for the session (on any channel).
    pub decrypt_key: Option<Arc<CipherKey>>,
    /// Every unencrypted request must be signed.
    pub signing_required: bool,
    /// Channels bound now.
    pub channels: AtomicUsize,
    /// The bound channels' connections, oldest first, by connection id: when the owner's
    /// connection ends, the first that still serves adopts the session
    /// ([`Inbound::Adopt`]) so that it outlives the connection that authenticated it.
    pub channel_inboxes: Mutex<Vec<(u64, tokio::sync::mpsc::Sender<Inbound>)>>,
    /// The appliance's view of the session (told of each channel bound).
    pub observer: Option<Arc<dyn super::SessionObserver>>,
}

impl SessionEntry {
    /// Registers a bound channel's connection as a possible heir of the session.
    pub fn add_channel(&self, conn_id: u64, inbox: tokio::sync::mpsc::Sender<Inbound>) {
        let mut v = self
            .channel_inboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        v.retain(|(id, tx)| *id != conn_id && !tx.is_closed());
        v.push((conn_id, inbox));
    }

    /// Forgets a channel's connection (it ended or unbound).
    pub fn remove_channel(&self, conn_id: u64) {
        let mut v = self
            .channel_inboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        v.retain(|(id, _)| *id != conn_id);
    }

    /// The channels' connections still serving, oldest first.
    pub fn live_channels(&self) -> Vec<(u64, tokio::sync::mpsc::Sender<Inbound>)> {
        let v = self
            .channel_inboxes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        v.iter()
            .filter(|(_, tx)| !tx.is_closed())
            .cloned()
            .collect()
    }

    /// The signing algorithm of the session's own key.
    pub fn signing(&self) -> SigningAlgorithm {
        self.signing_key.algorithm()
    }
}

/// Every established session of the server by id, and the server-wide session id counter
/// (ids are unique across connections so that a bind names exactly one session).
#[derive(Default)]
pub struct SessionDirectory {
    entries: Mutex<HashMap<u64, Arc<SessionEntry>>>,
    last_id: AtomicU64,
    last_conn: AtomicU64,
}

impl SessionDirectory {
    /// A SessionId no other session of this server had.
    pub fn next_session_id(&self) -> u64 {
        self.last_id.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// An id for a new connection (tells channels apart in pending-operation tables).
    pub fn next_conn_id(&self) -> u64 {
        self.last_conn
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_add(1)
    }

    /// Publishes an established session.
    pub fn publish(&self, entry: SessionEntry) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(entry.session_id, Arc::new(entry));
    }

    /// Withdraws a session, if `owner_conn` still owns it.
    pub fn withdraw(&self, session_id: u64, owner_conn: u64) {
        let mut m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if m.get(&session_id)
            .is_some_and(|e| e.owner_conn == owner_conn)
        {
            m.remove(&session_id);
        }
    }

    /// The published session `session_id`.
    pub fn find(&self, session_id: u64) -> Option<Arc<SessionEntry>> {
        let m = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&session_id).cloned()
    }
}

/// A channel as the owner sees it: where its answers go and how they are signed.
pub struct Via {
    /// The channel connection's id.
    pub conn_id: u64,
    /// The channel's signing key.
    pub signing_key: SigningKey,
    /// The channel's socket writer.
    pub out: Outbox,
    /// Cancelled when the channel's connection stops serving.
    pub gone: tokio_util::sync::CancellationToken,
}

/// How a channel found one request element's signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// Signed and verified with the channel key.
    Valid,
    /// Signed, but not with the channel key.
    Bad,
    /// Not signed.
    Absent,
}

/// What a channel checked of one element before forwarding it.
#[derive(Debug, Clone, Copy)]
pub struct ElementCheck {
    /// Credits to grant in its response (the channel's own credit window).
    pub grant: u16,
    /// Its signature.
    pub signature: Signature,
}

/// A request frame a channel hands to the session's owner.
pub struct Forward {
    /// The plaintext message (transform header removed).
    pub frame: Arc<super::bufpool::Received>,
    /// The frame arrived encrypted for this session.
    pub encrypted_by: Option<u64>,
    /// Per element, in order.
    pub checks: Vec<ElementCheck>,
    /// The channel.
    pub via: Arc<Via>,
    /// Where the owner puts its answer.
    pub reply: tokio::sync::oneshot::Sender<Result<Processed, ConnError>>,
}

/// What other connections ask of a session's owner.
pub enum Inbound {
    /// Serve a request that arrived on a channel.
    Forward(Forward),
    /// Take over a session whose owner's connection ended, as its new owner: this
    /// connection is one of its channels.
    Adopt(Box<Adoption>),
    /// End the session: its user reconnected and named it as PreviousSessionId
    /// (MS-SMB2 3.3.5.5.3). Its opens are closed before `done` is answered.
    CloseSession {
        /// The session.
        session_id: u64,
        /// Who asks (it must be the session's user).
        user: String,
        /// Answered once the session is gone.
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// A session handed to a surviving channel, with the operations that still wait on it.
pub struct Adoption {
    /// The session, its trees and opens.
    pub session: super::state::Session,
    /// The directory entry it was published under.
    pub entry: Arc<SessionEntry>,
    /// Its asynchronous operations; those whose connection is gone finish without an
    /// answer ([`super::pending::PendingOp::silent`]).
    pub pending: Vec<super::pending::PendingOp>,
}

/// A session as a connection that is (or is becoming) one of its channels sees it.
pub enum Channel {
    /// Binding SESSION_SETUP legs in progress.
    Binding {
        /// The session.
        entry: Arc<SessionEntry>,
        /// The NTLM exchange.
        ntlm: Box<NtlmServer>,
        /// Preauth hash of the binding exchange (3.1.1), seeded with this connection's.
        preauth: PreauthHash,
    },
    /// Bound: requests for the session are forwarded to its owner.
    Bound {
        /// The session.
        entry: Arc<SessionEntry>,
        /// This channel, as handed to the owner.
        via: Arc<Via>,
        /// Its place among the session's channels.
        slot: ChannelSlot,
    },
}

impl Channel {
    /// The session.
    pub fn entry(&self) -> &Arc<SessionEntry> {
        match self {
            Channel::Binding { entry, .. } | Channel::Bound { entry, .. } => entry,
        }
    }
}

/// One of a session's channel places, held while the channel is bound (counted against
/// [`MAX_BOUND_CHANNELS`], given back when dropped).
pub struct ChannelSlot(Arc<SessionEntry>);

impl ChannelSlot {
    /// Takes a place among `entry`'s channels.
    pub fn take(entry: &Arc<SessionEntry>) -> Self {
        entry.channels.fetch_add(1, Ordering::Relaxed);
        Self(entry.clone())
    }
}

impl Drop for ChannelSlot {
    fn drop(&mut self) {
        self.0.channels.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What this connection negotiated, as binding checks need it.
#[derive(Debug, Clone, Copy)]
pub struct ChannelTerms {
    /// Dialect.
    pub dialect: u16,
    /// Signing algorithm.
    pub signing: SigningAlgorithm,
    /// Cipher.
    pub cipher: Option<Cipher>,
}

/// Whether a connection with `terms` may start binding to `entry`, checked in the order
/// Windows and Samba check (smbtorture's session.bind_negative_* pin each status):
/// signing-algorithm mismatches involving AES-GMAC first, then the dialect family, then the
/// request's signature with the session key, then the exact dialect and cipher, then the
/// channel limit.
pub fn may_bind(entry: &SessionEntry, terms: ChannelTerms, signed_ok: bool) -> Result<(), u32> {
    let gmac = SigningAlgorithm::AesGmac;
    if entry.signing() == gmac && terms.signing != gmac {
        return Err(status::REQUEST_OUT_OF_SEQUENCE);
    }
    if terms.signing == gmac && entry.signing() != gmac {
        return Err(status::NOT_SUPPORTED);
    }
    if terms.dialect < DIALECT_300 {
        return Err(status::REQUEST_NOT_ACCEPTED);
    }
    if !signed_ok {
        return Err(status::INVALID_PARAMETER);
    }
    if entry.dialect != terms.dialect || entry.cipher != terms.cipher {
        return Err(status::INVALID_PARAMETER);
    }
    if entry.channels.load(Ordering::Relaxed) >= MAX_BOUND_CHANNELS {
        return Err(status::INSUFFICIENT_RESOURCES);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::negotiate::{DIALECT_210, DIALECT_302, DIALECT_311};

    fn entry(dialect: u16, alg: SigningAlgorithm, cipher: Option<Cipher>) -> SessionEntry {
        let (tx, _rx) = tokio::sync::mpsc::channel(1);
        SessionEntry {
            session_id: 7,
            owner_conn: 1,
            owner: tx,
            user: "alice".into(),
            dialect,
            cipher,
            signing_key: SigningKey::new(alg, &[1; 16]),
            decrypt_key: None,
            signing_required: true,
            channels: AtomicUsize::new(0),
            channel_inboxes: Mutex::new(Vec::new()),
            observer: None,
        }
    }

    fn terms(dialect: u16, signing: SigningAlgorithm, cipher: Option<Cipher>) -> ChannelTerms {
        ChannelTerms {
            dialect,
            signing,
            cipher,
        }
    }

    #[test]
    fn statuses_follow_the_documented_order() {
        use SigningAlgorithm::*;
        let gcm = Some(Cipher::Aes128Gcm);
        let e = entry(DIALECT_311, AesGmac, gcm);
        // GMAC session, CMAC channel: out of sequence, even before the dialect check.
        assert_eq!(
            may_bind(&e, terms(DIALECT_210, HmacSha256, None), false),
            Err(status::REQUEST_OUT_OF_SEQUENCE)
        );
        let e = entry(DIALECT_302, AesCmac, None);
        assert_eq!(
            may_bind(&e, terms(DIALECT_311, AesGmac, gcm), true),
            Err(status::NOT_SUPPORTED)
        );
        assert_eq!(
            may_bind(&e, terms(DIALECT_210, HmacSha256, None), true),
            Err(status::REQUEST_NOT_ACCEPTED)
        );
        assert_eq!(
            may_bind(&e, terms(DIALECT_302, AesCmac, None), false),
            Err(status::INVALID_PARAMETER)
        );
        assert_eq!(
            may_bind(&e, terms(DIALECT_311, AesCmac, None), true),
            Err(status::INVALID_PARAMETER)
        );
        assert_eq!(
            may_bind(&e, terms(DIALECT_302, AesCmac, None), true),
            Ok(())
        );
        // Different signing algorithms without GMAC bind (each channel signs its own way).
        let e = entry(DIALECT_311, AesCmac, gcm);
        assert_eq!(
            may_bind(&e, terms(DIALECT_311, HmacSha256, gcm), true),
            Ok(())
        );
        // Another cipher does not.
        assert_eq!(
            may_bind(
                &e,
                terms(DIALECT_311, AesCmac, Some(Cipher::Aes128Ccm)),
                true
            ),
            Err(status::INVALID_PARAMETER)
        );
        e.channels.store(MAX_BOUND_CHANNELS, Ordering::Relaxed);
        assert_eq!(
            may_bind(&e, terms(DIALECT_311, AesCmac, gcm), true),
            Err(status::INSUFFICIENT_RESOURCES)
        );
    }
}
