//! The server side of one SPNEGO/NTLMSSP authentication exchange.
//!
//! Usage by the SMB server (one [`NtlmServer`] per SESSION_SETUP exchange):
//!
//! ```text
//! NEGOTIATE response SecurityBuffer  = negotiate_security_blob()
//! let mut auth = NtlmServer::new(random_challenge, now_filetime, names);
//! SESSION_SETUP #1: auth.step(buf, &users)? -> AuthStep::Continue(token)
//!                   => STATUS_MORE_PROCESSING_REQUIRED with `token`
//! SESSION_SETUP #2: auth.step(buf, &users)? -> AuthStep::Done { token, user, session_key, .. }
//!                   => STATUS_SUCCESS with `token`; derive SMB keys from `session_key`
//! Err(e)            => e.nt_status() (STATUS_LOGON_FAILURE for a wrong password)
//! ```
//!
//! Both SPNEGO-wrapped tokens and bare NTLMSSP messages are accepted; the reply uses the same
//! form as the request.

use super::ntlm::crypto::{
    ct_eq, gss_get_mic, nt_proof_str, ntowfv2, rc4_in_place, session_base_key, SessionSecurityKeys,
};
use super::ntlm::flags;
use super::ntlm::messages::{
    build_challenge, challenge_flags, parse_authenticate, parse_negotiate, parse_ntlmv2_response,
    TargetInfo, AUTHENTICATE_MIC_OFFSET, AV_FLAG_MIC_PRESENT, SIGNATURE,
};
use super::spnego::{self, neg_state, NegToken, NegTokenResp, OID_NTLMSSP};
use super::{AuthError, NtHashLookup};

/// Largest security token accepted by [`NtlmServer::step`] (bytes).
pub const MAX_TOKEN_LEN: usize = 64 * 1024;
/// How far the client's NTLMv2 timestamp may be from the server's clock (100 ns units): 36
/// hours, the MS-NLMP default MaxLifetime. Zero timestamps (some clients) are not checked.
pub const MAX_CLOCK_SKEW_FILETIME: u64 = 36 * 3600 * 10_000_000;

/// The names the server announces in its CHALLENGE (MsvAv* pairs). Clients show them and
/// some use the NetBIOS domain in NTOWFv2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerNames {
    /// NetBIOS domain or workgroup, e.g. "WORKGROUP".
    pub netbios_domain: String,
    /// NetBIOS computer name, e.g. "QUARRY".
    pub netbios_computer: String,
    /// DNS domain, may be empty.
    pub dns_domain: String,
    /// DNS host name, e.g. "quarry.local".
    pub dns_computer: String,
}

/// What a successful [`NtlmServer::step`] produced. Its `Debug` output never shows the
/// session key.
#[derive(Clone, PartialEq, Eq)]
pub enum AuthStep {
    /// More legs needed: send this token with STATUS_MORE_PROCESSING_REQUIRED.
    Continue(Vec<u8>),
    /// Authentication finished. Send `token` (possibly empty) with STATUS_SUCCESS.
    Done {
        /// Final token for the SESSION_SETUP response (SPNEGO accept-completed, perhaps with a
        /// mechListMIC; empty for bare NTLMSSP).
        token: Vec<u8>,
        /// User name as the client sent it.
        user: String,
        /// Domain as the client sent it.
        domain: String,
        /// The NTLM ExportedSessionKey: input to SMB key derivation. All zeros when
        /// `anonymous`: a null session has no key, so the server sets
        /// SMB2_SESSION_FLAG_IS_NULL and neither signs nor encrypts it (MS-SMB2 3.3.5.5.3).
        session_key: [u8; 16],
        /// True for an anonymous (null) logon: empty user, no NT response. The caller
        /// decides whether to allow it (guest/anonymous is refused unless a share allows it).
        anonymous: bool,
    },
}

impl std::fmt::Debug for AuthStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Continue(t) => f.debug_tuple("Continue").field(&t.len()).finish(),
            Self::Done {
                token,
                user,
                domain,
                anonymous,
                ..
            } => f
                .debug_struct("Done")
                .field("token_len", &token.len())
                .field("user", user)
                .field("domain", domain)
                .field("anonymous", anonymous)
                .finish_non_exhaustive(),
        }
    }
}

