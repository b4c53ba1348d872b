// The body of the fuzz target `pdu_decode` (`../fuzz_targets/pdu_decode.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_nvmeof::tcp::{self, DecodeContext, Digests, Pdu};

fuzz_target!(|data: &[u8]| {
    let Some((&sel, bytes)) = data.split_first() else {
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
    let Ok(pdu) = tcp::decode(frame, &ctx) else {
        return;
    };
    let mut out = Vec::new();
    match &pdu {
        Pdu::IcReq(r) => tcp::encode_icreq(&mut out, r),
        Pdu::IcResp(r) => tcp::encode_icresp(&mut out, r),
        Pdu::CapsuleCmd(c) => {
            tcp::encode_capsule_cmd(&mut out, &c.sqe, c.data, ctx.digests, ctx.data_alignment)
        }
        Pdu::CapsuleResp(c) => tcp::encode_capsule_resp(&mut out, &c.cqe, ctx.digests),
        Pdu::R2t(r) => tcp::encode_r2t(&mut out, r, ctx.digests),
        _ => return,
    }
    let again = tcp::decode(&out, &ctx).expect("re-encoded PDU must decode");
    assert_eq!(again, pdu);
});
