//! Test tools shared by Quarry's cross-crate and interop tests: start the real `quarry`
//! binary on free loopback ports in a temporary data directory, talk to its REST API,
//! and stop or kill it. Everything here is test tooling, never shipped.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// Password given to the `admin` account of every test appliance.
pub const ADMIN_PASSWORD: &str = "quarry-test-admin";
/// How long to wait for a started appliance to answer its health check.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How many times a start that lost one of its ports to another process is tried.
const START_ATTEMPTS: u32 = 3;

/// Why one start of quarry failed.
enum Launch {
    /// quarry exited because another process took one of its ports (its log attached).
    PortTaken(String),
    /// Anything else.
    Failed(anyhow::Error),
}

static BUILD_LOCK: Mutex<()> = Mutex::new(());

pub mod procstat {
    //! CPU time of server processes from /proc, for benchmarks' CPU-per-byte figures.

    /// The fields of /proc/PID/stat after the command name, as numbers of clock ticks.
    fn stat_fields(pid: u32) -> Option<Vec<f64>> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        Some(
            rest.split_whitespace()
                .map(|f| f.parse().unwrap_or(0.0))
                .collect(),
        )
    }

    fn tick() -> f64 {
        // SAFETY: sysconf has no memory-safety preconditions.
        (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }) as f64
    }

    /// utime + stime of a process in seconds.
    pub fn cpu_seconds(pid: u32) -> Option<f64> {
        let f = stat_fields(pid)?;
        Some((f.get(11)? + f.get(12)?) / tick())
    }

    /// [`cpu_seconds`] of this process: a bench's own client, which shares the host's
    /// cores with the server it measures.
    pub fn own_cpu_seconds() -> Option<f64> {
        cpu_seconds(std::process::id())
    }

    /// CPU seconds of a process tree that forks a child per client (smbd): the parent's own
    /// time, its reaped children's (cutime + cstime), and its live children's.
    pub fn tree_cpu_seconds(pid: u32) -> Option<f64> {
        let f = stat_fields(pid)?;
        let mut total = f.get(11)? + f.get(12)? + f.get(13)? + f.get(14)?;
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        for child in children
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            if let Some(c) = stat_fields(child) {
                total += c.get(11).unwrap_or(&0.0) + c.get(12).unwrap_or(&0.0);
            }
        }
        Some(total / tick())
    }
}

/// What file system holds `dir` and on which device, for a benchmark's table: a figure
/// measured on ext4 without a journal and one on the appliance's btrfs pool are not the
/// same figure. From `findmnt --target` (util-linux); "unknown" if it cannot say.
pub fn fs_description(dir: &Path) -> String {
    let out = Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE,SOURCE,OPTIONS", "--target"])
        .arg(dir)
        .output();
    match out {
        Ok(o) if o.status.success() => {
            let text = String::from_utf8_lossy(&o.stdout);
            let mut f = text.split_whitespace();
            match (f.next(), f.next(), f.next()) {
                (Some(fs), Some(dev), Some(opts)) => format!("{fs} on {dev} ({opts})"),
                _ => "unknown".into(),
            }
        }
        _ => "unknown".into(),
    }
}

/// Path of the `quarry` binary under test: `$QUARRY_BIN`, else the one next to this test
/// executable's `deps/` directory (built first with `cargo build -p quarry` if missing).
pub fn quarry_bin() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("QUARRY_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("locating the target directory")?
        .to_path_buf();
    let bin = profile_dir.join("quarry");
    let _guard = BUILD_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    if !bin.exists() {
        let release = profile_dir.file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.args(["build", "-p", "quarry"]);
        if release {
            cmd.arg("--release");
        }
        let status = cmd.status().context("running cargo build -p quarry")?;
        if !status.success() {
            bail!("cargo build -p quarry failed");
        }
    }
    Ok(bin)
}

/// `len` pseudo-random bytes from `seed` (xorshift): test data that differs between
/// seeds and never repeats a block, so a misplaced or stale block is caught.
pub fn xorshift_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// A free TCP port on 127.0.0.1 (bound and released: good enough for tests).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(free_ports::<1>()?[0])
}

