// The body of the fuzz target `rpc_pipe` (`../fuzz_targets/rpc_pipe.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

use quarry_smb::rpc::{ShareEntry, ShareKind, SrvsvcPipe};

fuzz_target!(|data: &[u8]| {
    let mut pipe = SrvsvcPipe::new(vec![
        ShareEntry {
            name: "data".into(),
            kind: ShareKind::Disk,
            comment: "c".into(),
        },
        ShareEntry {
            name: "IPC$".into(),
            kind: ShareKind::Ipc,
            comment: String::new(),
        },
    ]);
    let Some((&chunk, mut rest)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk).max(1) * 8;
    while !rest.is_empty() {
        let n = chunk.min(rest.len());
        if pipe.write(&rest[..n]).is_err() {
            return;
        }
        rest = &rest[n..];
        while pipe.read(chunk).is_some() {}
    }
});
