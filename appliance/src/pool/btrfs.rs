//! The btrfs tools (`mkfs.btrfs`, `btrfs`, `wipefs`, `blkid`, `mount`) run as child
//! processes with a timeout and their stderr kept for errors, and parsers for the output
//! the managed pool reads (`filesystem show`, `device stats`, `scrub status -R`,
//! `replace status`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Errors of the managed pool.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The request cannot be satisfied (caller's fault): 422.
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with the pool's state: 409.
    #[error("{0}")]
    Conflict(String),
    /// A tool could not be started.
    #[error("running {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A tool ran too long and was killed.
    #[error("{command} did not finish within {secs} s")]
    Timeout {
        /// The command line.
        command: String,
        /// The limit.
        secs: u64,
    },
    /// A tool failed.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Exit status.
        status: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// A file-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Default limit for quick commands.
pub const QUICK: Duration = Duration::from_secs(60);
/// Limit for commands that move data (device remove, blocking scrub).
pub const LONG: Duration = Duration::from_secs(24 * 3600);

/// Runs `program args...`, returning its stdout; a non-zero exit is an error with stderr.
pub fn run(program: &str, args: &[&str], timeout: Duration) -> Result<String, PoolError> {
    run_status(program, args, timeout).and_then(|(ok, out, err, status)| {
        if ok {
            Ok(out)
        } else {
            Err(PoolError::Failed {
                command: command_line(program, args),
                status,
                stderr: err.trim().to_string(),
            })
        }
    })
}

fn command_line(program: &str, args: &[&str]) -> String {
    let mut s = program.to_string();
    for a in args {
        s.push(' ');
        s.push_str(a);
    }
    s
}

/// Runs a command; returns (success, stdout, stderr, status text) whatever the exit code.
pub fn run_status(
    program: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<(bool, String, String, String), PoolError> {
    let mut child = Command::new(program)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| PoolError::Spawn {
            program: program.to_string(),
            source,
        })?;
    let mut out_pipe = child.stdout.take();
    let mut err_pipe = child.stderr.take();
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = out_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(p) = err_pipe.as_mut() {
            let _ = p.read_to_string(&mut s);
        }
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PoolError::Timeout {
                    command: command_line(program, args),
                    secs: timeout.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                return Err(PoolError::Spawn {
                    program: program.to_string(),
                    source,
                })
            }
        }
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    Ok((status.success(), out, err, status.to_string()))
}

/// One device line of `btrfs filesystem show --raw`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShowDevice {
    /// btrfs device id.
    pub devid: u64,
    /// Size in bytes.
    pub size: u64,
    /// Allocated bytes.
    pub used: u64,
    /// Device node, `None` when missing.
    pub path: Option<String>,
}

/// `btrfs filesystem show --raw` of one file system.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsShow {
    /// Label (`None` when unlabelled).
    pub label: Option<String>,
    /// File system UUID.
    pub uuid: String,
    /// Devices the file system has (listed by btrfs).
    pub devices: Vec<ShowDevice>,
    /// btrfs said some devices are missing.
    pub missing: bool,
}

/// Parses `btrfs filesystem show --raw` output (the first file system listed).
pub fn parse_filesystem_show(text: &str) -> Option<FsShow> {
    let mut fs: Option<FsShow> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Label:") {
            if fs.is_some() {
                break;
            }
            let (label_part, uuid) = rest.rsplit_once("uuid:")?;
            let label = label_part.trim();
            fs = Some(FsShow {
                label: (label != "none").then(|| label.trim_matches('\'').to_string()),
                uuid: uuid.trim().to_string(),
                ..FsShow::default()
            });
        } else if let Some(rest) = t.strip_prefix("devid") {
            let f = fs.as_mut()?;
            let words: Vec<&str> = rest.split_whitespace().collect();
            let value = |key: &str| {
                words
                    .iter()
                    .position(|w| *w == key)
                    .and_then(|i| words.get(i + 1))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            let devid = words.first()?.parse().ok()?;
            let path = rest
                .split_once(" path ")
                .map(|(_, p)| p.trim().to_string())
                .filter(|p| !p.starts_with("<missing disk>") && !p.ends_with("MISSING"));
            f.devices.push(ShowDevice {
                devid,
                size: value("size").unwrap_or(0),
                used: value("used").unwrap_or(0),
                path,
            });
        } else if t.contains("devices missing") {
            if let Some(f) = fs.as_mut() {
                f.missing = true;
            }
        }
    }
    fs
}