/// `N` distinct free TCP ports on 127.0.0.1. All are held until every one is chosen, so
/// the kernel cannot hand the same port out twice (as separate `free_port` calls can).
pub fn free_ports<const N: usize>() -> anyhow::Result<[u16; N]> {
    let listeners = (0..N)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ports = [0u16; N];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener.local_addr()?.port();
    }
    Ok(ports)
}

/// A running `quarry serve`.
pub struct QuarryProcess {
    child: Option<Child>,
    _tempdir: Option<tempfile::TempDir>,
    /// The data directory.
    pub data: PathBuf,
    /// REST API / web UI address.
    pub http: SocketAddr,
    /// SMB address.
    pub smb: SocketAddr,
    /// NVMe/TCP address.
    pub nvme: SocketAddr,
    /// HTTPS (web UI and REST API over TLS) address.
    pub https: SocketAddr,
    /// Where the process's stderr goes.
    pub log: PathBuf,
}

impl QuarryProcess {
    /// Starts an appliance in a fresh temporary data directory.
    pub fn start() -> anyhow::Result<QuarryProcess> {
        Self::start_binary(&quarry_bin()?)
    }

    /// Starts the appliance built at `bin` (instead of [`quarry_bin`]) in a fresh
    /// temporary data directory: a bench compares two builds in one run.
    pub fn start_binary(bin: &Path) -> anyhow::Result<QuarryProcess> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let mut p = Self::launch(bin, &data, &[], &[])?;
        p._tempdir = Some(dir);
        Ok(p)
    }

    /// Starts an appliance on `data` (reusing it if it exists: a restart).
    pub fn start_in(data: &Path) -> anyhow::Result<QuarryProcess> {
        Self::start_with(data, &[])
    }

    /// Starts an appliance with extra environment variables.
    pub fn start_with(data: &Path, env: &[(&str, &str)]) -> anyhow::Result<QuarryProcess> {
        Self::start_with_smb_also(data, env, &[])
    }

    /// Starts an appliance whose SMB server also listens on `more_smb` (other loopback
    /// addresses, same port as [`QuarryProcess::smb`]): multichannel paths.
    pub fn start_with_smb_also(
        data: &Path,
        env: &[(&str, &str)],
        more_smb: &[std::net::IpAddr],
    ) -> anyhow::Result<QuarryProcess> {
        Self::launch(&quarry_bin()?, data, env, more_smb)
    }

    /// Starts `bin` on `data` with extra environment and SMB addresses, and waits until
    /// it answers its health check. Free ports are found by binding and releasing them, so
    /// another process (a parallel test's server or outgoing connection) can take one
    /// before quarry binds it; quarry then exits saying it cannot bind, and the start is
    /// tried again on other ports, up to [`START_ATTEMPTS`] times.
    fn launch(
        bin: &Path,
        data: &Path,
        env: &[(&str, &str)],
        more_smb: &[std::net::IpAddr],
    ) -> anyhow::Result<QuarryProcess> {
        let mut attempt = 1;
        loop {
            match Self::launch_once(bin, data, env, more_smb) {
                Err(Launch::PortTaken(log)) if attempt < START_ATTEMPTS => {
                    eprintln!("quarry lost a port race on start (attempt {attempt}); retrying on other ports:\n{log}");
                    attempt += 1;
                }
                Err(Launch::PortTaken(log)) => {
                    bail!("quarry could not bind its ports in {START_ATTEMPTS} attempts; last log:\n{log}")
                }
                Err(Launch::Failed(e)) => return Err(e),
                Ok(p) => return Ok(p),
            }
        }
    }

    /// One start of `bin` on freshly chosen ports (see [`QuarryProcess::launch`]).
    fn launch_once(
        bin: &Path,
        data: &Path,
        env: &[(&str, &str)],
        more_smb: &[std::net::IpAddr],
    ) -> Result<QuarryProcess, Launch> {
        std::fs::create_dir_all(data).map_err(|e| Launch::Failed(e.into()))?;
        let [http, smb, nvme, https] = free_ports::<4>().map_err(Launch::Failed)?;
        let (http, smb, nvme, https): (SocketAddr, SocketAddr, SocketAddr, SocketAddr) = (
            ([127, 0, 0, 1], http).into(),
            ([127, 0, 0, 1], smb).into(),
            ([127, 0, 0, 1], nvme).into(),
            ([127, 0, 0, 1], https).into(),
        );
        let log = data.with_extension(format!("log.{}", http.port()));
        let log_file = std::fs::File::create(&log).map_err(|e| Launch::Failed(e.into()))?;
        // systemd sets WATCHDOG_PID to the service's pid; a shell that execs the binary
        // keeps its pid, so it can do the same for tests that ask for a watchdog.
        let mut cmd = if env.iter().any(|(k, _)| *k == "WATCHDOG_USEC") {
            let mut c = Command::new("sh");
            c.args(["-c", "WATCHDOG_PID=$$ exec \"$0\" \"$@\""])
                .arg(bin);
            c
        } else {
            Command::new(bin)
        };
        cmd.arg("serve")
            .arg("--data")
            .arg(data)
            .args(["--http-listen", &http.to_string()])
            .args([
                "--smb-listen",
                &std::iter::once(smb)
                    .chain(more_smb.iter().map(|ip| SocketAddr::new(*ip, smb.port())))
                    .map(|a| a.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ])
            .args(["--nvme-listen", &nvme.to_string()])
            .args(["--https-listen", &https.to_string()])
            .env("QUARRY_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env(
                "QUARRY_LOG",
                std::env::var("QUARRY_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .context("spawning quarry")
            .map_err(Launch::Failed)?;
        let mut p = QuarryProcess {
            child: Some(child),
            _tempdir: None,
            data: data.to_path_buf(),
            http,
            smb,
            nvme,
            https,
            log,
        };
        match p.wait_healthy() {
            Ok(()) => Ok(p),
            // quarry names the listener it could not bind (serve.rs, `bind`) and exits.
            Err(_) if p.exited() && p.log_text().contains("cannot bind") => {
                Err(Launch::PortTaken(p.log_text()))
            }
            Err(e) => Err(Launch::Failed(e)),
        }
    }

    /// Whether the process has exited (and been reaped).
    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn wait_healthy(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    bail!(
                        "quarry exited during start ({status}); log:\n{}",
                        self.log_text()
                    );
                }
            }
            // A refused or failed request is "not yet": until quarry has bound its port,
            // another process may briefly hold it (free ports are found by binding).
            if TcpStream::connect_timeout(&self.http, Duration::from_millis(200)).is_ok() {
                if let Ok((200, _)) = Api::anonymous(self).get("/api/v1/health") {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "quarry did not become healthy in {START_TIMEOUT:?}; log:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Base URL of the HTTP listener.
    pub fn url(&self) -> String {
        format!("http://{}", self.http)
    }

    /// An API client logged in as `admin`.
    pub fn admin(&self) -> anyhow::Result<Api> {
        self.login("admin", ADMIN_PASSWORD)
    }

    /// An API client logged in as `user`.
    pub fn login(&self, user: &str, password: &str) -> anyhow::Result<Api> {
        let (status, body) = Api::anonymous(self).post(
            "/api/v1/auth/login",
            &serde_json::json!({ "username": user, "password": password }),
        )?;
        if status != 200 {
            bail!("login as {user} failed: {status} {body}");
        }
        let token = body["token"]
            .as_str()
            .context("login answer without token")?
            .to_string();
        Ok(Api::with_token(self, &token))
    }

    /// PID of the running process.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM and waits; returns the exit code.
    pub fn stop(mut self) -> anyhow::Result<i32> {
        self.signal_and_wait(libc::SIGTERM)
    }

    /// Sends SIGKILL and waits (a crash).
    pub fn kill9(mut self) -> anyhow::Result<()> {
        self.signal_and_wait(libc::SIGKILL).map(|_| ())
    }

    fn signal_and_wait(&mut self, signal: i32) -> anyhow::Result<i32> {
        let Some(mut child) = self.child.take() else {
            return Ok(0);
        };
        // SAFETY: sending a signal to our own child process id.
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = child.wait()?;
        Ok(status.code().unwrap_or(128 + signal))
    }
}

impl Drop for QuarryProcess {
    fn drop(&mut self) {
        let _ = self.signal_and_wait(libc::SIGKILL);
    }
}

/// A small REST client: every call returns the status and the JSON body (or
/// `Value::Null` for an empty or non-JSON body).
#[derive(Clone)]
pub struct Api {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Api {
    /// A client without credentials.
    pub fn anonymous(p: &QuarryProcess) -> Api {
        Api::at(&p.url(), None)
    }

    /// A client with a bearer token.
    pub fn with_token(p: &QuarryProcess, token: &str) -> Api {
        Api::at(&p.url(), Some(token.to_string()))
    }

    /// A client for any base URL.
    pub fn at(base: &str, token: Option<String>) -> Api {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        Api {
            base: base.to_string(),
            token,
            agent,
        }
    }

    /// The bearer token, if any.
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    fn finish(
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut resp = resp?;
        let status = resp.status().as_u16();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    fn auth(&self) -> Option<String> {
        self.token.as_ref().map(|t| format!("Bearer {t}"))
    }

    /// GET.
    pub fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let mut req = self.agent.get(format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Self::finish(req.call())
    }

    /// DELETE.
    pub fn delete(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let mut req = self.agent.delete(format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Self::finish(req.call())
    }

    /// POST a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let mut req = self.agent.post(format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Self::finish(req.send_json(body))
    }

    /// POSTs a JSON body that must create something: the created object, or an error
    /// naming the path, the status and the answer. Test set-up (users, shares, volumes)
    /// calls this instead of repeating the status check.
    pub fn create(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let (status, answer) = self.post(path, body)?;
        anyhow::ensure!(status == 201, "POST {path}: {status} {answer}");
        Ok(answer)
    }

    /// Creates the volume `vol` of `size` bytes and exports it as the first namespace of a
    /// new NVMe-oF subsystem `nqn`, open to any host (`hosts` None) or only to `hosts`.
    pub fn export_volume(
        &self,
        vol: &str,
        size: u64,
        nqn: &str,
        hosts: Option<&[&str]>,
    ) -> anyhow::Result<()> {
        self.create(
            "/api/v1/volumes",
            &serde_json::json!({"name": vol, "size_bytes": size}),
        )?;
        let subsystem = match hosts {
            None => serde_json::json!({"nqn": nqn, "allow_any_host": true}),
            Some(h) => serde_json::json!({"nqn": nqn, "allow_any_host": false, "hosts": h}),
        };
        self.create("/api/v1/nvme/subsystems", &subsystem)?;
        self.create(
            &format!("/api/v1/nvme/subsystems/{nqn}/namespaces"),
            &serde_json::json!({"volume": vol}),
        )?;
        Ok(())
    }

    /// PUT a JSON body.
    pub fn put(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let mut req = self.agent.put(format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Self::finish(req.send_json(body))
    }

    /// PATCH a JSON body.
    pub fn patch(&self, path: &str, body: &Value) -> anyhow::Result<(u16, Value)> {
        let mut req = self.agent.patch(format!("{}{path}", self.base));
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        Self::finish(req.send_json(body))
    }

    /// POST raw bytes with a content type (for malformed-body tests).
    pub fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> anyhow::Result<(u16, Value, String)> {
        let mut req = self
            .agent
            .post(format!("{}{path}", self.base))
            .header("Content-Type", content_type);
        if let Some(a) = self.auth() {
            req = req.header("Authorization", a);
        }
        let mut resp = req.send(body)?;
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::Null),
            ctype,
        ))
    }
}
pub mod loopback;
pub mod nvme_initiator;
pub mod read_floor;
pub mod samba;
pub mod smb_workloads;
