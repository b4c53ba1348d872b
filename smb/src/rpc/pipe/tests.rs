use super::*;
use crate::rpc::ShareKind;

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap()
}

// A loopback capture of `smbclient -L //127.0.0.1 -p PORT -m SMB3_11` (Debian 12, 4.17)
// against Samba 4.17 smbd with shares "data" and "scratch": the two FSCTL_PIPE_TRANSCEIVE
// inputs smbclient sent on \PIPE\srvsvc and the outputs smbd returned.
const SMBCLIENT_BIND: &str = "05000b03100000004800000001000000b810b810000000000100000000000100\
    c84f324b7016d30112785a47bf6ee18803000000045d888aeb1cc9119fe808002b10486002000000";
const SMBD_BIND_ACK: &str = "05000c03100000004400000001000000b810b810f98000000d005c706970655c\
    73727673766300000100000000000000045d888aeb1cc9119fe808002b10486002000000";
const SMBCLIENT_ENUM: &str = "05000003100000005c000000020000004400000000000f00000002000a000000\
    000000000a0000003100320037002e0030002e0030002e00310000000100000001000000040002000000000000\
    000000ffffffff0800020000000000";
const SMBD_ENUM_RESPONSE: &str = "050002031000000064010000020000004c01000000000000010000000100\
    00000c0002000300000010000200030000001400020000000000180002001c0002000000000020000200240002\
    0003000080280002000500000000000000050000006400610074006100000000001500000000000000150000004400\
    610074006100200073006800610072006500200066006f00720020007400650073007400730000000000080000\
    000000000008000000730063007200610074006300680000000d000000000000000d0000005300650063006f00\
    6e006400200073006800610072006500000000000500000000000000050000004900500043002400000000002300\
    000000000000230000004900500043002000530065007200760069006300650020002800530061006d0062006100\
    200034002e00310037002e00310032002d00440065006200690061006e00290000000000030000002c00020000\
    00000000000000";

fn samba_shares() -> Vec<ShareEntry> {
    vec![
        ShareEntry {
            name: "data".into(),
            kind: ShareKind::Disk,
            comment: "Data share for tests".into(),
        },
        ShareEntry {
            name: "scratch".into(),
            kind: ShareKind::Disk,
            comment: "Second share".into(),
        },
        ShareEntry {
            name: "IPC$".into(),
            kind: ShareKind::Ipc,
            comment: "IPC Service (Samba 4.17.12-Debian)".into(),
        },
    ]
}

/// Referent ids are arbitrary non-zero values (Samba starts at 0x2000c, Windows and we at
/// 0x20000); rewrite every aligned 0x0002xxxx word of a PDU's stub to its ordinal.
fn normalize_referents(pdu: &[u8]) -> Vec<u8> {
    let mut out = pdu.to_vec();
    let mut n = 1u32;
    let mut i = 24;
    while i + 4 <= out.len() {
        let w = u32::from_le_bytes([out[i], out[i + 1], out[i + 2], out[i + 3]]);
        if w & 0xFFFF_0000 == 0x0002_0000 {
            out[i..i + 4].copy_from_slice(&n.to_le_bytes());
            n += 1;
        }
        i += 4;
    }
    out
}

#[test]
fn smbclient_share_enum_matches_smbd() {
    let mut pipe = SrvsvcPipe::new(samba_shares());
    let ack = pipe
        .transact(&unhex(SMBCLIENT_BIND), 4280)
        .unwrap()
        .unwrap();
    assert!(!ack.more);
    let mut expected = unhex(SMBD_BIND_ACK);
    // smbd's association group and its lower-case secondary address are its own choices.
    expected[20..24].copy_from_slice(&ASSOC_GROUP_ID.to_le_bytes());
    expected[26..38].copy_from_slice(SECONDARY_ADDRESS.as_bytes());
    assert_eq!(hex::encode(&ack.data), hex::encode(&expected));

    let resp = pipe
        .transact(&unhex(SMBCLIENT_ENUM), 4280)
        .unwrap()
        .unwrap();
    assert!(!resp.more);
    assert_eq!(
        hex::encode(normalize_referents(&resp.data)),
        hex::encode(normalize_referents(&unhex(SMBD_ENUM_RESPONSE)))
    );
    assert!(pipe.read(100).is_none());
}

#[test]
fn small_reads_return_buffer_overflow_then_the_rest() {
    let mut pipe = SrvsvcPipe::new(samba_shares());
    pipe.write(&unhex(SMBCLIENT_BIND)).unwrap();
    let full_len = pipe.pending_output();
    let a = pipe.read(10).unwrap();
    assert!(a.more);
    assert_eq!(a.data.len(), 10);
    let b = pipe.read(4096).unwrap();
    assert!(!b.more);
    assert_eq!(a.data.len() + b.data.len(), full_len);
    assert_eq!(pipe.pending_output(), 0);
}

