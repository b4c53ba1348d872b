// The body of the fuzz target `info_buffers` (`../fuzz_targets/info_buffers.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::proto::ea::{decode_full_ea_list, encode_full_ea_list};
use quarry_smb::server::previous::{gmt_token, parse_gmt_token, strip_gmt_token, twrp_time};
use quarry_smb::vfs::names::split_stream;

fuzz_target!(|data: &[u8]| {
    if let Ok(eas) = decode_full_ea_list(data) {
        let (bytes, n) = encode_full_ea_list(&eas, usize::MAX);
        assert_eq!(n, eas.len());
        assert_eq!(decode_full_ea_list(&bytes).expect("own encoding decodes"), eas);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(p) = split_stream(text) {
            assert!(p.file.len() <= text.len());
            assert!(!(p.stream.is_some() && p.explicit_default));
        }
        if let Some(t) = parse_gmt_token(text) {
            assert_eq!(gmt_token(t), text, "a token formats back to itself");
        }
        if let Ok((rest, Some(_))) = strip_gmt_token(text) {
            assert!(rest.len() < text.len());
        }
    }
    let _ = twrp_time(data);
});
