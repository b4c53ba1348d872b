use super::*;
use crate::auth::nt_hash_from_password;

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

/// A one-user credential store.
struct OneUser {
    user: &'static str,
    password: &'static str,
}

impl NtHashLookup for OneUser {
    fn nt_hash(&self, user: &str, _domain: &str) -> Option<[u8; 16]> {
        user.eq_ignore_ascii_case(self.user)
            .then(|| nt_hash_from_password(self.password))
    }
}

fn names() -> ServerNames {
    ServerNames {
        netbios_domain: "WORKGROUP".into(),
        netbios_computer: "QUARRY".into(),
        dns_domain: String::new(),
        dns_computer: "quarry".into(),
    }
}

/// MS-NLMP 4.2.4.3 AUTHENTICATE (no MIC; key exchange with random session key 0x55...).
#[test]
fn ms_nlmp_4_2_4_authenticate_verifies_byte_for_byte() {
    let auth = unhex(crate::auth::ntlm::messages::tests_vectors::NLMP_AUTHENTICATE);
    let mut sc = [0u8; 8];
    sc.copy_from_slice(&unhex("0123456789abcdef"));
    let good = OneUser {
        user: "User",
        password: "Password",
    };
    let v = verify_authenticate(&[], &[], &sc, &auth, &good).unwrap();
    assert_eq!(v.user, "User");
    assert_eq!(v.domain, "Domain");
    assert!(!v.anonymous);
    assert_eq!(v.session_key, [0x55; 16]);

    let bad = OneUser {
        user: "User",
        password: "password",
    };
    assert_eq!(
        verify_authenticate(&[], &[], &sc, &auth, &bad),
        Err(AuthError::LogonFailure)
    );
    let nobody = OneUser {
        user: "Other",
        password: "Password",
    };
    assert_eq!(
        verify_authenticate(&[], &[], &sc, &auth, &nobody),
        Err(AuthError::LogonFailure)
    );
    let mut other_challenge = sc;
    other_challenge[0] ^= 1;
    assert_eq!(
        verify_authenticate(&[], &[], &other_challenge, &auth, &good),
        Err(AuthError::LogonFailure)
    );
}

#[test]
fn anonymous_is_detected_and_reported() {
    let mut srv = NtlmServer::new([1; 8], 0, names());
    let creds = OneUser {
        user: "u",
        password: "p",
    };
    let neg = b"NTLMSSP\0\x01\0\0\0\x05\x02\x88\xa0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec();
    let AuthStep::Continue(ch) = srv.step(&neg, &creds).unwrap() else {
        panic!()
    };
    assert_eq!(&ch[..8], b"NTLMSSP\0");
    // AUTHENTICATE with every buffer empty (payload offset 64).
    let mut auth = vec![0u8; 64];
    auth[..8].copy_from_slice(b"NTLMSSP\0");
    auth[8] = 3;
    for f in [12usize, 20, 28, 36, 44, 52] {
        auth[f + 4] = 64;
    }
    auth[60..64].copy_from_slice(&(flags::UNICODE | flags::ANONYMOUS).to_le_bytes());
    let AuthStep::Done {
        anonymous,
        user,
        session_key,
        token,
        ..
    } = srv.step(&auth, &creds).unwrap()
    else {
        panic!()
    };
    assert!(anonymous);
    assert!(user.is_empty());
    assert_eq!(session_key, [0; 16]);
    assert!(token.is_empty());
    assert!(srv.is_finished());
    assert!(srv.step(&auth, &creds).is_err());
}

#[test]
fn rejects_out_of_order_and_foreign_tokens() {
    let creds = OneUser {
        user: "u",
        password: "p",
    };
    // AUTHENTICATE first.
    let mut srv = NtlmServer::new([1; 8], 0, names());
    let auth = unhex(crate::auth::ntlm::messages::tests_vectors::NLMP_AUTHENTICATE);
    assert!(srv.step(&auth, &creds).is_err());
    assert!(srv.is_finished());
    // Kerberos-only mechTypes.
    let krb5: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x12, 0x01, 0x02, 0x02];
    let mut srv = NtlmServer::new([1; 8], 0, names());
    let init = spnego::build_init(&[krb5], Some(b"\x60\x00"));
    assert_eq!(srv.step(&init, &creds), Err(AuthError::UnsupportedMech));
    // Kerberos first, NTLM second with a Kerberos optimistic token: we select NTLM.
    let mut srv = NtlmServer::new([1; 8], 0, names());
    let init = spnego::build_init(&[krb5, OID_NTLMSSP], Some(b"\x60\x00"));
    let AuthStep::Continue(t) = srv.step(&init, &creds).unwrap() else {
        panic!()
    };
    let NegToken::Resp(r) = spnego::parse(&t).unwrap() else {
        panic!()
    };
    assert_eq!(r.supported_mech, Some(OID_NTLMSSP));
    assert!(r.response_token.is_none());
    assert!(srv.step(&[0u8; MAX_TOKEN_LEN + 1], &creds).is_err());
}

