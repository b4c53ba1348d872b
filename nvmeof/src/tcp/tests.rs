//! Byte-for-byte tests, including vectors captured from Linux 6.1 nvme-tcp and nvmet-tcp.

use super::*;
use crate::spec::fabrics::{ConnectCmd, ConnectData, FCTYPE_CONNECT};
use crate::spec::{admin_opc, Cqe, Sgl, Sqe, SGL_ID_INCAPSULE, SGL_ID_TRANSPORT};

/// Parses the shared vector format: `#` comments, hex bytes separated by spaces.
pub(crate) fn vector(text: &str) -> Vec<u8> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace())
        .map(|h| u8::from_str_radix(h, 16).unwrap())
        .collect()
}

const ICREQ: &str = include_str!("../../vectors/icreq.hex");
const ICREQ_DGST: &str = include_str!("../../vectors/icreq-digest.hex");
const CONNECT: &str = include_str!("../../vectors/connect-capsule.hex");
const CONNECT_DGST: &str = include_str!("../../vectors/connect-capsule-digest.hex");
const ICRESP: &str = include_str!("../../vectors/target-icresp.hex");
const ICRESP_DGST: &str = include_str!("../../vectors/target-digest-icresp.hex");
const CONN_RESP: &str = include_str!("../../vectors/target-connect-resp.hex");
const CONN_RESP_DGST: &str = include_str!("../../vectors/target-digest-connect-resp.hex");

const BOTH: Digests = Digests {
    header: true,
    data: true,
};

fn ctx(d: Digests) -> DecodeContext {
    DecodeContext {
        digests: d,
        ..Default::default()
    }
}

#[test]
fn linux_icreq_decodes() {
    for (text, dgst) in [(ICREQ, 0), (ICREQ_DGST, 3)] {
        let b = vector(text);
        assert_eq!(b.len(), 128);
        assert_eq!(frame_len(&b, &ctx(Digests::NONE)).unwrap(), Some(128));
        let Pdu::IcReq(r) = decode(&b, &ctx(Digests::NONE)).unwrap() else {
            panic!("not an ICReq")
        };
        assert_eq!(
            r,
            IcReq {
                pfv: 0,
                hpda: 0,
                dgst,
                maxr2t: 0
            }
        );
        // Our encoder produces the same bytes.
        let mut out = Vec::new();
        encode_icreq(&mut out, &r);
        assert_eq!(out, b);
    }
}

#[test]
fn icresp_matches_nvmet_bytes() {
    for (text, dgst) in [(ICRESP, 0), (ICRESP_DGST, 3)] {
        let want = vector(text);
        let mut out = Vec::new();
        encode_icresp(
            &mut out,
            &IcResp {
                pfv: 0,
                cpda: 0,
                dgst,
                maxh2cdata: 0x40_0000,
            },
        );
        assert_eq!(out, want);
        assert!(matches!(
            decode(&want, &ctx(Digests::NONE)).unwrap(),
            Pdu::IcResp(IcResp {
                maxh2cdata: 0x40_0000,
                ..
            })
        ));
    }
}

fn check_connect(pdu: Pdu<'_>) {
    let Pdu::CapsuleCmd(c) = pdu else {
        panic!("not a capsule")
    };
    assert_eq!(c.sqe.opcode(), admin_opc::FABRICS);
    assert_eq!(c.sqe.fctype(), FCTYPE_CONNECT);
    assert_eq!(c.sqe.cid(), 0);
    assert_eq!(
        c.sqe.sgl(),
        Sgl {
            addr: 0,
            len: 1024,
            id: SGL_ID_INCAPSULE
        }
    );
    let cc = ConnectCmd::parse(&c.sqe);
    assert_eq!(
        cc,
        ConnectCmd {
            recfmt: 0,
            qid: 0,
            sqsize: 31,
            cattr: 0,
            kato: 5000
        }
    );
    assert_eq!(c.data.len(), 1024);
    let d = ConnectData::parse(c.data).unwrap();
    assert_eq!(d.cntlid, 0xffff);
    assert_eq!(d.subnqn, "nqn.2024-01.io.lab:tcp-loop");
    assert_eq!(
        d.hostnqn,
        "nqn.2014-08.org.nvmexpress:uuid:06bf3b55-7c17-492b-8648-391f3fcbedea"
    );
    assert_eq!(d.hostid[..4], [0x06, 0xbf, 0x3b, 0x55]);
    assert_eq!(d.to_bytes(), c.data);
}