/// The NEGOTIATE response's security buffer: SPNEGO NegTokenInit2 advertising NTLMSSP.
pub fn negotiate_security_blob() -> Vec<u8> {
    spnego::build_neg_token_init2()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wrapping {
    Raw,
    Spnego,
}

#[derive(Debug)]
enum State {
    Start,
    AwaitNegotiate {
        mech_types_der: Vec<u8>,
    },
    ChallengeSent {
        wrapping: Wrapping,
        negotiate: Vec<u8>,
        challenge: Vec<u8>,
        mech_types_der: Option<Vec<u8>>,
    },
    Finished,
}

/// One authentication exchange, server side. Create a new one per SESSION_SETUP exchange
/// (including re-authentication) with a fresh random challenge.
#[derive(Debug)]
pub struct NtlmServer {
    server_challenge: [u8; 8],
    now_filetime: u64,
    names: ServerNames,
    state: State,
}

/// Result of verifying an AUTHENTICATE message against its exchange. Its `Debug` output never
/// shows the session key.
#[derive(Clone, PartialEq, Eq)]
pub struct Verified {
    /// User name from the message.
    pub user: String,
    /// Domain name from the message.
    pub domain: String,
    /// ExportedSessionKey (zeros for anonymous).
    pub session_key: [u8; 16],
    /// Anonymous logon.
    pub anonymous: bool,
    /// The AUTHENTICATE's NegotiateFlags.
    pub flags: u32,
    /// Timestamp from the client's NTLMv2 blob (0 if anonymous).
    pub client_timestamp: u64,
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("user", &self.user)
            .field("domain", &self.domain)
            .field("anonymous", &self.anonymous)
            .field("flags", &format_args!("{:#010x}", self.flags))
            .finish_non_exhaustive()
    }
}

/// Verifies an AUTHENTICATE_MESSAGE: NTLMv2 proof, session key (with key exchange), and the
/// MIC over all three messages when the client says it sent one.
///
/// NTOWFv2 is tried with the domain as sent, then upper-cased, then empty: clients disagree
/// on which domain string they hash, and all three use the same password.
pub fn verify_authenticate(
    negotiate: &[u8],
    challenge: &[u8],
    server_challenge: &[u8; 8],
    authenticate: &[u8],
    creds: &dyn NtHashLookup,
) -> Result<Verified, AuthError> {
    let a = parse_authenticate(authenticate)?;
    if a.nt_response.is_empty()
        && a.user.is_empty()
        && (a.lm_response.is_empty() || a.lm_response == [0])
    {
        return Ok(Verified {
            user: String::new(),
            domain: a.domain,
            session_key: [0; 16],
            anonymous: true,
            flags: a.flags,
            client_timestamp: 0,
        });
    }
    if a.user.is_empty() {
        return Err(AuthError::LogonFailure);
    }
    let r = parse_ntlmv2_response(a.nt_response)?;
    let nt_hash = creds
        .nt_hash(&a.user, &a.domain)
        .ok_or(AuthError::LogonFailure)?;
    let upper = super::ntlm::crypto::upcase_like_windows(&a.domain);
    let candidates = [a.domain.as_str(), upper.as_str(), ""];
    let mut found = None;
    for (i, dom) in candidates.iter().enumerate() {
        if candidates.iter().take(i).any(|c| c == dom) {
            continue;
        }
        let key = ntowfv2(&nt_hash, &a.user, dom);
        let proof = nt_proof_str(&key, server_challenge, r.temp);
        if ct_eq(&proof, &r.nt_proof) {
            found = Some((key, proof));
            break;
        }
    }
    let (key, proof) = found.ok_or(AuthError::LogonFailure)?;
    let kx_key = session_base_key(&key, &proof);
    let session_key = if a.flags & flags::KEY_EXCH != 0 {
        let enc: &[u8; 16] = a
            .encrypted_session_key
            .try_into()
            .map_err(|_| AuthError::Malformed("EncryptedRandomSessionKey must be 16 bytes"))?;
        let mut k = *enc;
        rc4_in_place(&kx_key, &mut k);
        k
    } else {
        kx_key
    };
    if r.av_flags & AV_FLAG_MIC_PRESENT != 0 {
        if !a.has_mic_field {
            return Err(AuthError::IntegrityFailure("MIC announced but absent"));
        }
        let mut zeroed = authenticate.to_vec();
        let mic_range = AUTHENTICATE_MIC_OFFSET..AUTHENTICATE_MIC_OFFSET + 16;
        let sent = authenticate
            .get(mic_range.clone())
            .ok_or(AuthError::Malformed("AUTHENTICATE: MIC truncated"))?;
        if let Some(m) = zeroed.get_mut(mic_range) {
            m.fill(0);
        }
        let mic = super::ntlm::crypto::compute_mic(&session_key, negotiate, challenge, &zeroed);
        if !ct_eq(&mic, sent) {
            return Err(AuthError::IntegrityFailure("NTLM MIC"));
        }
    }
    Ok(Verified {
        user: a.user,
        domain: a.domain,
        session_key,
        anonymous: false,
        flags: a.flags,
        client_timestamp: r.timestamp,
    })
}