#[test]
fn split_writes_and_fragmented_requests_reassemble() {
    let mut pipe = SrvsvcPipe::new(samba_shares());
    let bind = unhex(SMBCLIENT_BIND);
    pipe.write(&bind[..7]).unwrap();
    assert!(pipe.read(10).is_none());
    pipe.write(&bind[7..]).unwrap();
    pipe.read(4280).unwrap();
    // Split the enum request stub across two request fragments.
    let req = unhex(SMBCLIENT_ENUM);
    let stub = &req[24..];
    let (s1, s2) = stub.split_at(20);
    let mut f1 = req[..24].to_vec();
    f1[3] = pdu::pfc::FIRST_FRAG;
    f1.extend_from_slice(s1);
    let l1 = (f1.len() as u16).to_le_bytes();
    f1[8..10].copy_from_slice(&l1);
    let mut f2 = req[..24].to_vec();
    f2[3] = pdu::pfc::LAST_FRAG;
    f2.extend_from_slice(s2);
    let l2 = (f2.len() as u16).to_le_bytes();
    f2[8..10].copy_from_slice(&l2);
    pipe.write(&f1).unwrap();
    assert!(pipe.read(10).is_none());
    pipe.write(&f2).unwrap();
    let whole = pipe.read(4280).unwrap();
    assert_eq!(
        normalize_referents(&whole.data),
        normalize_referents(&unhex(SMBD_ENUM_RESPONSE))
    );
}

#[test]
fn faults_for_unbound_context_unknown_opnum_and_bad_stub() {
    let mut pipe = SrvsvcPipe::new(samba_shares());
    let req = unhex(SMBCLIENT_ENUM);
    // Request before bind: context mismatch.
    let r = pipe.transact(&req, 4280).unwrap().unwrap();
    assert_eq!(r.data[2], ptype::FAULT);
    assert_eq!(&r.data[24..28], &fault::CONTEXT_MISMATCH.to_le_bytes());
    pipe.transact(&unhex(SMBCLIENT_BIND), 4280).unwrap();
    let mut unknown = req.clone();
    unknown[22] = 99;
    let r = pipe.transact(&unknown, 4280).unwrap().unwrap();
    assert_eq!(&r.data[24..28], &fault::OP_RNG_ERROR.to_le_bytes());
    let mut short = req[..30].to_vec();
    short[8..10].copy_from_slice(&30u16.to_le_bytes());
    let r = pipe.transact(&short, 4280).unwrap().unwrap();
    assert_eq!(&r.data[24..28], &fault::NDR.to_le_bytes());
    // Garbage that is not DCE/RPC makes the pipe unusable: an error, not a panic.
    assert!(pipe.write(&[0xff; 32]).is_err());
    // NetrServerGetInfo without server info configured: op-range fault.
    let mut pipe = SrvsvcPipe::new(samba_shares());
    pipe.transact(&unhex(SMBCLIENT_BIND), 4280).unwrap();
    let mut server_info = req.clone();
    server_info[22] = 21;
    let r = pipe.transact(&server_info, 4280).unwrap().unwrap();
    assert_eq!(&r.data[24..28], &fault::OP_RNG_ERROR.to_le_bytes());
}

#[test]
fn bind_rejects_other_interfaces_and_ndr64_only() {
    let mut pipe = SrvsvcPipe::new(samba_shares());
    let mut other = unhex(SMBCLIENT_BIND);
    other[32] ^= 0xff; // abstract syntax uuid
    let r = pipe.transact(&other, 4280).unwrap().unwrap();
    assert_eq!(r.data[2], ptype::BIND_ACK);
    let n = r.data.len();
    assert_eq!(&r.data[n - 24..n - 20], &[2, 0, 1, 0]);
    let mut ndr64 = unhex(SMBCLIENT_BIND);
    ndr64[52] ^= 0xff; // transfer syntax uuid
    let r = pipe.transact(&ndr64, 4280).unwrap().unwrap();
    let n = r.data.len();
    assert_eq!(&r.data[n - 24..n - 20], &[2, 0, 2, 0]);
}

/// Deterministic mutations of the captured PDUs never panic and never grow state unboundedly.
#[test]
fn mutated_pdus_never_panic() {
    let inputs = [unhex(SMBCLIENT_BIND), unhex(SMBCLIENT_ENUM)];
    let mut seed = 0x9e37_79b9u32;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        seed
    };
    for _ in 0..5000 {
        let mut pipe = SrvsvcPipe::new(samba_shares());
        let _ = pipe.transact(&inputs[0], 4280);
        let mut m = inputs[(rnd() % 2) as usize].clone();
        for _ in 0..(rnd() % 4 + 1) {
            let i = rnd() as usize % m.len();
            m[i] = rnd() as u8;
        }
        let _ = pipe.write(&m);
        while pipe.read(rnd() as usize % 300 + 1).is_some() {}
    }
}

#[path = "impacket_vectors.rs"]
mod impacket_vectors;

/// Requests built by impacket's srvsvc client (every level of all three calls) still get exactly
/// the replies impacket decoded and checked when the vectors were recorded.
#[test]
fn impacket_requests_get_the_replies_impacket_accepted() {
    let shares = vec![
        ShareEntry {
            name: "datasets".into(),
            kind: ShareKind::Disk,
            comment: "Training data".into(),
        },
        ShareEntry {
            name: "checkpoints".into(),
            kind: ShareKind::Disk,
            comment: String::new(),
        },
        ShareEntry {
            name: "IPC$".into(),
            kind: ShareKind::Ipc,
            comment: "IPC Service (Quarry)".into(),
        },
    ];
    let mut pipe = SrvsvcPipe::new(shares).with_server_info("QUARRY", "Quarry storage appliance");
    assert_eq!(impacket_vectors::IMPACKET_EXCHANGES.len(), 14);
    for (req, expected) in impacket_vectors::IMPACKET_EXCHANGES {
        pipe.write(&unhex(req)).unwrap();
        let mut got = Vec::new();
        while let Some(r) = pipe.read(1 << 20) {
            got.extend_from_slice(&r.data);
        }
        assert_eq!(hex::encode(got), *expected);
    }
}