/// Error counters of one device (`btrfs device stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, utoipa::ToSchema)]
pub struct DeviceErrors {
    /// Failed writes.
    pub write_io_errs: u64,
    /// Failed reads.
    pub read_io_errs: u64,
    /// Failed flushes.
    pub flush_io_errs: u64,
    /// Checksum mismatches.
    pub corruption_errs: u64,
    /// Stale generations.
    pub generation_errs: u64,
}

impl DeviceErrors {
    /// Sum of all counters.
    pub fn total(&self) -> u64 {
        self.write_io_errs
            .saturating_add(self.read_io_errs)
            .saturating_add(self.flush_io_errs)
            .saturating_add(self.corruption_errs)
            .saturating_add(self.generation_errs)
    }
}

/// Parses `btrfs device stats MNT`: `[/dev/loop2].write_io_errs   171` lines, in device
/// order (a missing device shows as `[devid:3]`).
pub fn parse_device_stats(text: &str) -> Vec<(String, DeviceErrors)> {
    let mut out: Vec<(String, DeviceErrors)> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.trim().strip_prefix('[') else {
            continue;
        };
        let Some((dev, rest)) = rest.split_once("].") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(counter), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(value) = value.parse::<u64>() else {
            continue;
        };
        if out.last().is_none_or(|(d, _)| d != dev) {
            out.push((dev.to_string(), DeviceErrors::default()));
        }
        let Some((_, e)) = out.last_mut() else {
            continue;
        };
        match counter {
            "write_io_errs" => e.write_io_errs = value,
            "read_io_errs" => e.read_io_errs = value,
            "flush_io_errs" => e.flush_io_errs = value,
            "corruption_errs" => e.corruption_errs = value,
            "generation_errs" => e.generation_errs = value,
            _ => {}
        }
    }
    out
}

/// `btrfs scrub status -R` as far as the pool uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct ScrubStatus {
    /// `running`, `finished`, `aborted`, `interrupted` or empty.
    pub status: String,
    /// Data and tree bytes scrubbed so far.
    pub bytes_scrubbed: u64,
    /// Read errors found.
    pub read_errors: u64,
    /// Checksum errors found.
    pub csum_errors: u64,
    /// Metadata verify errors found.
    pub verify_errors: u64,
    /// Errors repaired from a good copy.
    pub corrected_errors: u64,
    /// Errors that could not be repaired.
    pub uncorrectable_errors: u64,
}

/// Parses `btrfs scrub status -R` (or `scrub start -B -R`) output.
pub fn parse_scrub_status(text: &str) -> ScrubStatus {
    let mut s = ScrubStatus::default();
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once(':') else {
            continue;
        };
        let value = value.trim();
        let n = || value.parse::<u64>().unwrap_or(0);
        match key.trim() {
            "Status" => s.status = value.to_string(),
            "data_bytes_scrubbed" | "tree_bytes_scrubbed" => {
                s.bytes_scrubbed = s.bytes_scrubbed.saturating_add(n())
            }
            "read_errors" => s.read_errors = n(),
            "csum_errors" => s.csum_errors = n(),
            "verify_errors" => s.verify_errors = n(),
            "corrected_errors" => s.corrected_errors = n(),
            "uncorrectable_errors" => s.uncorrectable_errors = n(),
            _ => {}
        }
    }
    s
}

