//! Fuzzes the srvsvc NDR request decoders and the response encoders they feed.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