/// Deterministic mutation of valid tokens: every outcome is Ok or Err, never a panic.
#[test]
fn mutated_tokens_never_panic() {
    let creds = OneUser {
        user: "User",
        password: "Password",
    };
    let auth = unhex(crate::auth::ntlm::messages::tests_vectors::NLMP_AUTHENTICATE);
    let neg = spnego::build_init(
        &[OID_NTLMSSP],
        Some(b"NTLMSSP\0\x01\0\0\0\x35\x82\x08\xe2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"),
    );
    let resp = spnego::build_resp(&NegTokenResp {
        neg_state: Some(1),
        supported_mech: None,
        response_token: Some(&auth),
        mech_list_mic: Some(&[1; 16]),
    });
    let mut seed = 0x1234_5678u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for _ in 0..3000 {
        let mut a = neg.clone();
        let mut b = resp.clone();
        for _ in 0..(rnd() % 4 + 1) {
            let i = rnd() as usize % a.len();
            a[i] = rnd() as u8;
            let j = rnd() as usize % b.len();
            b[j] = rnd() as u8;
        }
        let cut = rnd() as usize % b.len();
        let mut srv = NtlmServer::new([1; 8], 0, names());
        if srv.step(&a, &creds).is_ok() {
            let _ = srv.step(&b[..cut.max(1)], &creds);
        }
        let mut srv = NtlmServer::new([1; 8], 0, names());
        let _ = srv.step(&b, &creds);
    }
}

#[path = "pyspnego_vectors.rs"]
mod pyspnego_vectors;

/// Replays exchanges recorded from pyspnego (a real, independent NTLM/SPNEGO client, both
/// SPNEGO-wrapped and bare NTLMSSP): every server token must match byte for byte, the final
/// session key must equal the one the client derived (so SMB signing keys will agree), and
/// the wrong-password runs must fail with STATUS_LOGON_FAILURE.
#[test]
fn pyspnego_recorded_exchanges_replay() {
    use pyspnego_vectors::{CHALLENGE, NOW, RECORDED};
    let creds = OneUser {
        user: "alice",
        password: "Secret#123",
    };
    assert_eq!(RECORDED.len(), 4);
    for rec in RECORDED {
        let mut srv = NtlmServer::new(CHALLENGE, NOW, names());
        let mut done_key = None;
        for (client, expected) in rec.legs {
            let got = srv.step(&unhex(client), &creds);
            if let Some(status) = expected.strip_prefix("ERR:") {
                let e = got.unwrap_err();
                assert_eq!(format!("{:08x}", e.nt_status()), status, "{}", rec.name);
                assert_eq!(e, AuthError::LogonFailure);
                continue;
            }
            match got.unwrap() {
                AuthStep::Continue(t) => assert_eq!(hex::encode(t), *expected, "{}", rec.name),
                AuthStep::Done {
                    token,
                    user,
                    session_key,
                    anonymous,
                    ..
                } => {
                    assert_eq!(hex::encode(token), *expected, "{}", rec.name);
                    assert_eq!(user, "alice");
                    assert!(!anonymous);
                    done_key = Some(session_key);
                }
            }
        }
        if rec.client_session_key.is_empty() {
            assert!(done_key.is_none(), "{}", rec.name);
        } else {
            assert_eq!(
                hex::encode(done_key.unwrap()),
                rec.client_session_key,
                "{}",
                rec.name
            );
        }
    }
}