#[test]
fn linux_connect_capsule_decodes_and_reencodes() {
    let b = vector(CONNECT);
    assert_eq!(b.len(), 1096);
    let pdu = decode(&b, &ctx(Digests::NONE)).unwrap();
    let Pdu::CapsuleCmd(c) = &pdu else { panic!() };
    let mut out = Vec::new();
    encode_capsule_cmd(&mut out, &c.sqe, c.data, Digests::NONE, 0);
    assert_eq!(out, b);
    check_connect(pdu);
}

#[test]
fn linux_connect_capsule_with_digests() {
    let b = vector(CONNECT_DGST);
    assert_eq!(b.len(), 1104);
    let pdu = decode(&b, &ctx(BOTH)).unwrap();
    let Pdu::CapsuleCmd(c) = &pdu else { panic!() };
    let mut out = Vec::new();
    encode_capsule_cmd(&mut out, &c.sqe, c.data, BOTH, 0);
    assert_eq!(out, b);
    check_connect(pdu);
    // Without digests negotiated the same PDU is refused: the flags disagree.
    assert!(matches!(
        decode(&b, &ctx(Digests::NONE)),
        Err(PduError::InvalidHeaderField { offset: 1, .. })
    ));
}

#[test]
fn connect_resp_matches_nvmet_bytes() {
    let cqe = Cqe {
        dw0: 1,
        sqhd: 1,
        ..Default::default()
    };
    for (text, d) in [(CONN_RESP, Digests::NONE), (CONN_RESP_DGST, BOTH)] {
        let want = vector(text);
        let mut out = Vec::new();
        encode_capsule_resp(&mut out, &cqe, d);
        assert_eq!(out, want);
        assert_eq!(
            decode(&want, &ctx(d)).unwrap(),
            Pdu::CapsuleResp(CapsuleResp { cqe })
        );
    }
}

#[test]
fn bad_header_digest_is_reported_with_fes() {
    let mut b = vector(CONNECT_DGST);
    b[10] ^= 1; // inside the SQE, covered by HDGST
    let e = decode(&b, &ctx(BOTH)).unwrap_err();
    assert!(matches!(e, PduError::HeaderDigest { .. }));
    assert_eq!(e.fes(), Some((TermReqFes::HeaderDigestError, 0)));
}

#[test]
fn bad_data_digest_is_detected() {
    let mut b = vector(CONNECT_DGST);
    b[500] ^= 0x80; // inside the connect data
    let e = decode(&b, &ctx(BOTH)).unwrap_err();
    assert!(matches!(e, PduError::DataDigest { .. }));
    assert_eq!(e.fes(), None);
}

#[test]
fn oversized_plen_rejected_before_buffering() {
    let mut b = vector(CONNECT);
    b[4..8].copy_from_slice(&(64u32 << 20).to_le_bytes());
    let e = frame_len(&b[..8], &ctx(Digests::NONE)).unwrap_err();
    assert!(matches!(e, PduError::TooLong { .. }));
    assert_eq!(e.fes(), Some((TermReqFes::InvalidHeaderField, 4)));
}

