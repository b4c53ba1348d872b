//! SESSION_SETUP (MS-SMB2 3.3.5.5) with SPNEGO/NTLMv2 through [`crate::auth`], key derivation
//! through [`crate::crypto`], and LOGOFF (3.3.5.6).

use std::sync::Arc;

use crate::auth::{AuthError, AuthStep, NtHashLookup, NtlmServer, ServerNames};
use crate::crypto::{CipherKey, KeyDialect, SessionKeys, SigningKey};
use crate::proto::negotiate::{DIALECT_202, DIALECT_210, DIALECT_311, SIGNING_REQUIRED};
use crate::proto::session::{
    encode_empty_response, encode_session_setup_response, SessionSetupRequest,
    SESSION_FLAG_BINDING, SESSION_FLAG_ENCRYPT_DATA, SESSION_FLAG_IS_NULL,
};
use crate::proto::status;

use crate::server::channel::{
    may_bind, Channel, ChannelSlot, ChannelTerms, Inbound, SessionEntry, Via,
};
use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, PreauthTarget, Reply};
use crate::server::state::{AuthState, Negotiated, Session};
use crate::server::{now_filetime, random_bytes, Backend, MAX_SESSIONS_PER_CONNECTION};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Adapts the appliance backend to the auth module's credential lookup.
/// The backend's hashes, remembering the user name asked for (for failed-login reports).
/// The RID of a user whose hash was found is kept too: it names the user in security
/// descriptors.
struct Lookup(
    Arc<dyn Backend>,
    std::sync::Mutex<Option<String>>,
    std::sync::Mutex<Option<u32>>,
);

impl NtHashLookup for Lookup {
    fn nt_hash(&self, user: &str, _domain: &str) -> Option<[u8; 16]> {
        *self.1.lock().unwrap_or_else(|p| p.into_inner()) = Some(user.to_string());
        let hash = self.0.nt_hash(user)?;
        *self.2.lock().unwrap_or_else(|p| p.into_inner()) = self.0.user_rid(user);
        Some(hash)
    }
}

fn names(conn: &Connection) -> ServerNames {
    ServerNames {
        netbios_domain: conn.config.domain.clone(),
        netbios_computer: conn.config.computer_name.clone(),
        dns_domain: String::new(),
        dns_computer: conn.config.computer_name.to_ascii_lowercase(),
    }
}

/// What one NTLM leg produced: the exchange, its result, the user name it asked for and
/// that user's RID.
type StepOutcome = (
    Box<NtlmServer>,
    Result<AuthStep, AuthError>,
    Option<String>,
    Option<u32>,
);

/// Runs one NTLM leg on the blocking pool (the NT hash comes from the appliance's user
/// table). `None` when the blocking task failed.
async fn step(
    backend: Arc<dyn Backend>,
    mut ntlm: Box<NtlmServer>,
    token: Vec<u8>,
) -> Option<StepOutcome> {
    tokio::task::spawn_blocking(move || {
        let lookup = Lookup(
            backend,
            std::sync::Mutex::new(None),
            std::sync::Mutex::new(None),
        );
        let r = ntlm.step(&token, &lookup);
        let user = lookup.1.into_inner().unwrap_or_else(|p| p.into_inner());
        let rid = lookup.2.into_inner().unwrap_or_else(|p| p.into_inner());
        (ntlm, r, user, rid)
    })
    .await
    .ok()
}

/// Logs a failed authentication and, for a wrong password or unknown user, tells the
/// appliance (failed-login alerts).
fn report_failure(conn: &Connection, e: &AuthError, tried_user: Option<&str>, what: &str) {
    tracing::info!(peer = %conn.state.peer, error = %e, "{what}");
    if matches!(e, AuthError::LogonFailure) {
        conn.backend.auth_failed(tried_user, conn.state.peer);
    }
}

fn new_exchange(conn: &Connection) -> NtlmServer {
    let mut challenge = [0u8; 8];
    random_bytes(&mut challenge);
    NtlmServer::new(challenge, now_filetime(), names(conn))
}