/// The same recorded SPNEGO exchange with a tampered mechListMIC or a tampered NTLM MIC is
/// refused: the integrity checks really run.
#[test]
fn tampered_mics_are_refused() {
    use pyspnego_vectors::{CHALLENGE, NOW, RECORDED};
    let creds = OneUser {
        user: "alice",
        password: "Secret#123",
    };
    let rec = RECORDED
        .iter()
        .find(|r| r.name == "negotiate_good")
        .unwrap();
    let first = unhex(rec.legs[0].0);
    let last = unhex(rec.legs[1].0);
    // mechListMIC is the last 16 bytes of the final client token.
    let mut bad_spnego = last.clone();
    let n = bad_spnego.len();
    bad_spnego[n - 5] ^= 1;
    // The NTLM MIC sits at offset 72 of the AUTHENTICATE inside the token.
    let auth_at = last.windows(8).position(|w| w == b"NTLMSSP\0").unwrap();
    let mut bad_ntlm = last.clone();
    bad_ntlm[auth_at + 72] ^= 1;
    for (bad, what) in [(bad_spnego, "SPNEGO mechListMIC"), (bad_ntlm, "NTLM MIC")] {
        let mut srv = NtlmServer::new(CHALLENGE, NOW, names());
        srv.step(&first, &creds).unwrap();
        assert_eq!(
            srv.step(&bad, &creds),
            Err(AuthError::IntegrityFailure(what))
        );
    }
    // A far-off clock makes the (otherwise valid) response too old.
    let mut srv = NtlmServer::new(CHALLENGE, NOW + 2 * MAX_CLOCK_SKEW_FILETIME, names());
    srv.step(&first, &creds).unwrap();
    // The CHALLENGE differs (timestamp), so the MIC no longer matches either; any error is
    // a refusal.
    assert!(srv.step(&last, &creds).is_err());
}

#[path = "samba_vectors.rs"]
mod samba_vectors;

/// SESSION_SETUP security buffer of a request (`true`) or response.
fn security_buffer(msg: &[u8], request: bool) -> &[u8] {
    let at = if request { 64 + 12 } else { 64 + 4 };
    let off = u16::from_le_bytes([msg[at], msg[at + 1]]) as usize;
    let len = u16::from_le_bytes([msg[at + 2], msg[at + 3]]) as usize;
    &msg[off..off + len]
}

/// A real smbclient -> smbd exchange (SMB 3.1.1, SPNEGO/NTLMSSP with MIC and mechListMIC):
/// our verifier accepts the client's AUTHENTICATE for Samba's CHALLENGE, computes the same
/// server mechListMIC smbd sent, and the session key it yields, run through our preauth hash,
/// KDF and AES-GMAC, verifies the signature smbd put on its final SESSION_SETUP response.
#[test]
fn samba_smbclient_exchange_matches_smbd() {
    use crate::crypto::{KeyDialect, PreauthHash, SessionKeys, SigningAlgorithm, SigningKey};
    use samba_vectors::*;
    let creds = OneUser {
        user: "alice",
        password: "Secret#123",
    };
    let [neg_req, neg_resp, ss1_req, ss1_resp, ss2_req, ss2_resp] = [
        GOOD_NEG_REQ,
        GOOD_NEG_RESP,
        GOOD_SS1_REQ,
        GOOD_SS1_RESP,
        GOOD_SS2_REQ,
        GOOD_SS2_RESP,
    ]
    .map(unhex);
    let NegToken::Init(init) = spnego::parse(security_buffer(&ss1_req, true)).unwrap() else {
        panic!("expected NegTokenInit")
    };
    let negotiate = init.mech_token.unwrap();
    let NegToken::Resp(r1) = spnego::parse(security_buffer(&ss1_resp, false)).unwrap() else {
        panic!("expected NegTokenResp")
    };
    let challenge = r1.response_token.unwrap();
    let mut sc = [0u8; 8];
    sc.copy_from_slice(&challenge[24..32]);
    let NegToken::Resp(r2) = spnego::parse(security_buffer(&ss2_req, true)).unwrap() else {
        panic!("expected NegTokenResp")
    };
    let auth = r2.response_token.unwrap();
    let v = verify_authenticate(negotiate, challenge, &sc, auth, &creds).unwrap();
    assert_eq!(v.user, "alice");
    let ours = check_mech_list_mic(&v, r2.mech_list_mic.unwrap(), init.mech_types_der).unwrap();
    let NegToken::Resp(r3) = spnego::parse(security_buffer(&ss2_resp, false)).unwrap() else {
        panic!("expected NegTokenResp")
    };
    assert_eq!(r3.neg_state, Some(neg_state::ACCEPT_COMPLETED));
    assert_eq!(r3.mech_list_mic.unwrap(), &ours[..]);

    let mut h = PreauthHash::new();
    for m in [&neg_req, &neg_resp, &ss1_req, &ss1_resp, &ss2_req] {
        h.update(m);
    }
    let keys = SessionKeys::derive(
        &v.session_key,
        KeyDialect::Smb311 {
            preauth_hash: *h.value(),
        },
        None,
    );
    assert_eq!(GOOD_SIGNING_ALG, SigningAlgorithm::AesGmac.wire_id());
    let signer = SigningKey::new(SigningAlgorithm::AesGmac, keys.signing());
    signer.verify(&ss2_resp).unwrap();
    // And a wrong key does not verify it.
    let other = SessionKeys::derive(
        &[0; 16],
        KeyDialect::Smb311 {
            preauth_hash: *h.value(),
        },
        None,
    );
    assert!(SigningKey::new(SigningAlgorithm::AesGmac, other.signing())
        .verify(&ss2_resp)
        .is_err());

    // The same client with a wrong password is refused.
    let c = unhex(WRONG_SS1_REQ);
    let NegToken::Init(init) = spnego::parse(security_buffer(&c, true)).unwrap() else {
        panic!()
    };
    let s = unhex(WRONG_SS1_RESP);
    let NegToken::Resp(r1) = spnego::parse(security_buffer(&s, false)).unwrap() else {
        panic!()
    };
    let challenge = r1.response_token.unwrap();
    sc.copy_from_slice(&challenge[24..32]);
    let c2 = unhex(WRONG_SS2_REQ);
    let NegToken::Resp(r2) = spnego::parse(security_buffer(&c2, true)).unwrap() else {
        panic!()
    };
    assert_eq!(
        verify_authenticate(
            init.mech_token.unwrap(),
            challenge,
            &sc,
            r2.response_token.unwrap(),
            &creds
        ),
        Err(AuthError::LogonFailure)
    );
    // ... which is what smbd answered too.
    let s2 = unhex(WRONG_SS2_RESP);
    assert_eq!(
        u32::from_le_bytes([s2[8], s2[9], s2[10], s2[11]]),
        AuthError::LogonFailure.nt_status()
    );
    // ... which is what smbd answered too.
    let s2 = unhex(WRONG_SS2_RESP);
    assert_eq!(
        u32::from_le_bytes([s2[8], s2[9], s2[10], s2[11]]),
        AuthError::LogonFailure.nt_status()
    );
}

