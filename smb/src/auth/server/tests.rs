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
