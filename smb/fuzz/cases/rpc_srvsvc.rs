// The body of the fuzz target `rpc_srvsvc` (`../fuzz_targets/rpc_srvsvc.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::rpc::{pdu, srvsvc, ShareEntry, ShareKind};

fuzz_target!(|data: &[u8]| {
    let shares = [ShareEntry {
        name: "data".into(),
        kind: ShareKind::Disk,
        comment: "c".into(),
    }];
    if let Ok(r) = srvsvc::parse_share_enum(data) {
        let _ = srvsvc::share_enum_response(&r, &shares);
    }
    if let Ok(r) = srvsvc::parse_share_get_info(data) {
        let _ = srvsvc::share_get_info_response(&r, &shares);
    }
    if let Ok(h) = pdu::parse_header(data) {
        let _ = pdu::parse_bind(data);
        let _ = pdu::parse_request(&h, data);
    }
});
