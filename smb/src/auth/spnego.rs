//! SPNEGO (RFC 4178, MS-SPNG) tokens: what the server advertises in the NEGOTIATE response
//! (NegTokenInit2), what the client sends (NegTokenInit, then NegTokenResp), and what the server
//! answers (NegTokenResp).

use super::der::{self, expect_tlv, read_tlv, tag, tlv};
use super::AuthError;

/// DER contents of the SPNEGO OID 1.3.6.1.5.5.2.
pub const OID_SPNEGO: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x02];
/// DER contents of the NTLMSSP OID 1.3.6.1.4.1.311.2.2.10.
pub const OID_NTLMSSP: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x82, 0x37, 0x02, 0x02, 0x0a];
/// Most mechanism OIDs we read from a client's mechTypes list.
pub const MAX_MECH_TYPES: usize = 16;
/// The negHints hintName MS-SPNG 2.2.1 says servers send.
pub const NEG_HINT_NAME: &[u8] = b"not_defined_in_RFC4178@please_ignore";

/// NegState values (RFC 4178 4.2.2).
pub mod neg_state {
    /// accept-completed.
    pub const ACCEPT_COMPLETED: u8 = 0;
    /// accept-incomplete.
    pub const ACCEPT_INCOMPLETE: u8 = 1;
    /// reject.
    pub const REJECT: u8 = 2;
    /// request-mic.
    pub const REQUEST_MIC: u8 = 3;
}

/// A client's NegTokenInit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NegTokenInit<'a> {
    /// Contents of each mechanism OID, in the client's order of preference.
    pub mech_types: Vec<&'a [u8]>,
    /// The complete DER of the mechTypes SEQUENCE OF: what mechListMIC is computed over.
    pub mech_types_der: &'a [u8],
    /// The optimistic token for the first mechanism, if any.
    pub mech_token: Option<&'a [u8]>,
    /// mechListMIC, if any (unusual in an initial token).
    pub mech_list_mic: Option<&'a [u8]>,
}

/// A NegTokenResp (either direction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NegTokenResp<'a> {
    /// negState, if present.
    pub neg_state: Option<u8>,
    /// supportedMech OID contents, if present.
    pub supported_mech: Option<&'a [u8]>,
    /// responseToken: the mechanism's token.
    pub response_token: Option<&'a [u8]>,
    /// mechListMIC.
    pub mech_list_mic: Option<&'a [u8]>,
}

/// Any SPNEGO token a client can send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NegToken<'a> {
    /// The first token of an exchange.
    Init(NegTokenInit<'a>),
    /// A continuation token.
    Resp(NegTokenResp<'a>),
}

/// Parses a client SPNEGO token: `[APPLICATION 0] { OID spnego, [0] NegTokenInit }`, a bare
/// `[0] NegTokenInit`, or `[1] NegTokenResp`. Trailing bytes after the token are ignored, as
/// Windows does.
pub fn parse(token: &[u8]) -> Result<NegToken<'_>, AuthError> {
    let (outer, _) = read_tlv(token)?;
    match outer.tag {
        tag::APPLICATION_0 => {
            let (oid, rest) = expect_tlv(outer.value, tag::OID, "SPNEGO: missing mech OID")?;
            if oid.value != OID_SPNEGO {
                return Err(AuthError::UnsupportedMech);
            }
            let (inner, _) = expect_tlv(rest, tag::context(0), "SPNEGO: expected NegTokenInit")?;
            parse_init(inner.value).map(NegToken::Init)
        }
        t if t == tag::context(0) => parse_init(outer.value).map(NegToken::Init),
        t if t == tag::context(1) => parse_resp(outer.value).map(NegToken::Resp),
        _ => Err(AuthError::Malformed("SPNEGO: unknown token type")),
    }
}

