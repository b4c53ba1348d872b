//! Rust entry to the guest lab: boots Debian's kernel under qemu TCG through
//! `tests/guest/run.sh` and returns its per-check results, so an integration
//! test can run the Linux kernel's own cifs / nvme-tcp initiators against a
//! Quarry server it started on the host.
//!
//! Std only, so any test crate can include it without new dependencies:
//!
//! ```ignore
//! #[path = "../guest/harness.rs"]
//! mod guest;
//!
//! let run = guest::GuestRun::new(&["cifs"])
//!     .param("SMB_ADDR", guest::HOST_FROM_GUEST)
//!     .param("SMB_PORT", &port.to_string())
//!     .param("SMB_SHARE", "data")
//!     .param("SMB_USER", "alice")
//!     .param("SMB_PASS", "secret")
//!     .run()?;
//! assert!(run.passed(), "{}", run.summary());
//! ```
//!
//! The server must listen on the host's 127.0.0.1; the guest reaches it as
//! [`HOST_FROM_GUEST`]. Parameters of each check set are listed in
//! `tests/guest/README.md`.
#![allow(dead_code)]

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The host's loopback as seen from the guest (qemu user-mode networking).
pub const HOST_FROM_GUEST: &str = "10.0.2.2";

/// Default whole-run limit in seconds (boot included), matching run.sh.
pub const DEFAULT_TIMEOUT_SECS: u64 = 1500;

/// run.sh exit status for "the run timed out".
pub const EXIT_TIMEOUT: i32 = 3;

/// One `GUEST-CHECK <name> PASS|FAIL <detail>` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    /// Dotted check name, e.g. `cifs.3.1.1+seal.copy_out`.
    pub name: String,
    /// True for PASS.
    pub passed: bool,
    /// Free text after the status (timings, values, failure reason).
    pub detail: String,
}

/// A configured guest run: which check sets, with which parameters.
#[derive(Debug, Clone)]
pub struct GuestRun {
    checks: Vec<String>,
    params: Vec<(String, String)>,
    timeout_secs: u64,
    log: Option<PathBuf>,
    extra_cpio: Vec<PathBuf>,
}

/// What a finished run reported.
#[derive(Debug, Clone)]
pub struct GuestOutcome {
    /// run.sh exit status: 0 all passed, 1 a check failed or a set did not
    /// finish, 2 harness error, 3 timeout.
    pub status: i32,
    /// Every check line, in order.
    pub checks: Vec<CheckResult>,
    /// The final `GUEST-RESULT ...` line.
    pub result_line: String,
    /// Everything run.sh printed on stdout (result lines only).
    pub stdout: String,
    /// run.sh's stderr (its own messages; the console is in the log).
    pub stderr: String,
}

/// Why a run could not be started or understood.
#[derive(Debug)]
pub enum GuestError {
    /// run.sh could not be spawned.
    Spawn(io::Error),
    /// A parameter name run.sh would reject (must be `[A-Z_][A-Z0-9_]*`).
    BadParam(String),
}

impl fmt::Display for GuestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestError::Spawn(e) => write!(f, "spawning tests/guest/run.sh: {e}"),
            GuestError::BadParam(k) => write!(f, "bad guest parameter name {k:?}"),
        }
    }
}

impl std::error::Error for GuestError {}

/// Environment variable that overrides where run.sh is.
pub const RUN_SCRIPT_ENV: &str = "QUARRY_GUEST_RUN";

