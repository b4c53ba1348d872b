//! NEGOTIATE (MS-SMB2 3.3.5.4) and the SMB1 upgrade answer (3.3.5.3.1).

use crate::auth::negotiate_security_blob;
use crate::crypto::{Cipher, SigningAlgorithm};
use crate::proto::negotiate::{
    NegotiateContext, NegotiateRequest, NegotiateResponse, CAP_ENCRYPTION, CAP_LARGE_MTU,
    CAP_LEASING, CAP_MULTI_CHANNEL, DIALECT_202, DIALECT_210, DIALECT_300, DIALECT_302,
    DIALECT_311, HASH_SHA512, SIGNING_ENABLED, SIGNING_REQUIRED,
};
use crate::proto::status;

use crate::server::conn::Connection;
use crate::server::dispatch::{Ctx, HResult, PreauthTarget, Reply};
use crate::server::state::Negotiated;
use crate::server::{now_filetime, random_bytes, MAX_IO_SIZE};

/// Dialects in the server's order of preference.
const DIALECTS: [u16; 5] = [
    DIALECT_311,
    DIALECT_302,
    DIALECT_300,
    DIALECT_210,
    DIALECT_202,
];
/// Preauth salt length sent by the server.
const SALT_LEN: usize = 32;

fn security_mode(conn: &Connection) -> u16 {
    SIGNING_ENABLED
        | if conn.config.require_signing {
            SIGNING_REQUIRED
        } else {
            0
        }
}

/// Handles NEGOTIATE.
pub fn negotiate(conn: &mut Connection, ctx: &mut Ctx<'_>, req: NegotiateRequest) -> HResult {
    if conn.state.negotiated.is_some() {
        return Ok(Reply {
            disconnect: true,
            ..Reply::error(status::INVALID_PARAMETER)
        });
    }
    let Some(dialect) = DIALECTS.iter().copied().find(|d| req.dialects.contains(d)) else {
        return Err(status::NOT_SUPPORTED);
    };
    let mut caps = 0;
    if dialect >= DIALECT_210 {
        caps |= CAP_LARGE_MTU | CAP_LEASING;
    }
    if dialect >= DIALECT_300 {
        // Further connections of the client may bind to its sessions (server::channel).
        caps |= CAP_MULTI_CHANNEL | crate::proto::negotiate::CAP_PERSISTENT_HANDLES;
        // Directory leases only for clients that say they understand them (as Samba):
        // impacket 0.13, which does not, fails every CREATE in the share root when a
        // server offers them.
        if req.capabilities & crate::proto::negotiate::CAP_DIRECTORY_LEASING != 0 {
            caps |= crate::proto::negotiate::CAP_DIRECTORY_LEASING;
        }
    }
    let mut cipher = None;
    let mut signing = match dialect {
        DIALECT_202 | DIALECT_210 => SigningAlgorithm::HmacSha256,
        _ => SigningAlgorithm::AesCmac,
    };
    let mut contexts = Vec::new();
    if dialect == DIALECT_311 {
        let preauth_ok = req.contexts.iter().any(|c| matches!(c, NegotiateContext::Preauth { hashes, .. } if hashes.contains(&HASH_SHA512)));
        if !preauth_ok {
            return Err(status::INVALID_PARAMETER);
        }
        let mut salt = vec![0u8; SALT_LEN];
        random_bytes(&mut salt);
        contexts.push(NegotiateContext::Preauth {
            hashes: vec![HASH_SHA512],
            salt,
        });
        for c in &req.contexts {
            match c {
                NegotiateContext::Encryption { ciphers } => {
                    cipher = conn
                        .config
                        .ciphers
                        .iter()
                        .copied()
                        .find(|x| ciphers.contains(&x.wire_id()));
                    contexts.push(NegotiateContext::Encryption {
                        ciphers: vec![cipher.map_or(0, Cipher::wire_id)],
                    });
                }
                NegotiateContext::Signing { algorithms } => {
                    let pick = [
                        SigningAlgorithm::AesGmac,
                        SigningAlgorithm::AesCmac,
                        SigningAlgorithm::HmacSha256,
                    ]
                    .into_iter()
                    .find(|a| algorithms.contains(&a.wire_id()))
                    .unwrap_or(SigningAlgorithm::AesCmac);
                    signing = pick;
                    contexts.push(NegotiateContext::Signing {
                        algorithms: vec![pick.wire_id()],
                    });
                }
                _ => {}
            }
        }
    } else if (dialect == DIALECT_300 || dialect == DIALECT_302)
        && req.capabilities & CAP_ENCRYPTION != 0
        && conn.config.ciphers.contains(&Cipher::Aes128Ccm)
    {
        caps |= CAP_ENCRYPTION;
        cipher = Some(Cipher::Aes128Ccm);
    }
    if dialect == DIALECT_311 {
        conn.state.preauth.update(ctx.msg);
    }
    let resp = NegotiateResponse {
        security_mode: security_mode(conn),
        dialect,
        server_guid: conn.config.server_guid,
        capabilities: caps,
        max_transact_size: MAX_IO_SIZE,
        max_read_size: MAX_IO_SIZE,
        max_write_size: MAX_IO_SIZE,
        system_time: now_filetime(),
        server_start_time: 0,
        security_buffer: negotiate_security_blob(),
        contexts,
    };
    conn.state
        .credits
        .set_multi_credit(caps & CAP_LARGE_MTU != 0);
    conn.state.negotiated = Some(Negotiated {
        dialect,
        client_capabilities: req.capabilities,
        client_guid: req.client_guid,
        client_security_mode: req.security_mode,
        client_dialects: req.dialects.clone(),
        server_security_mode: security_mode(conn),
        server_capabilities: caps,
        cipher,
        signing,
        via_smb1: false,
    });
    if dialect >= DIALECT_210 {
        // Lease breaks go to the client's oldest connection.
        conn.shared
            .register_client(req.client_guid, conn.conn_id, conn.breaks.clone());
    }
    let mut body = Vec::with_capacity(256);
    resp.encode(&mut body);
    Ok(Reply {
        preauth: (dialect == DIALECT_311).then_some(PreauthTarget::Connection),
        ..Reply::ok(body)
    })
}

/// The body of the SMB2 NEGOTIATE response that answers an SMB1 NEGOTIATE. With 0x0202 the
/// connection is negotiated at once; with the 0x02FF wildcard the client sends an SMB2
/// NEGOTIATE next.
pub fn smb1_upgrade_response(conn: &mut Connection, dialect: u16) -> Vec<u8> {
    let resp = NegotiateResponse {
        security_mode: security_mode(conn),
        dialect,
        server_guid: conn.config.server_guid,
        capabilities: 0,
        max_transact_size: 65536,
        max_read_size: 65536,
        max_write_size: 65536,
        system_time: now_filetime(),
        server_start_time: 0,
        security_buffer: negotiate_security_blob(),
        contexts: Vec::new(),
    };
    if dialect == DIALECT_202 {
        conn.state.negotiated = Some(Negotiated {
            dialect,
            client_capabilities: 0,
            client_guid: [0; 16],
            client_security_mode: 0,
            client_dialects: vec![DIALECT_202],
            server_security_mode: security_mode(conn),
            server_capabilities: 0,
            cipher: None,
            signing: SigningAlgorithm::HmacSha256,
            via_smb1: true,
        });
    }
    let mut body = Vec::with_capacity(128);
    resp.encode(&mut body);
    body
}
