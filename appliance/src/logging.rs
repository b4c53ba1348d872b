//! Structured logging with `tracing`: human lines on a terminal, JSON for log shippers.
//! The filter comes from `QUARRY_LOG` (same syntax as `RUST_LOG`), default `info`.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber. Safe to call once per process; later calls are ignored
/// so tests that start several appliances in one process do not fail.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("QUARRY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
