// The body of the fuzz target `security_descriptor` (`../fuzz_targets/security_descriptor.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::security::descriptor::{control, secinfo};
use quarry_smb::security::{descriptor_for_new, granted_rights, SecurityDescriptor, Sid, Token};

fuzz_target!(|data: &[u8]| {
    let Ok(sd) = SecurityDescriptor::decode(data) else {
        return;
    };
    let all = secinfo::OWNER | secinfo::GROUP | secinfo::DACL | secinfo::SACL;
    let again = SecurityDescriptor::decode(&sd.encode(all)).expect("our encoding decodes");
    assert_eq!(again.control, sd.control | control::SELF_RELATIVE);
    assert_eq!((&again.owner, &again.group), (&sd.owner, &sd.group));
    assert_eq!((&again.dacl, &again.sacl), (&sd.dacl, &sd.sacl));
    let token = Token {
        user: sd.owner.clone().unwrap_or_else(Sid::world),
        primary_group: Sid::builtin_users(),
        groups: vec![Sid::world()],
    };
    let _ = granted_rights(&sd, &token);
    for is_dir in [false, true] {
        let child = descriptor_for_new(&sd, None, &token, is_dir);
        let _ = granted_rights(&child, &token);
        let _ = SecurityDescriptor::decode(&child.encode(all)).expect("inherited encodes");
    }
    let mut merged = SecurityDescriptor::default();
    merged.merge(&sd, u32::from(data.first().copied().unwrap_or(0)));
    let _ = merged.encode(all);
});
