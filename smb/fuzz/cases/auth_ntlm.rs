// The body of the fuzz target `auth_ntlm` (`../fuzz_targets/auth_ntlm.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::auth::ntlm::messages;
use quarry_smb::auth::server::verify_authenticate;
use quarry_smb::auth::NtHashLookup;

struct Fixed;
impl NtHashLookup for Fixed {
    fn nt_hash(&self, _user: &str, _domain: &str) -> Option<[u8; 16]> {
        Some([0x22; 16])
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = messages::parse_negotiate(data);
    let _ = messages::parse_av_pairs(data);
    let _ = messages::parse_ntlmv2_response(data);
    if let Ok(a) = messages::parse_authenticate(data) {
        let _ = messages::parse_ntlmv2_response(a.nt_response);
    }
    let _ = verify_authenticate(b"neg", b"chal", &[3; 8], data, &Fixed);
});