/// Path of run.sh: `$QUARRY_GUEST_RUN` if set, otherwise `tests/guest/run.sh`
/// beside the including crate (every workspace member sits one level below
/// the repository root).
pub fn run_script() -> PathBuf {
    if let Some(p) = std::env::var_os(RUN_SCRIPT_ENV) {
        return PathBuf::from(p);
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests")
        .join("guest")
        .join("run.sh")
}

fn valid_param_name(k: &str) -> bool {
    let mut chars = k.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_uppercase() || c == '_')
        && chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

impl GuestRun {
    /// A run of the given check sets (e.g. `["cifs"]`, `["nvme_tcp"]`), in order.
    pub fn new(checks: &[&str]) -> Self {
        GuestRun {
            checks: checks.iter().map(|c| c.to_string()).collect(),
            params: Vec::new(),
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            log: None,
            extra_cpio: Vec::new(),
        }
    }

    /// Appends a cpio member to the guest's initrd (`run.sh --extra-cpio`), e.g. the
    /// `quarry` binary packed by `tests/guest/quarry_overlay.sh`.
    pub fn extra_cpio(mut self, path: &Path) -> Self {
        self.extra_cpio.push(path.to_path_buf());
        self
    }

    /// Adds a parameter for the check scripts (`SMB_PORT`, `NVME_NQN`, ...).
    pub fn param(mut self, key: &str, value: &str) -> Self {
        self.params.push((key.to_string(), value.to_string()));
        self
    }

    /// Sets the whole-run limit (boot included).
    pub fn timeout_secs(mut self, secs: u64) -> Self {
        self.timeout_secs = secs;
        self
    }

    /// Keeps the serial console log at this path.
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_path_buf());
        self
    }

    /// Boots the guest, runs the checks, and waits for the verdict.
    pub fn run(&self) -> Result<GuestOutcome, GuestError> {
        let mut cmd = Command::new(run_script());
        cmd.arg("--quiet")
            .arg("--checks")
            .arg(self.checks.join(","))
            .arg("--timeout")
            .arg(self.timeout_secs.to_string());
        if let Some(log) = &self.log {
            cmd.arg("--log").arg(log);
        }
        for c in &self.extra_cpio {
            cmd.arg("--extra-cpio").arg(c);
        }
        for (k, v) in &self.params {
            if !valid_param_name(k) {
                return Err(GuestError::BadParam(k.clone()));
            }
            cmd.arg("--param").arg(format!("{k}={v}"));
        }
        let out = cmd.output().map_err(GuestError::Spawn)?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        Ok(GuestOutcome {
            status: out.status.code().unwrap_or(-1),
            checks: parse_checks(&stdout),
            result_line: stdout
                .lines()
                .rev()
                .find(|l| l.starts_with("GUEST-RESULT "))
                .unwrap_or("")
                .to_string(),
            stdout,
            stderr,
        })
    }
}

/// Parses `GUEST-CHECK <name> PASS|FAIL <detail>` lines.
pub fn parse_checks(text: &str) -> Vec<CheckResult> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("GUEST-CHECK ")?;
            let mut it = rest.splitn(3, ' ');
            let name = it.next()?.to_string();
            let passed = match it.next()? {
                "PASS" => true,
                "FAIL" => false,
                _ => return None,
            };
            let detail = it.next().unwrap_or("").to_string();
            Some(CheckResult {
                name,
                passed,
                detail,
            })
        })
        .collect()
}

impl GuestOutcome {
    /// True when run.sh exited 0: every check passed and every set finished.
    pub fn passed(&self) -> bool {
        self.status == 0
    }

    /// True when the run hit its time limit.
    pub fn timed_out(&self) -> bool {
        self.status == EXIT_TIMEOUT
    }

    /// The result of one check by exact name.
    pub fn check(&self, name: &str) -> Option<&CheckResult> {
        self.checks.iter().find(|c| c.name == name)
    }

    /// Every failed check.
    pub fn failures(&self) -> Vec<&CheckResult> {
        self.checks.iter().filter(|c| !c.passed).collect()
    }

    /// A readable verdict for assertion messages: the result line, the
    /// failures, and run.sh's own messages.
    pub fn summary(&self) -> String {
        let mut s = format!("{} (exit {})\n", self.result_line, self.status);
        for c in self.failures() {
            s.push_str(&format!("  FAIL {} {}\n", c.name, c.detail));
        }
        if !self.stderr.is_empty() {
            s.push_str(&self.stderr);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_check_lines() {
        let text = "GUEST-BOOT uptime=5.5\n\
                    GUEST-CHECK cifs.3.0.mount PASS secs=0.37\n\
                    GUEST-CHECK nvme_tcp.plain.id_ctrl FAIL rc=1 subnqn 'x'\n\
                    GUEST-CHECK broken MAYBE x\n\
                    GUEST-RESULT FAIL pass=1 fail=1\n";
        let c = parse_checks(text);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].name, "cifs.3.0.mount");
        assert!(c[0].passed);
        assert_eq!(c[0].detail, "secs=0.37");
        assert!(!c[1].passed);
        assert_eq!(c[1].detail, "rc=1 subnqn 'x'");
    }

    #[test]
    fn rejects_bad_param_names() {
        assert!(valid_param_name("SMB_PORT"));
        assert!(valid_param_name("_X1"));
        assert!(!valid_param_name("smb_port"));
        assert!(!valid_param_name("1X"));
        assert!(!valid_param_name("A-B"));
        let r = GuestRun::new(&["smoke"]).param("bad name", "x").run();
        assert!(matches!(r, Err(GuestError::BadParam(_))));
    }

    /// Boots the real guest (about 15 s): `--ignored` to run.
    #[test]
    #[ignore = "boots qemu; run with --ignored"]
    fn smoke_boot() {
        let run = GuestRun::new(&["smoke"])
            .timeout_secs(300)
            .run()
            .expect("run.sh");
        assert!(run.passed(), "{}", run.summary());
        assert!(run.check("smoke.ping").is_some_and(|c| c.passed));
    }
}