#[test]
fn hostile_headers_rejected() {
    let base = vector(CONNECT);
    let c = ctx(Digests::NONE);
    // Reserved PDU type.
    let mut b = base.clone();
    b[0] = 0x08;
    assert!(frame_len(&b, &c).is_err());
    // Wrong HLEN.
    let mut b = base.clone();
    b[2] = 24;
    assert!(frame_len(&b, &c).is_err());
    // PDO inside the header.
    let mut b = base.clone();
    b[3] = 8;
    assert!(decode(&b, &c).is_err());
    // PDO past the end.
    let mut b = base.clone();
    b[3] = 0xff;
    b.truncate(200);
    b[4..8].copy_from_slice(&200u32.to_le_bytes());
    assert!(decode(&b, &c).is_err());
    // PLEN shorter than HLEN.
    let mut b = base.clone();
    b[4..8].copy_from_slice(&16u32.to_le_bytes());
    assert!(frame_len(&b, &c).is_err());
    // Truncated frame.
    assert!(matches!(
        decode(&base[..100], &c),
        Err(PduError::Truncated { .. })
    ));
    // ICReq with wrong PLEN.
    let mut ic = vector(ICREQ);
    ic[4] = 200;
    ic.resize(200, 0);
    assert!(decode(&ic, &c).is_err());
}

#[test]
fn data_pdus_round_trip_with_alignment() {
    for d in [Digests::NONE, BOTH] {
        let payload: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        let mut out = Vec::new();
        encode_c2h_data(&mut out, 9, 4096, &payload, true, true, d, 3);
        // HPDA 3 = 16-byte alignment.
        assert_eq!(out[3] as usize % 16, 0);
        let dc = DecodeContext {
            digests: d,
            data_alignment: 3,
            ..Default::default()
        };
        let Pdu::C2hData(p) = decode(&out, &dc).unwrap() else {
            panic!()
        };
        assert_eq!((p.cccid, p.datao, p.data), (9, 4096, &payload[..]));
        assert_eq!(p.flags & (FLAG_LAST_PDU | FLAG_SUCCESS), 0x0c);

        let mut out = Vec::new();
        encode_h2c_data(&mut out, 3, 77, 0, &payload, true, d, 0);
        let Pdu::H2cData(p) = decode(&out, &ctx(d)).unwrap() else {
            panic!()
        };
        assert_eq!((p.cccid, p.ttag, p.data.len()), (3, 77, 5000));

        let mut out = Vec::new();
        let r = R2t {
            cccid: 1,
            ttag: 2,
            r2to: 0,
            r2tl: 8192,
        };
        encode_r2t(&mut out, &r, d);
        assert_eq!(decode(&out, &ctx(d)).unwrap(), Pdu::R2t(r));
    }
}

#[test]
fn datal_mismatch_rejected() {
    let mut out = Vec::new();
    encode_h2c_data(&mut out, 3, 1, 0, &[1, 2, 3, 4], true, Digests::NONE, 0);
    out[16] = 5;
    assert!(matches!(
        decode(&out, &ctx(Digests::NONE)),
        Err(PduError::InvalidHeaderField { offset: 16, .. })
    ));
}

#[test]
fn term_req_round_trip() {
    let mut out = Vec::new();
    let hdr = [0xaau8; 200];
    encode_term_req(&mut out, false, 1, 4, &hdr);
    assert_eq!(out.len(), 152);
    let Pdu::C2hTermReq(t) = decode(&out, &ctx(BOTH)).unwrap() else {
        panic!()
    };
    assert_eq!((t.fes, t.fei, t.data.len()), (1, 4, 128));
}

#[test]
fn capsule_without_data_has_zero_pdo() {
    let mut sqe = Sqe::new(0x02, 5);
    sqe.set_sgl(Sgl {
        addr: 0,
        len: 4096,
        id: SGL_ID_TRANSPORT,
    });
    for d in [Digests::NONE, BOTH] {
        let mut out = Vec::new();
        encode_capsule_cmd(&mut out, &sqe, &[], d, 0);
        assert_eq!(out[3], 0);
        assert_eq!(out.len(), 72 + d.header_len());
        let Pdu::CapsuleCmd(c) = decode(&out, &ctx(d)).unwrap() else {
            panic!()
        };
        assert_eq!(c.sqe, sqe);
        assert!(c.data.is_empty());
    }
}