/// Handles SESSION_SETUP.
pub async fn session_setup(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: SessionSetupRequest<'_>,
) -> HResult {
    let neg = conn
        .state
        .negotiated
        .clone()
        .ok_or(status::INVALID_PARAMETER)?;
    if req.flags & SESSION_FLAG_BINDING != 0 {
        return bind(conn, ctx, req, &neg).await;
    }
    let sid = if ctx.hdr.session_id == 0 {
        let live = conn
            .state
            .sessions
            .values()
            .filter(|s| !matches!(s.auth, AuthState::Expired))
            .count();
        if live >= MAX_SESSIONS_PER_CONNECTION {
            return Err(status::INSUFFICIENT_RESOURCES);
        }
        let sid = conn.shared.sessions().next_session_id();
        let ntlm = new_exchange(conn);
        conn.state
            .sessions
            .insert(sid, Session::new(sid, ntlm, conn.state.preauth));
        sid
    } else {
        let sid = ctx.hdr.session_id;
        let fresh = new_exchange(conn);
        let conn_preauth = conn.state.preauth;
        let s = conn
            .state
            .sessions
            .get_mut(&sid)
            .ok_or(status::USER_SESSION_DELETED)?;
        match s.auth {
            AuthState::InProgress { .. } | AuthState::Reauth { .. } => {}
            AuthState::Valid => {
                // Re-authentication: a new exchange on the same, still usable, session.
                s.auth = AuthState::Reauth {
                    ntlm: Box::new(fresh),
                    preauth: conn_preauth,
                };
            }
            AuthState::Expired => return Err(status::USER_SESSION_DELETED),
        }
        sid
    };
    let token = req.security_buffer.to_vec();
    let (ntlm, mut preauth, reauth) = {
        let Some(s) = conn.state.sessions.get_mut(&sid) else {
            return Err(status::USER_SESSION_DELETED);
        };
        match std::mem::replace(&mut s.auth, AuthState::Expired) {
            AuthState::InProgress { ntlm, preauth } => (ntlm, preauth, false),
            AuthState::Reauth { ntlm, preauth } => (ntlm, preauth, true),
            _ => return Err(status::INTERNAL_ERROR),
        }
    };
    if neg.dialect == DIALECT_311 {
        preauth.update(ctx.msg);
    }
    let Some((ntlm, result, tried_user, rid)) = step(conn.backend.clone(), ntlm, token).await
    else {
        conn.state.sessions.remove(&sid);
        return Err(status::INTERNAL_ERROR);
    };
    match result {
        Ok(AuthStep::Continue(token)) => {
            if let Some(s) = conn.state.sessions.get_mut(&sid) {
                s.auth = if reauth {
                    AuthState::Reauth { ntlm, preauth }
                } else {
                    AuthState::InProgress { ntlm, preauth }
                };
            }
            let mut body = Vec::with_capacity(token.len() + 8);
            encode_session_setup_response(&mut body, 0, &token);
            Ok(Reply {
                session_id: Some(sid),
                preauth: Some(PreauthTarget::Session(sid)),
                ..Reply::with_status(status::MORE_PROCESSING_REQUIRED, body)
            })
        }
        Ok(AuthStep::Done {
            token,
            user,
            domain: _,
            session_key,
            anonymous,
        }) => {
            if reauth {
                let s = conn
                    .state
                    .sessions
                    .get_mut(&sid)
                    .ok_or(status::USER_SESSION_DELETED)?;
                if anonymous || !user.eq_ignore_ascii_case(&s.user) {
                    // A session cannot change hands: refuse and end it.
                    tracing::info!(peer = %conn.state.peer, "re-authentication as another user refused");
                    conn.end_session(sid, false).await;
                    return Err(status::ACCESS_DENIED);
                }
                // Same user: the session keeps its keys, trees and opens.
                s.auth = AuthState::Valid;
                let mut body = Vec::with_capacity(token.len() + 8);
                let flags = if s.encrypt_data {
                    SESSION_FLAG_ENCRYPT_DATA
                } else {
                    0
                };
                encode_session_setup_response(&mut body, flags, &token);
                return Ok(Reply {
                    session_id: Some(sid),
                    force_sign: true,
                    ..Reply::ok(body)
                });
            }
            let key_dialect = match neg.dialect {
                DIALECT_202 | DIALECT_210 => KeyDialect::Smb2,
                DIALECT_311 => KeyDialect::Smb311 {
                    preauth_hash: *preauth.value(),
                },
                _ => KeyDialect::Smb30,
            };
            let encrypt_all = conn.config.encrypt_all;
            let require_signing =
                conn.config.require_signing || neg.client_security_mode & SIGNING_REQUIRED != 0;
            let observer: Option<std::sync::Arc<dyn crate::server::SessionObserver>> = if anonymous
            {
                None
            } else {
                Some(std::sync::Arc::from(
                    conn.backend.session_started(&user, conn.state.peer),
                ))
            };
            if let Some(o) = &observer {
                let admin = o.cancelled();
                let cancel = conn.admin_cancel.clone();
                let done = conn.closed.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = admin.cancelled() => cancel.cancel(),
                        _ = done.cancelled() => {}
                    }
                });
            }
            let s = conn
                .state
                .sessions
                .get_mut(&sid)
                .ok_or(status::USER_SESSION_DELETED)?;
            let mut flags = 0;
            if anonymous {
                s.guest = true;
                s.signing_required = false;
                flags |= SESSION_FLAG_IS_NULL;
            } else {
                let keys = SessionKeys::derive(&session_key, key_dialect, neg.cipher);
                s.signing_key = Some(SigningKey::new(neg.signing, keys.signing()));
                if let (Some(c), Some(e), Some(d)) =
                    (neg.cipher, keys.encryption(), keys.decryption())
                {
                    s.encrypt_key = CipherKey::new(c, e).ok().map(std::sync::Arc::new);
                    s.decrypt_key = CipherKey::new(c, d).ok().map(Arc::new);
                }
                s.signing_required = require_signing;
                if encrypt_all {
                    if s.encrypt_key.is_none() {
                        conn.state.sessions.remove(&sid);
                        return Err(status::ACCESS_DENIED);
                    }
                    s.encrypt_data = true;
                    flags |= SESSION_FLAG_ENCRYPT_DATA;
                }
            }
            if let Some(o) = &observer {
                o.set_security(crate::server::SessionSecurity {
                    dialect: neg.dialect,
                    signing: neg.signing,
                    cipher: neg.cipher,
                    encrypt_all: s.encrypt_data,
                });
            }
            if let (false, Some(key)) = (anonymous, s.signing_key.clone()) {
                conn.shared.sessions().publish(SessionEntry {
                    session_id: sid,
                    owner_conn: conn.conn_id,
                    owner: conn.inbox.clone(),
                    user: user.clone(),
                    dialect: neg.dialect,
                    cipher: neg.cipher,
                    signing_key: key,
                    decrypt_key: s.decrypt_key.clone(),
                    signing_required: s.signing_required,
                    channels: AtomicUsize::new(0),
                    channel_inboxes: std::sync::Mutex::new(Vec::new()),
                    observer: observer.clone(),
                });
            }
            if let Some(o) = &observer {
                o.channel_added(conn.traffic.clone());
            }
            s.user = user.clone();
            s.token = Some(Arc::new(super::security::session_token(
                &conn.config.machine_sid,
                rid,
                anonymous,
            )));
            s.observer = observer;
            s.auth = AuthState::Valid;
            if !anonymous && req.previous_session_id != 0 && req.previous_session_id != sid {
                close_previous(conn, req.previous_session_id, &user).await;
            }
            let mut body = Vec::with_capacity(token.len() + 8);
            encode_session_setup_response(&mut body, flags, &token);
            Ok(Reply {
                session_id: Some(sid),
                force_sign: !anonymous,
                ..Reply::ok(body)
            })
        }
        Err(e) => {
            report_failure(conn, &e, tried_user.as_deref(), "SMB authentication failed");
            if reauth {
                // A failed re-authentication ends the session (it stays as a tombstone so
                // later requests get USER_SESSION_DELETED).
                conn.end_session(sid, false).await;
            } else {
                conn.state.sessions.remove(&sid);
            }
            Err(e.nt_status())
        }
    }
}

