// The body of the fuzz target `request_decoder` (`../fuzz_targets/request_decoder.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::proto::create::decode_create_contexts;
use quarry_smb::proto::durable::{decode_reconnect, DurableReconnectV2, DurableRequestV2};
use quarry_smb::proto::framing::parse_frame_header;
use quarry_smb::proto::info::{BasicInfo, RenameInfo};
use quarry_smb::proto::io::write_data_placement;
use quarry_smb::proto::ioctl::ValidateNegotiateInfo;
use quarry_smb::proto::oplock::{LeaseRequest, CTX_LEASE};
use quarry_smb::proto::request::split_compound;
use quarry_smb::proto::transform::{is_transform, TransformHeader};
use quarry_smb::proto::{smb1, Header, Request};

fuzz_target!(|data: &[u8]| {
    if let Some(h) = data.get(..4) {
        let _ = parse_frame_header([h[0], h[1], h[2], h[3]]);
    }
    let _ = write_data_placement(data);
    if smb1::is_smb1(data) {
        let _ = smb1::parse_negotiate(data);
        return;
    }
    if is_transform(data) {
        let _ = TransformHeader::decode(data);
        return;
    }
    let _ = decode_create_contexts(data);
    let _ = RenameInfo::decode(data);
    let _ = BasicInfo::decode(data);
    let _ = ValidateNegotiateInfo::decode(data);
    let _ = LeaseRequest::decode(data);
    let _ = DurableRequestV2::decode(data);
    let _ = DurableReconnectV2::decode(data);
    let _ = decode_reconnect(data);
    if let Ok(parts) = split_compound(data) {
        for p in parts {
            if let Ok(h) = Header::decode(p) {
                if let Ok(Request::Create(c)) = Request::decode(&h, p) {
                    let _ = c.context(b"MxAc");
                    if let Some(l) = c.context(CTX_LEASE) {
                        let _ = LeaseRequest::decode(l.data);
                    }
                    for ctx in &c.contexts {
                        let _ = DurableRequestV2::decode(ctx.data);
                        let _ = DurableReconnectV2::decode(ctx.data);
                    }
                }
            }
        }
    }
});