fn parse_init(body: &[u8]) -> Result<NegTokenInit<'_>, AuthError> {
    let (seq, _) = expect_tlv(body, tag::SEQUENCE, "NegTokenInit: expected SEQUENCE")?;
    let mut init = NegTokenInit {
        mech_types: Vec::new(),
        mech_types_der: &[],
        mech_token: None,
        mech_list_mic: None,
    };
    let mut rest = seq.value;
    let mut saw_mech_types = false;
    while !rest.is_empty() {
        let (field, next) = read_tlv(rest)?;
        rest = next;
        match field.tag {
            t if t == tag::context(0) => {
                let (list, _) = expect_tlv(
                    field.value,
                    tag::SEQUENCE,
                    "mechTypes: expected SEQUENCE OF",
                )?;
                init.mech_types_der = list.raw;
                let mut items = list.value;
                while !items.is_empty() {
                    if init.mech_types.len() >= MAX_MECH_TYPES {
                        return Err(AuthError::TooLarge("mechTypes"));
                    }
                    let (oid, next) = expect_tlv(items, tag::OID, "mechTypes: expected OID")?;
                    init.mech_types.push(oid.value);
                    items = next;
                }
                saw_mech_types = true;
            }
            t if t == tag::context(1) => {} // reqFlags: ignored, as MS-SPNG allows.
            t if t == tag::context(2) => {
                let (s, _) = expect_tlv(
                    field.value,
                    tag::OCTET_STRING,
                    "mechToken: expected OCTET STRING",
                )?;
                init.mech_token = Some(s.value);
            }
            t if t == tag::context(3) => {
                // In a client's NegTokenInit [3] is mechListMIC (an OCTET STRING); NegTokenInit2
                // reuses [3] for negHints (a SEQUENCE), which only servers send: skip that.
                if let Ok((s, _)) = expect_tlv(field.value, tag::OCTET_STRING, "") {
                    init.mech_list_mic = Some(s.value);
                }
            }
            t if t == tag::context(4) => {
                let (s, _) = expect_tlv(
                    field.value,
                    tag::OCTET_STRING,
                    "mechListMIC: expected OCTET STRING",
                )?;
                init.mech_list_mic = Some(s.value);
            }
            _ => return Err(AuthError::Malformed("NegTokenInit: unknown field")),
        }
    }
    if !saw_mech_types {
        return Err(AuthError::Malformed("NegTokenInit: no mechTypes"));
    }
    Ok(init)
}

fn parse_resp(body: &[u8]) -> Result<NegTokenResp<'_>, AuthError> {
    let (seq, _) = expect_tlv(body, tag::SEQUENCE, "NegTokenResp: expected SEQUENCE")?;
    let mut resp = NegTokenResp::default();
    let mut rest = seq.value;
    while !rest.is_empty() {
        let (field, next) = read_tlv(rest)?;
        rest = next;
        match field.tag {
            t if t == tag::context(0) => {
                let (e, _) = expect_tlv(
                    field.value,
                    tag::ENUMERATED,
                    "negState: expected ENUMERATED",
                )?;
                match e.value {
                    [v] => resp.neg_state = Some(*v),
                    _ => return Err(AuthError::Malformed("negState: bad length")),
                }
            }
            t if t == tag::context(1) => {
                let (o, _) = expect_tlv(field.value, tag::OID, "supportedMech: expected OID")?;
                resp.supported_mech = Some(o.value);
            }
            t if t == tag::context(2) => {
                let (s, _) = expect_tlv(
                    field.value,
                    tag::OCTET_STRING,
                    "responseToken: expected OCTET STRING",
                )?;
                resp.response_token = Some(s.value);
            }
            t if t == tag::context(3) => {
                let (s, _) = expect_tlv(
                    field.value,
                    tag::OCTET_STRING,
                    "mechListMIC: expected OCTET STRING",
                )?;
                resp.mech_list_mic = Some(s.value);
            }
            _ => return Err(AuthError::Malformed("NegTokenResp: unknown field")),
        }
    }
    Ok(resp)
}

/// The DER `SEQUENCE OF MechType` containing only NTLMSSP.
pub fn ntlm_mech_types_der() -> Vec<u8> {
    tlv(tag::SEQUENCE, &tlv(tag::OID, OID_NTLMSSP))
}

/// The NegTokenInit2 a server puts in its NEGOTIATE response (MS-SPNG 2.2.1): mechTypes =
/// {NTLMSSP} and the customary negHints.
pub fn build_neg_token_init2() -> Vec<u8> {
    let mut fields = tlv(tag::context(0), &ntlm_mech_types_der());
    let hint = tlv(
        tag::SEQUENCE,
        &tlv(tag::context(0), &tlv(tag::GENERAL_STRING, NEG_HINT_NAME)),
    );
    der::write_tlv(&mut fields, tag::context(3), &hint);
    let init = tlv(tag::context(0), &tlv(tag::SEQUENCE, &fields));
    let mut body = tlv(tag::OID, OID_SPNEGO);
    body.extend_from_slice(&init);
    tlv(tag::APPLICATION_0, &body)
}