/// Where a `btrfs replace` is.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplaceStatus {
    /// Copying; the fraction done.
    Running(f64),
    /// Done.
    Finished,
    /// Cancelled or failed (the text).
    Stopped(String),
    /// No replace has run since mount.
    NeverStarted,
}

/// Parses `btrfs replace status -1 MNT`.
pub fn parse_replace_status(text: &str) -> ReplaceStatus {
    let t = text.trim();
    if t.starts_with("Never started") {
        return ReplaceStatus::NeverStarted;
    }
    if let Some((pct, _)) = t.split_once("% done") {
        let pct = pct.trim().parse::<f64>().unwrap_or(0.0);
        return ReplaceStatus::Running((pct / 100.0).clamp(0.0, 1.0));
    }
    if t.contains("finished on") {
        return ReplaceStatus::Finished;
    }
    ReplaceStatus::Stopped(t.to_string())
}

/// Parses the UUID line of `mkfs.btrfs` output.
pub fn parse_mkfs_uuid(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix("UUID:")?;
        let u = rest.trim();
        (u.len() == 36).then(|| u.to_string())
    })
}

/// Whether `mountpoint` is a mounted btrfs, from `/proc/self/mountinfo` text.
pub fn is_btrfs_mountpoint(mountinfo: &str, mountpoint: &Path) -> bool {
    let want = mountpoint.to_string_lossy();
    mountinfo.lines().any(|l| {
        let fields: Vec<&str> = l.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            return false;
        };
        fields.get(4).is_some_and(|m| *m == want) && fields.get(sep + 1) == Some(&"btrfs")
    })
}

/// `FS_NOCOW_FL` of `<linux/fs.h>`.
const FS_NOCOW_FL: libc::c_long = 0x0080_0000;

/// Whether `file` lives on a btrfs file system, managed pool or not (a directory pool in a
/// folder of a btrfs disk is one too): `fstatfs`'s type. False if it cannot tell.
pub fn is_on_btrfs(file: &std::fs::File) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: zeroed statfs is a valid out-parameter; the fd is open.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs into `st`.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // The magic is 32 bits, whatever the width of `f_type` and of libc's constant.
    st.f_type as u32 == libc::BTRFS_SUPER_MAGIC as u32
}

