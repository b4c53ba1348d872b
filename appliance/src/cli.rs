//! Command-line interface, exactly as `shared/interface.md` specifies: every flag also
//! reads from a `QUARRY_*` environment variable so systemd units and containers can
//! configure the appliance without a wrapper script.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// Top-level command line of the `quarry` binary.
#[derive(Debug, Parser)]
#[command(
    name = "quarry",
    version,
    about = "Quarry storage appliance: SMB 3, NVMe/TCP, REST API"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The binary's subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the appliance: REST API, SMB server and NVMe/TCP target over the pool.
    Serve(ServeArgs),
}

/// Log output format: humans read the terminal, log shippers read JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// How storage I/O of the NVMe target runs (a switch for benchmarks and for kernels
/// that forbid io_uring).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum IoEngine {
    /// io_uring on a dedicated thread.
    Uring,
    /// tokio's blocking thread pool with positional reads and writes.
    Threads,
}

/// A listen address that can be switched `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionalAddr(pub Option<SocketAddr>);

/// Parses `ADDR:PORT` or `off`.
fn parse_optional_addr(s: &str) -> Result<OptionalAddr, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(OptionalAddr(None));
    }
    s.parse()
        .map(|a| OptionalAddr(Some(a)))
        .map_err(|e| format!("{s:?}: {e} (ADDR:PORT or off)"))
}

/// Parses one SMB cipher name for `--smb-ciphers`.
fn parse_cipher(name: &str) -> Result<quarry_smb::crypto::Cipher, String> {
    quarry_smb::crypto::Cipher::from_name(name).ok_or_else(|| {
        format!(
            "unknown cipher {name:?} (one of aes-128-gcm, aes-128-ccm, aes-256-gcm, aes-256-ccm)"
        )
    })
}

/// Arguments of `quarry serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Where the config database and, for the embedded default pool, the pool (`DIR/pool`) live.
    #[arg(long, env = "QUARRY_DATA", default_value = "./quarry-data")]
    pub data: PathBuf,
    /// SMB over direct TCP. Several addresses, comma-separated (or the flag repeated),
    /// give multichannel clients several paths to the server: each is reported to them
    /// as an interface to bind further channels over.
    #[arg(long, env = "QUARRY_SMB_LISTEN", default_value = "0.0.0.0:445", value_delimiter = ',', num_args = 1..)]
    pub smb_listen: Vec<SocketAddr>,
    /// NVMe/TCP, I/O and discovery.
    #[arg(long, env = "QUARRY_NVME_LISTEN", default_value = "0.0.0.0:4420")]
    pub nvme_listen: SocketAddr,
    /// An extra NVMe/TCP listener for discovery only (conventionally port 8009), as
    /// `nvme discover` uses by default. Off unless given.
    #[arg(long, env = "QUARRY_NVME_DISCOVERY_LISTEN")]
    pub nvme_discovery_listen: Option<SocketAddr>,
    /// Address hosts should use to reach `--nvme-listen`, put in discovery log entries
    /// instead of the bound address (for NAT and port forwards).
    #[arg(long, env = "QUARRY_NVME_ADVERTISE")]
    pub nvme_advertise: Option<String>,
    /// How NVMe reads and writes reach volume files: `uring` (io_uring, falling back to
    /// `threads` when the kernel refuses it) or `threads` (tokio's blocking pool).
    #[arg(
        long,
        env = "QUARRY_NVME_IO_ENGINE",
        value_enum,
        default_value = "uring"
    )]
    pub nvme_io_engine: IoEngine,
    /// SMB encryption ciphers the server accepts, in its order of preference, comma
    /// separated: aes-128-gcm, aes-128-ccm, aes-256-gcm, aes-256-ccm (the default is all
    /// four in that order; e.g. `aes-256-gcm,aes-256-ccm` for AES-256 only).
    #[arg(
        long,
        env = "QUARRY_SMB_CIPHERS",
        value_delimiter = ',',
        value_parser = parse_cipher,
        default_value = "aes-128-gcm,aes-128-ccm,aes-256-gcm,aes-256-ccm"
    )]
    pub smb_ciphers: Vec<quarry_smb::crypto::Cipher>,
    /// Web UI, REST API and `/metrics` over TLS, with the certificate in `DATA/tls/`
    /// (self-signed on first start, replaceable through the API); `off` to disable.
    #[arg(long, env = "QUARRY_HTTPS_LISTEN", default_value = "0.0.0.0:8443", value_parser = parse_optional_addr)]
    pub https_listen: OptionalAddr,
    /// Web UI, REST API and `/metrics`.
    #[arg(long, env = "QUARRY_HTTP_LISTEN", default_value = "0.0.0.0:8080")]
    pub http_listen: SocketAddr,
    /// Log format.
    #[arg(long, env = "QUARRY_LOG_FORMAT", value_enum, default_value = "human")]
    pub log_format: LogFormat,
}