#[path = "samba_matrix.rs"]
mod samba_matrix;

/// For every dialect and cipher smbclient and smbd agree on, our whole chain reproduces smbd's
/// keys: NTLMv2 verification yields the session key, the preauth hash and KDF yield the
/// signing key that verifies smbd's signed final SESSION_SETUP response (HMAC-SHA256 for 2.1,
/// AES-CMAC for 3.0 and forced in 3.1.1, AES-GMAC otherwise), and the cipher keys open the
/// first sealed frame in each direction (AES-128-CCM for 3.0; all four ciphers for 3.1.1,
/// including the 256-bit ones).
#[test]
fn samba_dialect_and_cipher_matrix() {
    use crate::crypto::{
        Cipher, CipherKey, KeyDialect, PreauthHash, SessionKeys, SigningAlgorithm, SigningKey,
        TRANSFORM_HEADER_LEN,
    };
    let creds = OneUser {
        user: "alice",
        password: "Secret#123",
    };
    assert_eq!(samba_matrix::CAPTURES.len(), 8);
    let mut sealed_checked = 0;
    for cap in samba_matrix::CAPTURES {
        let m = cap.messages.map(unhex);
        let NegToken::Init(init) = spnego::parse(security_buffer(&m[2], true)).unwrap() else {
            panic!("{}", cap.name)
        };
        let NegToken::Resp(r1) = spnego::parse(security_buffer(&m[3], false)).unwrap() else {
            panic!("{}", cap.name)
        };
        let challenge = r1.response_token.unwrap();
        let mut sc = [0u8; 8];
        sc.copy_from_slice(&challenge[24..32]);
        let NegToken::Resp(r2) = spnego::parse(security_buffer(&m[4], true)).unwrap() else {
            panic!("{}", cap.name)
        };
        let v = verify_authenticate(
            init.mech_token.unwrap(),
            challenge,
            &sc,
            r2.response_token.unwrap(),
            &creds,
        )
        .unwrap();
        let cipher = Cipher::from_wire_id(cap.cipher);
        let (dialect, alg) = match cap.dialect {
            0x0202 | 0x0210 => (KeyDialect::Smb2, SigningAlgorithm::HmacSha256),
            0x0300 | 0x0302 => (KeyDialect::Smb30, SigningAlgorithm::AesCmac),
            0x0311 => {
                let mut h = PreauthHash::new();
                for msg in &m[..5] {
                    h.update(msg);
                }
                let alg = SigningAlgorithm::from_wire_id(cap.signing_alg)
                    .unwrap_or(SigningAlgorithm::AesCmac);
                (
                    KeyDialect::Smb311 {
                        preauth_hash: *h.value(),
                    },
                    alg,
                )
            }
            d => panic!("unexpected dialect {d:#x}"),
        };
        let keys = SessionKeys::derive(&v.session_key, dialect, cipher);
        let flags = u32::from_le_bytes([m[5][16], m[5][17], m[5][18], m[5][19]]);
        assert_ne!(flags & 0x8, 0, "{}: final response not signed", cap.name);
        SigningKey::new(alg, keys.signing())
            .verify(&m[5])
            .unwrap_or_else(|e| panic!("{}: {e}", cap.name));
        // A session that negotiated a cipher but only signed (smb3_11_cmac) has no sealed frames.
        if let (Some(cipher), false) = (cipher, cap.client_sealed.is_empty()) {
            for (frame, key, what) in [
                (cap.client_sealed, keys.decryption().unwrap(), "client"),
                (cap.server_sealed, keys.encryption().unwrap(), "server"),
            ] {
                let mut frame = unhex(frame);
                let (h, msg) = frame.split_at_mut(TRANSFORM_HEADER_LEN);
                CipherKey::new(cipher, key)
                    .unwrap()
                    .open(h, msg)
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", cap.name));
                assert_eq!(&msg[..4], b"\xfeSMB", "{} {what}", cap.name);
                sealed_checked += 1;
            }
        }
    }
    assert_eq!(sealed_checked, 10);
}