impl NtlmServer {
    /// Starts an exchange. `server_challenge` must be fresh random bytes for every exchange;
    /// `now_filetime` is the current time as a Windows FILETIME (100 ns since 1601), used for
    /// MsvAvTimestamp and the client clock-skew check.
    pub fn new(server_challenge: [u8; 8], now_filetime: u64, names: ServerNames) -> Self {
        Self {
            server_challenge,
            now_filetime,
            names,
            state: State::Start,
        }
    }

    /// True once the exchange has succeeded or failed; further steps are errors.
    pub fn is_finished(&self) -> bool {
        matches!(self.state, State::Finished)
    }

    /// Consumes one client token (the SESSION_SETUP request's security buffer) and produces
    /// the next server token, or the final result. Any error ends the exchange.
    pub fn step(&mut self, token: &[u8], creds: &dyn NtHashLookup) -> Result<AuthStep, AuthError> {
        let state = std::mem::replace(&mut self.state, State::Finished);
        if token.len() > MAX_TOKEN_LEN {
            return Err(AuthError::TooLarge("security token"));
        }
        let result = self.advance(state, token, creds);
        if result.is_err() {
            self.state = State::Finished;
        }
        result
    }

    fn advance(
        &mut self,
        state: State,
        token: &[u8],
        creds: &dyn NtHashLookup,
    ) -> Result<AuthStep, AuthError> {
        let raw = token.starts_with(SIGNATURE);
        match state {
            State::Start if raw => self.send_challenge(Wrapping::Raw, token, None),
            State::Start => match spnego::parse(token)? {
                NegToken::Init(init) => {
                    if !init.mech_types.contains(&OID_NTLMSSP) {
                        return Err(AuthError::UnsupportedMech);
                    }
                    let der = init.mech_types_der.to_vec();
                    let ntlm_first = init.mech_types.first() == Some(&OID_NTLMSSP);
                    match init.mech_token {
                        Some(t) if ntlm_first && t.starts_with(SIGNATURE) => {
                            self.send_challenge(Wrapping::Spnego, t, Some(der))
                        }
                        _ => {
                            // The optimistic token (if any) was for another mechanism: select
                            // NTLMSSP and ask for its NEGOTIATE (RFC 4178 5, MS-SPNG 3.3.5.1).
                            self.state = State::AwaitNegotiate {
                                mech_types_der: der,
                            };
                            Ok(AuthStep::Continue(spnego::build_resp(&NegTokenResp {
                                neg_state: Some(neg_state::ACCEPT_INCOMPLETE),
                                supported_mech: Some(OID_NTLMSSP),
                                response_token: None,
                                mech_list_mic: None,
                            })))
                        }
                    }
                }
                NegToken::Resp(resp) => {
                    let t = resp
                        .response_token
                        .ok_or(AuthError::Malformed("NegTokenResp without token"))?;
                    self.send_challenge(Wrapping::Spnego, t, None)
                }
            },
            State::AwaitNegotiate { mech_types_der } => {
                let NegToken::Resp(resp) = spnego::parse(token)? else {
                    return Err(AuthError::UnexpectedMessage("awaiting NTLM NEGOTIATE"));
                };
                let t = resp
                    .response_token
                    .ok_or(AuthError::Malformed("NegTokenResp without token"))?;
                self.send_challenge(Wrapping::Spnego, t, Some(mech_types_der))
            }
            State::ChallengeSent {
                wrapping,
                negotiate,
                challenge,
                mech_types_der,
            } => {
                let (auth_msg, client_mic) = match (wrapping, raw) {
                    (Wrapping::Raw, true) => (token, None),
                    (Wrapping::Spnego, false) => match spnego::parse(token)? {
                        NegToken::Resp(r) => (
                            r.response_token
                                .ok_or(AuthError::Malformed("NegTokenResp without token"))?,
                            r.mech_list_mic,
                        ),
                        NegToken::Init(_) => {
                            return Err(AuthError::UnexpectedMessage("awaiting AUTHENTICATE"))
                        }
                    },
                    _ => {
                        return Err(AuthError::UnexpectedMessage(
                            "wrapping changed mid-exchange",
                        ))
                    }
                };
                let v = verify_authenticate(
                    &negotiate,
                    &challenge,
                    &self.server_challenge,
                    auth_msg,
                    creds,
                )?;
                if !v.anonymous
                    && v.client_timestamp != 0
                    && v.client_timestamp.abs_diff(self.now_filetime) > MAX_CLOCK_SKEW_FILETIME
                {
                    return Err(AuthError::LogonFailure);
                }
                let token = match wrapping {
                    Wrapping::Raw => Vec::new(),
                    Wrapping::Spnego => {
                        let server_mic = match (client_mic, mech_types_der.as_deref(), v.anonymous)
                        {
                            (Some(mic), Some(der), false) => {
                                Some(check_mech_list_mic(&v, mic, der)?)
                            }
                            _ => None,
                        };
                        spnego::build_resp(&NegTokenResp {
                            neg_state: Some(neg_state::ACCEPT_COMPLETED),
                            supported_mech: None,
                            response_token: None,
                            mech_list_mic: server_mic.as_ref().map(|m| &m[..]),
                        })
                    }
                };
                Ok(AuthStep::Done {
                    token,
                    user: v.user,
                    domain: v.domain,
                    session_key: v.session_key,
                    anonymous: v.anonymous,
                })
            }
            State::Finished => Err(AuthError::UnexpectedMessage("exchange already finished")),
        }
    }

