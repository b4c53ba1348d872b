// The body of the fuzz target `aapl_context` (`../fuzz_targets/aapl_context.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::proto::aapl::{AppleDirInfo, ServerQuery, ServerQueryReply, SERVER_QUERY_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = ServerQuery::decode(data) {
        assert_eq!(data.len(), SERVER_QUERY_LEN);
        let bytes = q.encode();
        assert_eq!(
            ServerQuery::decode(&bytes).expect("own encoding decodes"),
            q
        );
    }
    if let Ok(r) = ServerQueryReply::decode(data) {
        let bytes = r.encode();
        assert_eq!(
            bytes.len(),
            data.len(),
            "the reply's length is its content's"
        );
        assert_eq!(
            ServerQueryReply::decode(&bytes).expect("own encoding decodes"),
            r
        );
    }
    let created = data
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map_or(0, i64::from_le_bytes);
    let plain = AppleDirInfo::plain(0, 0o100_644);
    let info = plain.with_mac_metadata(3, Some(data), data.len().is_multiple_of(2), created);
    if data.len() != 60 {
        assert_eq!(
            info.finder_info, plain.finder_info,
            "only a 60-byte AfpInfo counts"
        );
    }
    assert_eq!(info.short_name_area()[0], 24);
});