/// `smbclient -N -L` against smbd (captured on loopback): smbclient first tries the Unix
/// user ("root") with an empty NT response, which smbd refuses with STATUS_LOGON_FAILURE, then
/// logs on anonymously (empty user and responses, NTLMSSP_ANONYMOUS). We refuse the first
/// the same way, report the second as anonymous, and answer with smbd's exact final token.
#[test]
fn smbclient_anonymous_logon_matches_smbd() {
    const NEGOTIATE: &str = "604806062b0601050502a03e303ca00e300c060a2b06010401823702020aa22a0428\
        4e544c4d53535000010000001582086200000000280000000000000028000000060100000000000f";
    const AUTH_ROOT_EMPTY: &str = "a181a33081a0a281890481864e544c4d53535000030000000000000058000000\
        00000000580000001200120058000000080008006a0000000400040072000000100010007600000015820062060100\
        000000000f78de1d553b1c8a46ef93e17832a33a9457004f0052004b00470052004f005500500072006f006f007400\
        56004d001a0fe4cd619aca46a7921ea52cbdb108a3120410010000005ea3611c0d1602a69ab72cfd";
    const AUTH_ANONYMOUS: &str =
        "a16e306ca26a04684e544c4d535350000300000000000000580000000000000058\
        000000000000005800000000000000580000000000000058000000100010005800000015\
        8a0062060100000000000f0fc0f3300ac4276b0517a784df4dfa9ea75decb4ae96b05404da42bf1b65d583";
    const SMBD_FINAL: &str = "a1073005a0030a0100";
    let creds = OneUser {
        user: "root",
        password: "whatever",
    };
    let mut srv = NtlmServer::new([5; 8], 0, names());
    srv.step(&unhex(NEGOTIATE), &creds).unwrap();
    assert_eq!(
        srv.step(&unhex(AUTH_ROOT_EMPTY), &creds),
        Err(AuthError::Refused("NTLMv1 or malformed NT response"))
    );
    assert_eq!(
        AuthError::Refused("").nt_status(),
        AuthError::LogonFailure.nt_status()
    );
    let mut srv = NtlmServer::new([5; 8], 0, names());
    srv.step(&unhex(NEGOTIATE), &creds).unwrap();
    let AuthStep::Done {
        token,
        user,
        anonymous,
        ..
    } = srv.step(&unhex(AUTH_ANONYMOUS), &creds).unwrap()
    else {
        panic!("expected Done")
    };
    assert!(anonymous);
    assert!(user.is_empty());
    assert_eq!(hex::encode(token), SMBD_FINAL);
}
