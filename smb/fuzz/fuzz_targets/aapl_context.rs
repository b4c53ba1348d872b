//! Fuzzes the Apple `AAPL` create context: the request decoder the server runs on client
//! bytes (never panics; a decoded query survives its own encoding) and the reply decoder
//! (a decoded reply survives its own encoding; Reserved fields are not kept).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry_smb::proto::aapl::{ServerQuery, ServerQueryReply, SERVER_QUERY_LEN};

fuzz_target!(|data: &[u8]| {
    if let Ok(q) = ServerQuery::decode(data) {
        assert_eq!(data.len(), SERVER_QUERY_LEN);
        let bytes = q.encode();
        assert_eq!(ServerQuery::decode(&bytes).expect("own encoding decodes"), q);
    }
    if let Ok(r) = ServerQueryReply::decode(data) {
        let bytes = r.encode();
        assert_eq!(bytes.len(), data.len(), "the reply's length is its content's");
        assert_eq!(ServerQueryReply::decode(&bytes).expect("own encoding decodes"), r);
    }
});
