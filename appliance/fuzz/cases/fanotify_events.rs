// The body of the fuzz target `fanotify_events` (`../fuzz_targets/fanotify_events.rs` says what it checks).
// Kept apart so that `tests/tests/fuzz_corpus.rs` replays the committed corpus through
// this same code on stable Rust in every test run.

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