/// Handles LOGOFF: the session is marked expired and removed once the response is sent.
pub async fn logoff(conn: &mut Connection, ctx: &mut Ctx<'_>) -> HResult {
    if !conn.state.sessions.contains_key(&ctx.session_id) {
        return Err(status::USER_SESSION_DELETED);
    }
    // Durable opens outlive a LOGOFF too: a new session of the user reclaims them.
    conn.end_session(ctx.session_id, true).await;
    let mut body = Vec::new();
    encode_empty_response(&mut body);
    Ok(Reply::ok(body))
}

/// An error answer to a binding leg, signed with the session's key when the request's
/// signature proved the client holds it.
fn bind_error(st: u32, key: Option<SigningKey>) -> HResult {
    Ok(Reply {
        force_sign: key.is_some(),
        sign_with: key,
        ..Reply::error(st)
    })
}

/// SESSION_SETUP with SMB2_SESSION_FLAG_BINDING (MS-SMB2 3.3.5.5.2): this connection
/// authenticates again as the session's user and becomes one of its channels, with a
/// signing key of its own derived from this authentication (and, for 3.1.1, this
/// connection's preauth hash).
async fn bind(
    conn: &mut Connection,
    ctx: &mut Ctx<'_>,
    req: SessionSetupRequest<'_>,
    neg: &Negotiated,
) -> HResult {
    let sid = ctx.hdr.session_id;
    if sid == 0 {
        return Err(status::INVALID_PARAMETER);
    }
    if conn.state.sessions.contains_key(&sid) {
        // Already this connection's own session.
        return Err(status::REQUEST_NOT_ACCEPTED);
    }
    let (entry, ntlm, mut preauth) = match conn.state.channels.remove(&sid) {
        Some(Channel::Binding {
            entry,
            ntlm,
            preauth,
        }) => {
            if !(ctx.hdr.is_signed() && entry.signing_key.verify(ctx.msg).is_ok()) {
                return Err(status::INVALID_PARAMETER);
            }
            (entry, ntlm, preauth)
        }
        Some(bound) => {
            conn.state.channels.insert(sid, bound);
            return Err(status::REQUEST_NOT_ACCEPTED);
        }
        None => {
            let entry = conn
                .shared
                .sessions()
                .find(sid)
                .ok_or(status::USER_SESSION_DELETED)?;
            let signed_ok = ctx.hdr.is_signed() && entry.signing_key.verify(ctx.msg).is_ok();
            let terms = ChannelTerms {
                dialect: neg.dialect,
                signing: neg.signing,
                cipher: neg.cipher,
            };
            if let Err(st) = may_bind(&entry, terms, signed_ok) {
                return bind_error(st, signed_ok.then(|| entry.signing_key.clone()));
            }
            let ntlm = Box::new(new_exchange(conn));
            (entry, ntlm, conn.state.preauth)
        }
    };
    let session_key_signer = entry.signing_key.clone();
    if neg.dialect == DIALECT_311 {
        preauth.update(ctx.msg);
    }
    let token = req.security_buffer.to_vec();
    let Some((ntlm, result, tried_user, _)) = step(conn.backend.clone(), ntlm, token).await else {
        return Err(status::INTERNAL_ERROR);
    };
    match result {
        Ok(AuthStep::Continue(token)) => {
            conn.state.channels.insert(
                sid,
                Channel::Binding {
                    entry,
                    ntlm,
                    preauth,
                },
            );
            let mut body = Vec::with_capacity(token.len() + 8);
            encode_session_setup_response(&mut body, 0, &token);
            Ok(Reply {
                session_id: Some(sid),
                preauth: Some(PreauthTarget::Channel(sid)),
                force_sign: true,
                sign_with: Some(session_key_signer),
                ..Reply::with_status(status::MORE_PROCESSING_REQUIRED, body)
            })
        }
        Ok(AuthStep::Done {
            token,
            user,
            session_key,
            anonymous,
            ..
        }) => {
            if anonymous || !user.eq_ignore_ascii_case(&entry.user) {
                tracing::info!(peer = %conn.state.peer, "binding as another user refused");
                return bind_error(status::ACCESS_DENIED, Some(session_key_signer));
            }
            if entry.channels.load(Ordering::Relaxed) >= crate::server::channel::MAX_BOUND_CHANNELS
            {
                return bind_error(status::INSUFFICIENT_RESOURCES, Some(session_key_signer));
            }
            let key_dialect = match neg.dialect {
                DIALECT_311 => KeyDialect::Smb311 {
                    preauth_hash: *preauth.value(),
                },
                _ => KeyDialect::Smb30,
            };
            let keys = SessionKeys::derive(&session_key, key_dialect, neg.cipher);
            let signing_key = SigningKey::new(neg.signing, keys.signing());
            let via = Arc::new(Via {
                conn_id: conn.conn_id,
                signing_key: signing_key.clone(),
                out: conn.out.clone(),
                gone: conn.gone.clone(),
            });
            tracing::info!(peer = %conn.state.peer, session = sid, "channel bound to session");
            if let Some(o) = &entry.observer {
                o.channel_added(conn.traffic.clone());
            }
            let slot = ChannelSlot::take(&entry);
            entry.add_channel(conn.conn_id, conn.inbox.clone());
            conn.state
                .channels
                .insert(sid, Channel::Bound { entry, via, slot });
            let mut body = Vec::with_capacity(token.len() + 8);
            encode_session_setup_response(&mut body, 0, &token);
            Ok(Reply {
                session_id: Some(sid),
                force_sign: true,
                sign_with: Some(signing_key),
                ..Reply::ok(body)
            })
        }
        Err(e) => {
            report_failure(
                conn,
                &e,
                tried_user.as_deref(),
                "SMB channel binding failed",
            );
            bind_error(e.nt_status(), Some(session_key_signer))
        }
    }
}

/// How long a reconnecting client's SESSION_SETUP waits for its previous session's
/// connection to close that session.
const CLOSE_PREVIOUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Ends the session a reconnecting client names as PreviousSessionId, when it belongs to
/// the same user (MS-SMB2 3.3.5.5.3), whichever connection holds it.
async fn close_previous(conn: &mut Connection, previous: u64, user: &str) {
    if let Some(s) = conn.state.sessions.get(&previous) {
        if s.is_valid() && s.user.eq_ignore_ascii_case(user) {
            conn.end_session(previous, true).await;
        }
        return;
    }
    let Some(entry) = conn.shared.sessions().find(previous) else {
        return;
    };
    let (done, wait) = tokio::sync::oneshot::channel();
    let asked = entry
        .owner
        .send(Inbound::CloseSession {
            session_id: previous,
            user: user.to_string(),
            done,
        })
        .await;
    if asked.is_ok() {
        let _ = tokio::time::timeout(CLOSE_PREVIOUS_TIMEOUT, wait).await;
    }
}