/// Every digest setting a connection can negotiate: none, header only, both.
const DIGEST_SETTINGS: [Digests; 3] = [
    Digests::NONE,
    Digests {
        header: true,
        data: false,
    },
    BOTH,
];

/// A C2HData sent as head + the data's own buffer + digest is byte for byte the PDU
/// `encode_c2h_data` builds, for every digest setting, host alignment and flag.
#[test]
fn c2h_data_in_pieces_equals_the_whole_pdu() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 253) as u8).collect();
    for d in DIGEST_SETTINGS {
        for hpda in [0u8, 1, 3, 31] {
            for (last, success) in [(true, false), (true, true), (false, false)] {
                let mut whole = Vec::new();
                encode_c2h_data(&mut whole, 9, 4096, &data, last, success, d, hpda);
                let mut pieces = Vec::new();
                let digested =
                    encode_c2h_data_head(&mut pieces, 9, 4096, data.len(), last, success, d, hpda);
                pieces.extend_from_slice(&data);
                if digested {
                    pieces.extend_from_slice(&data_digest(&data));
                }
                assert_eq!(pieces, whole, "{d:?} hpda {hpda} {last} {success}");
                assert_eq!(digested, d.data);
            }
        }
    }
}

/// A CapsuleCmd and an H2CData sent as head + the data's own buffer + digest are byte
/// for byte the PDUs `encode_capsule_cmd` and `encode_h2c_data` build, for every digest
/// setting and controller alignment (the test initiator sends large writes this way).
#[test]
fn host_data_pdus_in_pieces_equal_the_whole_pdus() {
    let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
    let sqe = Sqe::new(crate::spec::io_opc::WRITE, 7);
    let pieces = |head: &mut Vec<u8>, digested: bool| {
        head.extend_from_slice(&data);
        if digested {
            head.extend_from_slice(&data_digest(&data));
        }
        digested
    };
    for d in DIGEST_SETTINGS {
        for cpda in [0u8, 1, 3, 31] {
            let mut whole = Vec::new();
            encode_capsule_cmd(&mut whole, &sqe, &data, d, cpda);
            let mut head = Vec::new();
            let digested = encode_capsule_cmd_head(&mut head, &sqe, data.len(), d, cpda);
            assert_eq!(pieces(&mut head, digested), d.data);
            assert_eq!(head, whole, "capsule {d:?} cpda {cpda}");
            for last in [false, true] {
                let mut whole = Vec::new();
                encode_h2c_data(&mut whole, 9, 3, 8192, &data, last, d, cpda);
                let mut head = Vec::new();
                let digested =
                    encode_h2c_data_head(&mut head, 9, 3, 8192, data.len(), last, d, cpda);
                assert_eq!(pieces(&mut head, digested), d.data);
                assert_eq!(head, whole, "h2c {d:?} cpda {cpda} last {last}");
            }
        }
    }
}

/// `decode_data_head` on the bytes before the data agrees with `decode` of the whole PDU.
fn head_agrees_with_decode(pdu: &[u8], dc: &DecodeContext) {
    let full = decode(pdu, dc);
    let pdo = usize::from(pdu[3]);
    let head = decode_data_head(&pdu[..pdo.max(8)], dc);
    match (&full, &head) {
        (Ok(Pdu::H2cData(d)), Ok(Some(h))) => {
            let of = HeadOf::H2cData {
                cccid: d.cccid,
                ttag: d.ttag,
                datao: d.datao,
            };
            assert_eq!((h.of, h.flags), (of, d.flags));
            assert_eq!(&pdu[h.pdo..h.pdo + h.data_len], d.data);
            assert_eq!((h.plen, h.data_digest), (pdu.len(), dc.digests.data));
        }
        (Ok(Pdu::CapsuleCmd(c)), Ok(Some(h))) => {
            assert_eq!(h.of, HeadOf::CapsuleCmd(c.sqe));
            assert_eq!(&pdu[h.pdo..h.pdo + h.data_len], c.data);
            assert_eq!((h.plen, h.data_digest), (pdu.len(), dc.digests.data));
        }
        // A capsule without data is not a data head.
        (Ok(Pdu::CapsuleCmd(c)), Ok(None)) => assert!(c.data.is_empty()),
        (Err(PduError::DataDigest { .. }), Ok(Some(_))) => {}
        (Err(a), Err(b)) => assert_eq!(a, b),
        other => panic!("head and full decode disagree: {other:?}"),
    }
}

