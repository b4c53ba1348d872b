//! The fanotify event decoder (`posix_fs::fanotify::decode`) on arbitrary bytes: it must
//! return events or an error, never panic, loop or read out of bounds; every record it
//! returns lies within the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../cases/fanotify_events.rs");
