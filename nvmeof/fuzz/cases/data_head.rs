// The body of the fuzz target `data_head` (`../fuzz_targets/data_head.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

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
