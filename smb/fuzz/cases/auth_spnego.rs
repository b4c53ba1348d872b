// The body of the fuzz target `auth_spnego` (`../fuzz_targets/auth_spnego.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::auth::{spnego, NtHashLookup, NtlmServer, ServerNames};

struct Fixed;
impl NtHashLookup for Fixed {
    fn nt_hash(&self, _user: &str, _domain: &str) -> Option<[u8; 16]> {
        Some([0x11; 16])
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = spnego::parse(data);
    let names = ServerNames {
        netbios_domain: "WORKGROUP".into(),
        netbios_computer: "QUARRY".into(),
        dns_domain: String::new(),
        dns_computer: "quarry".into(),
    };
    let mut srv = NtlmServer::new([7; 8], 133_000_000_000_000_000, names);
    let mut rest = data;
    for _ in 0..3 {
        let (tok, next) = match rest.windows(3).position(|w| w == [0xFF, 0x00, 0xFF]) {
            Some(i) => (&rest[..i], &rest[i + 3..]),
            None => (rest, &[][..]),
        };
        if srv.step(tok, &Fixed).is_err() {
            break;
        }
        rest = next;
    }
});