#[test]
fn data_head_matches_the_full_decode_with_and_without_digests() {
    let payload: Vec<u8> = (0..40_000u32).map(|i| (i % 241) as u8).collect();
    for d in [
        Digests::NONE,
        BOTH,
        Digests {
            header: true,
            data: false,
        },
    ] {
        for cpda in [0u8, 3] {
            let dc = DecodeContext {
                digests: d,
                data_alignment: cpda,
                ..Default::default()
            };
            let mut out = Vec::new();
            encode_h2c_data(&mut out, 5, 9, 8192, &payload, false, d, cpda);
            head_agrees_with_decode(&out, &dc);
            let pdo = usize::from(out[3]);
            // Fewer bytes than PDO: not yet.
            assert_eq!(decode_data_head(&out[..pdo - 1], &dc), Ok(None));
            // Broken fields, one at a time: the head rejects what the decoder rejects.
            let mut bad = out.clone();
            bad[16] ^= 1; // DATAL
            head_agrees_with_decode(&bad, &dc);
            let mut bad = out.clone();
            bad[1] |= FLAG_SUCCESS;
            head_agrees_with_decode(&bad, &dc);
            let mut bad = out.clone();
            bad[1] ^= FLAG_DDGSTF;
            head_agrees_with_decode(&bad, &dc);
            if d.header {
                let mut bad = out.clone();
                bad[9] ^= 0x40; // CCCID under the header digest
                assert!(matches!(
                    decode_data_head(&bad[..pdo], &dc),
                    Err(PduError::HeaderDigest { .. })
                ));
                head_agrees_with_decode(&bad, &dc);
            }
            if d.data {
                let mut bad = out.clone();
                let n = bad.len();
                bad[n - 1] ^= 0xff;
                head_agrees_with_decode(&bad, &dc);
            }
        }
    }
    // Command capsules with in-capsule data, and without.
    for d in [Digests::NONE, BOTH] {
        let dc = ctx(d);
        let mut sqe = Sqe::new(0x01, 42);
        sqe.set_sgl(Sgl {
            addr: 0,
            len: payload.len() as u32,
            id: SGL_ID_INCAPSULE,
        });
        let mut out = Vec::new();
        encode_capsule_cmd(&mut out, &sqe, &payload, d, 0);
        head_agrees_with_decode(&out, &dc);
        let mut bad = out.clone();
        bad[1] ^= FLAG_DDGSTF;
        head_agrees_with_decode(&bad, &dc);
        if d.data {
            let n = out.len();
            out[n - 1] ^= 0xff;
            head_agrees_with_decode(&out, &dc);
        }
        let mut empty = Vec::new();
        encode_capsule_cmd(&mut empty, &sqe, &[], d, 0);
        head_agrees_with_decode(&empty, &dc);
    }
    // Other PDU types are not data heads.
    let mut r2t = Vec::new();
    encode_r2t(
        &mut r2t,
        &R2t {
            cccid: 1,
            ttag: 2,
            r2to: 0,
            r2tl: 8192,
        },
        Digests::NONE,
    );
    assert_eq!(decode_data_head(&r2t, &ctx(Digests::NONE)), Ok(None));
}
