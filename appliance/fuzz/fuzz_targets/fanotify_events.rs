//! The fanotify event decoder (`posix_fs::fanotify::decode`) on arbitrary bytes: it must
//! return events or an error, never panic, loop or read out of bounds; every record it
//! returns lies within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use quarry::smb_service::posix_fs::fanotify;

fuzz_target!(|data: &[u8]| {
    if let Ok(events) = fanotify::decode(data) {
        let total: usize = events
            .iter()
            .flat_map(|e| &e.records)
            .map(|r| r.dir_handle.len() + r.name.len())
            .sum();
        assert!(total <= data.len());
        for e in &events {
            assert!(e.records.len() <= fanotify::MAX_RECORDS);
            for r in &e.records {
                assert!(r.dir_handle.len() <= fanotify::MAX_HANDLE_BYTES + 4);
                assert!(!r.name.contains(&0));
            }
        }
    }
});
