//! Differential: the header of an H2CData PDU or of a command capsule with data, decoded
//! alone (`decode_data_head`, what the transport uses to read large write data in place),
//! must agree with `decode` of the complete PDU, on any prefix of it. Whenever the head is accepted, the full decode accepts the same
//! fields or fails only on the data digest, which the transport checks itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_nvmeof::tcp::{self, DecodeContext, Digests, HeadOf, Pdu, PduError};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Some((&cut, bytes)) = rest.split_first() else {
        return;
    };
    let ctx = DecodeContext {
        digests: Digests::from_dgst(sel & 3),
        data_alignment: (sel >> 2) & 0x7,
        ..Default::default()
    };
    let Ok(Some(n)) = tcp::frame_len(bytes, &ctx) else {
        return;
    };
    let Some(frame) = bytes.get(..n) else { return };
    let full = tcp::decode(frame, &ctx);
    // Any prefix the transport may hold when it looks (cut: a fraction of the PDU).
    let k = (n * usize::from(cut) / 255).max(8);
    let Some(prefix) = frame.get(..k) else { return };
    let head = match tcp::decode_data_head(prefix, &ctx) {
        Ok(Some(h)) => h,
        // Not yet (or not H2CData): nothing to compare.
        Ok(None) => return,
        Err(e) => {
            assert!(full.is_err(), "head refused ({e}) what decode took: {full:?}");
            return;
        }
    };
    match full {
        Ok(Pdu::H2cData(d)) => {
            let of = HeadOf::H2cData {
                cccid: d.cccid,
                ttag: d.ttag,
                datao: d.datao,
            };
            assert_eq!((head.of, head.flags), (of, d.flags));
            assert_eq!(frame.get(head.pdo..head.pdo + head.data_len), Some(d.data));
            assert_eq!(head.plen, n);
            assert_eq!(head.data_digest, ctx.digests.data);
        }
        Ok(Pdu::CapsuleCmd(c)) => {
            assert_eq!(head.of, HeadOf::CapsuleCmd(c.sqe));
            assert_eq!(frame.get(head.pdo..head.pdo + head.data_len), Some(c.data));
            assert!(!c.data.is_empty());
            assert_eq!(head.plen, n);
            assert_eq!(head.data_digest, ctx.digests.data);
        }
        Err(PduError::DataDigest { .. }) => assert!(head.data_digest),
        other => panic!("head accepted what decode did not: {head:?} vs {other:?}"),
    }
});
