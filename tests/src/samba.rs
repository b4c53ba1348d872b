//! A private Samba `smbd` on a loopback port: the reference server of the SMB bench, and a
//! second real server for client checks that must hold against more than Quarry. It runs
//! from its own `smb.conf` in a directory of the caller's, as root (the share is served as
//! root), and stops when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};

/// How long `smbd` may take to listen after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// What to serve and how.
pub struct SmbdConfig<'a> {
    /// TCP port on 127.0.0.1.
    pub port: u16,
    /// The one share's name; it serves `<dir>/share`.
    pub share: &'a str,
    /// The Unix and Samba user that logs on (made with `useradd` if missing).
    pub user: &'a str,
    /// Their Samba password.
    pub password: &'a str,
    /// `aio read size` and `aio write size`: READs and WRITEs of at least this many bytes go
    /// to Samba's thread pool (answered with an interim STATUS_PENDING when they take a
    /// while); 0 serves every one on the connection's process.
    pub aio_from: usize,
}

/// A running `smbd`, stopped on drop.
pub struct Smbd {
    child: Child,
    /// The directory its share serves.
    pub share_dir: PathBuf,
}

impl Smbd {
    /// Writes `dir/smb.conf` and starts `smbd` from it; returns once it listens. Settings
    /// a tuned deployment would use: no NetBIOS, TCP_NODELAY, signing required (like
    /// Quarry's default), encryption when the client asks.
    pub fn start(dir: &Path, c: &SmbdConfig) -> anyhow::Result<Smbd> {
        let share_dir = dir.join("share");
        for d in ["share", "private", "lock", "state", "cache", "pid", "log"] {
            std::fs::create_dir_all(dir.join(d))?;
        }
        let conf = dir.join("smb.conf");
        let p = |d: &str| dir.join(d).display().to_string();
        std::fs::write(
            &conf,
            format!(
                "[global]\n  smb ports = {port}\n  interfaces = 127.0.0.1\n  bind interfaces only = yes\n  \
                 private dir = {}\n  lock directory = {}\n  state directory = {}\n  cache directory = {}\n  \
                 pid directory = {}\n  log file = {}/log.%m\n  log level = 0\n  disable netbios = yes\n  \
                 load printers = no\n  printing = bsd\n  printcap name = /dev/null\n  \
                 server signing = mandatory\n  server min protocol = SMB2_02\n  server smb encrypt = if_required\n  \
                 aio read size = {aio}\n  aio write size = {aio}\n  socket options = TCP_NODELAY\n\
                 [{share}]\n  path = {}\n  read only = no\n  force user = root\n",
                p("private"),
                p("lock"),
                p("state"),
                p("cache"),
                p("pid"),
                p("log"),
                share_dir.display(),
                port = c.port,
                aio = c.aio_from,
                share = c.share,
            ),
        )?;
        ensure_unix_user(c.user)?;
        let mut pw = Command::new("smbpasswd")
            .args(["-c", &conf.display().to_string(), "-s", "-a", c.user])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .context("smbpasswd (Debian package samba)")?;
        {
            use std::io::Write;
            let mut stdin = pw.stdin.take().context("smbpasswd stdin")?;
            writeln!(stdin, "{}\n{}", c.password, c.password)?;
        }
        ensure!(pw.wait()?.success(), "smbpasswd failed");
        let child = Command::new("smbd")
            .args(["--foreground", "--no-process-group", "-s"])
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("smbd (Debian package samba)")?;
        let mut smbd = Smbd { child, share_dir };
        let deadline = Instant::now() + START_TIMEOUT;
        while std::net::TcpStream::connect(("127.0.0.1", c.port)).is_err() {
            // An smbd that refuses its smb.conf exits at once: say so now, not at the
            // deadline (its reasons are in the log directory).
            if let Some(status) = smbd.child.try_wait()? {
                bail!("smbd exited ({status}) before listening; see {}", p("log"));
            }
            ensure!(
                Instant::now() < deadline,
                "smbd did not listen on {}",
                c.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(smbd)
    }

    /// The pid of the parent `smbd`, whose process tree serves every client.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Smbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Makes the Unix account `user` (no home, no shell) unless it exists: Samba maps its
/// users to Unix ones.
fn ensure_unix_user(user: &str) -> anyhow::Result<()> {
    let known = Command::new("id")
        .arg(user)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !known.success() {
        let st = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", user])
            .status()?;
        ensure!(st.success(), "useradd {user} failed (smbd runs as root)");
    }
    Ok(())
}