/// Builds a NegTokenResp with whichever fields are given.
pub fn build_resp(resp: &NegTokenResp<'_>) -> Vec<u8> {
    let mut fields = Vec::new();
    if let Some(s) = resp.neg_state {
        der::write_tlv(&mut fields, tag::context(0), &tlv(tag::ENUMERATED, &[s]));
    }
    if let Some(m) = resp.supported_mech {
        der::write_tlv(&mut fields, tag::context(1), &tlv(tag::OID, m));
    }
    if let Some(t) = resp.response_token {
        der::write_tlv(&mut fields, tag::context(2), &tlv(tag::OCTET_STRING, t));
    }
    if let Some(m) = resp.mech_list_mic {
        der::write_tlv(&mut fields, tag::context(3), &tlv(tag::OCTET_STRING, m));
    }
    tlv(tag::context(1), &tlv(tag::SEQUENCE, &fields))
}

/// Builds a NegTokenInit as a client would (used by tests and by anyone driving the server).
pub fn build_init(mech_types: &[&[u8]], mech_token: Option<&[u8]>) -> Vec<u8> {
    let mut oids = Vec::new();
    for m in mech_types {
        der::write_tlv(&mut oids, tag::OID, m);
    }
    let mut fields = tlv(tag::context(0), &tlv(tag::SEQUENCE, &oids));
    if let Some(t) = mech_token {
        der::write_tlv(&mut fields, tag::context(2), &tlv(tag::OCTET_STRING, t));
    }
    let init = tlv(tag::context(0), &tlv(tag::SEQUENCE, &fields));
    let mut body = tlv(tag::OID, OID_SPNEGO);
    body.extend_from_slice(&init);
    tlv(tag::APPLICATION_0, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).unwrap()
    }

    /// The client's first SESSION_SETUP token from the MS preauth-integrity blog capture
    /// (Windows 10): NegTokenInit with mechTypes {NTLMSSP} and an NTLM NEGOTIATE.
    #[test]
    fn parses_windows_neg_token_init() {
        let tok = unhex(
            "604806062B0601050502A03E303CA00E300C060A2B06010401823702020AA22A\
             04284E544C4D5353500001000000978208E200000000000000000000000000000000060380250000000F",
        );
        let NegToken::Init(init) = parse(&tok).unwrap() else {
            panic!("expected init")
        };
        assert_eq!(init.mech_types, vec![OID_NTLMSSP]);
        assert_eq!(init.mech_types_der, &ntlm_mech_types_der()[..]);
        assert_eq!(&init.mech_token.unwrap()[..8], b"NTLMSSP\0");
        assert_eq!(build_init(&[OID_NTLMSSP], init.mech_token), tok);
    }

    /// The server's NegTokenResp carrying the CHALLENGE from the same capture.
    #[test]
    fn parses_and_rebuilds_windows_neg_token_resp() {
        let tok = unhex(
            "A181B03081ADA0030A0101A10C060A2B06010401823702020AA281970481944E544C4D53535000020000000C000C0038\
             00000015828AE20D1D8BA31179D008000000000000000050005000440000000A0092270000000F53\
             005500540033003100310002000C0053005500540033003100310001000C00530055005400330031\
             00310004000C0053005500540033003100310003000C0053005500540033003100310007000800A1\
             A1F5ADCBAED00100000000",
        );
        let NegToken::Resp(resp) = parse(&tok).unwrap() else {
            panic!("expected resp")
        };
        assert_eq!(resp.neg_state, Some(neg_state::ACCEPT_INCOMPLETE));
        assert_eq!(resp.supported_mech, Some(OID_NTLMSSP));
        assert_eq!(build_resp(&resp), tok);
    }

    /// The final NegTokenResp of the blog capture: accept-completed plus mechListMIC.
    #[test]
    fn parses_final_resp_with_mic() {
        let tok = unhex("A11B3019A0030A0100A3120410010000003932A87523AB660100000000");
        let NegToken::Resp(resp) = parse(&tok).unwrap() else {
            panic!("expected resp")
        };
        assert_eq!(resp.neg_state, Some(neg_state::ACCEPT_COMPLETED));
        assert_eq!(resp.mech_list_mic.unwrap().len(), 16);
        assert_eq!(build_resp(&resp), tok);
    }

    #[test]
    fn neg_token_init2_shape() {
        let blob = build_neg_token_init2();
        let NegToken::Init(init) = parse(&blob).unwrap() else {
            panic!("expected init")
        };
        assert_eq!(init.mech_types, vec![OID_NTLMSSP]);
        assert!(init.mech_token.is_none());
        assert!(init.mech_list_mic.is_none());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for t in [
            &b""[..],
            &[0x60, 0x02, 0x06, 0x00],
            &[0xa1, 0x03, 0x30, 0x01, 0x00],
            &[0xa0, 0x02, 0x30, 0x00],
            &[
                0x60, 0x0a, 0x06, 0x06, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x02, 0xa0, 0x00,
            ],
        ] {
            assert!(parse(t).is_err(), "{t:02x?}");
        }
    }
}
