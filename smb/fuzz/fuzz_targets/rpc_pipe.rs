//! Fuzzes the srvsvc pipe: the input is written in chunks whose sizes come from the data, and
//! replies are drained with small reads, exercising reassembly and message-mode reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