    fn send_challenge(
        &mut self,
        wrapping: Wrapping,
        negotiate: &[u8],
        mech_types_der: Option<Vec<u8>>,
    ) -> Result<AuthStep, AuthError> {
        let neg = parse_negotiate(negotiate)?;
        let names = &self.names;
        let challenge = build_challenge(
            challenge_flags(neg.flags),
            &self.server_challenge,
            &TargetInfo {
                netbios_domain: &names.netbios_domain,
                netbios_computer: &names.netbios_computer,
                dns_domain: &names.dns_domain,
                dns_computer: &names.dns_computer,
                timestamp: self.now_filetime,
            },
        );
        let out = match wrapping {
            Wrapping::Raw => challenge.clone(),
            Wrapping::Spnego => spnego::build_resp(&NegTokenResp {
                neg_state: Some(neg_state::ACCEPT_INCOMPLETE),
                supported_mech: Some(OID_NTLMSSP),
                response_token: Some(&challenge),
                mech_list_mic: None,
            }),
        };
        self.state = State::ChallengeSent {
            wrapping,
            negotiate: negotiate.to_vec(),
            challenge,
            mech_types_der,
        };
        Ok(AuthStep::Continue(out))
    }
}

/// Verifies the client's mechListMIC over mechTypes and returns the server's.
fn check_mech_list_mic(
    v: &Verified,
    client_mic: &[u8],
    mech_types_der: &[u8],
) -> Result<[u8; 16], AuthError> {
    let keys = SessionSecurityKeys::derive(&v.session_key, v.flags);
    let key_exch = v.flags & flags::KEY_EXCH != 0;
    let expected = gss_get_mic(
        &keys.client_signing,
        &keys.client_sealing,
        key_exch,
        0,
        mech_types_der,
    );
    if !ct_eq(&expected, client_mic) {
        return Err(AuthError::IntegrityFailure("SPNEGO mechListMIC"));
    }
    Ok(gss_get_mic(
        &keys.server_signing,
        &keys.server_sealing,
        key_exch,
        0,
        mech_types_der,
    ))
}

#[cfg(test)]
mod tests;