/// Sets the no-copy-on-write attribute on an empty file (btrfs only honours it before the
/// file has data): volumes are rewritten in place, so COW would fragment them.
pub fn set_nocow(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut flags: libc::c_long = 0;
    // SAFETY: FS_IOC_GETFLAGS writes one long into `flags`; the fd is open.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    flags |= FS_NOCOW_FL;
    // SAFETY: FS_IOC_SETFLAGS reads one long from `flags`; the fd is open.
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &flags) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `dst` share `src`'s extents (a reflink copy; btrfs only).
pub fn reflink(src: &std::fs::File, dst: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: FICLONE takes the source fd as its argument; both fds are open.
    if unsafe { libc::ioctl(dst.as_raw_fd(), libc::FICLONE, src.as_raw_fd()) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_filesystem_show() {
        let text = "Label: 'quarry'  uuid: 2cba6920-ff58-40db-80d5-218f8d5ce98a
\tTotal devices 4 FS bytes used 73629696
\tdevid    1 size 1073741824 used 199622656 path /dev/loop0
\tdevid    3 size 0 used 0 path <missing disk> MISSING
\tdevid    4 size 1073741824 used 199622656 path /dev/loop3

*** Some devices missing
";
        let fs = parse_filesystem_show(text).unwrap();
        assert_eq!(fs.label.as_deref(), Some("quarry"));
        assert_eq!(fs.uuid, "2cba6920-ff58-40db-80d5-218f8d5ce98a");
        assert_eq!(fs.devices.len(), 3);
        assert_eq!(fs.devices[0].path.as_deref(), Some("/dev/loop0"));
        assert_eq!(fs.devices[0].size, 1 << 30);
        assert_eq!(fs.devices[1].devid, 3);
        assert_eq!(fs.devices[1].path, None);
        assert!(fs.missing);
        let none =
            parse_filesystem_show("Label: none  uuid: abc\n\tdevid 1 size 5 used 1 path /dev/x\n")
                .unwrap();
        assert_eq!(none.label, None);
        assert!(!none.missing);
        assert!(parse_filesystem_show("").is_none());
    }

    #[test]
    fn parses_device_stats() {
        let text = "[/dev/loop0].write_io_errs    0
[/dev/loop0].read_io_errs     0
[/dev/loop0].flush_io_errs    0
[/dev/loop0].corruption_errs  2
[/dev/loop0].generation_errs  0
[devid:2].write_io_errs    171
[devid:2].read_io_errs     4
";
        let s = parse_device_stats(text);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].0, "/dev/loop0");
        assert_eq!(s[0].1.corruption_errs, 2);
        assert_eq!(s[1].0, "devid:2");
        assert_eq!(s[1].1.write_io_errs, 171);
        assert_eq!(s[1].1.total(), 175);
    }

    #[test]
    fn parses_scrub_status() {
        let text = "UUID:             2cba6920
Scrub started:    Sun Nov 22 12:08:47 2026
Status:           finished
Duration:         0:00:00
\tdata_extents_scrubbed: 2240
\tdata_bytes_scrubbed: 146800640
\ttree_bytes_scrubbed: 458752
\tread_errors: 0
\tcsum_errors: 3
\tverify_errors: 0
\tuncorrectable_errors: 1
\tcorrected_errors: 2
";
        let s = parse_scrub_status(text);
        assert_eq!(s.status, "finished");
        assert_eq!(s.bytes_scrubbed, 146800640 + 458752);
        assert_eq!(s.csum_errors, 3);
        assert_eq!(s.corrected_errors, 2);
        assert_eq!(s.uncorrectable_errors, 1);
    }

    #[test]
    fn parses_replace_status_and_mkfs() {
        assert_eq!(
            parse_replace_status("12.5% done, 0 write errs, 0 uncorr. read errs"),
            ReplaceStatus::Running(0.125)
        );
        assert_eq!(
            parse_replace_status("Started on 22.Nov 12:08:38, finished on 22.Nov 12:08:38, 0 write errs, 0 uncorr. read errs"),
            ReplaceStatus::Finished
        );
        assert_eq!(
            parse_replace_status("Never started"),
            ReplaceStatus::NeverStarted
        );
        assert!(matches!(
            parse_replace_status("Started on 1, canceled on 2 at 5.0%"),
            ReplaceStatus::Stopped(_)
        ));
        let mkfs = "Label:              quarry\nUUID:               2cba6920-ff58-40db-80d5-218f8d5ce98a\nNode size:          16384\n";
        assert_eq!(
            parse_mkfs_uuid(mkfs).as_deref(),
            Some("2cba6920-ff58-40db-80d5-218f8d5ce98a")
        );
    }

    #[test]
    fn finds_btrfs_mountpoints() {
        let mi = "36 35 98:0 / /mnt/pool rw,noatime master:1 - btrfs /dev/loop0 rw\n37 35 98:0 / /other rw - ext4 /dev/vda rw\n";
        assert!(is_btrfs_mountpoint(mi, Path::new("/mnt/pool")));
        assert!(!is_btrfs_mountpoint(mi, Path::new("/other")));
        assert!(!is_btrfs_mountpoint(mi, Path::new("/mnt")));
    }

    #[test]
    fn runs_commands_with_timeouts() {
        assert_eq!(run("echo", &["hi"], QUICK).unwrap(), "hi\n");
        assert!(matches!(
            run("sh", &["-c", "echo oops >&2; exit 3"], QUICK),
            Err(PoolError::Failed { stderr, .. }) if stderr == "oops"
        ));
        assert!(matches!(
            run("sleep", &["5"], Duration::from_millis(100)),
            Err(PoolError::Timeout { .. })
        ));
    }
}
