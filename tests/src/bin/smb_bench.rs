//! SMB benchmark (issue 8): Quarry against a private Samba `smbd` on the same machine and
//! file system, driven by the same client (Samba's `smbclient`, one process per stream),
//! A/B alternating, with signing and with encryption. Prints one table: each workload's
//! figure for Quarry and for Samba, the ratio, and each server's CPU seconds per GiB moved
//! (Quarry's process; smbd's parent, reaped and live children). Raw smbclient output and
//! the table go to `--out`. Run on demand, never part of the test suite's pass/fail:
//!
//! ```sh
//! cargo build --release -p quarry -p quarry-tests
//! QUARRY_BIN=target/release/quarry target/release/smb_bench [--size-mib 256] [--streams 4] [--files 2000] [--runs 2] [--out DIR]
//! ```
//!
//! Workloads, scaled from the issue's MLPerf Storage shapes to a 2-core machine:
//! checkpoint write (each stream puts its own file), checkpoint read (each stream gets its
//! file back), fan-out (twice as many streams read the same file), small files (one
//! `mput` of many 16-128 KiB files into a directory, then one `mget` back).
//! smbclient keeps a few requests in flight per stream and costs about as much CPU as a
//! server: on 2 cores the client is often the limit, so CPU per GiB is the deciding figure.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use quarry_tests::procstat::{cpu_seconds, tree_cpu_seconds};
use quarry_tests::{free_port, QuarryProcess};
use serde_json::json;

const USER: &str = "quarrybench";
const PASS: &str = "bench-Secret-42";
const SHARE: &str = "bench";

struct Args {
    size_mib: u64,
    streams: usize,
    files: usize,
    runs: usize,
    out: PathBuf,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        size_mib: 256,
        streams: 4,
        files: 2000,
        runs: 2,
        out: PathBuf::from("target/bench/smb"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().with_context(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--size-mib" => a.size_mib = value()?.parse()?,
            "--streams" => a.streams = value()?.parse()?,
            "--files" => a.files = value()?.parse()?,
            "--runs" => a.runs = value()?.parse()?,
            "--out" => a.out = PathBuf::from(value()?),
            "-h" | "--help" => {
                println!(
                    "smb_bench [--size-mib N] [--streams N] [--files N] [--runs N] [--out DIR]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}"),
        }
    }
    ensure!(
        a.size_mib >= 16 && a.streams >= 1 && a.files >= 10 && a.runs >= 1,
        "--size-mib >= 16, --streams >= 1, --files >= 10, --runs >= 1"
    );
    Ok(a)
}

/// One SMB server under test.
struct Server {
    name: &'static str,
    port: u16,
    /// Where the share lives on the local file system.
    share_dir: PathBuf,
    /// CPU seconds used so far by the server's processes.
    cpu: Box<dyn Fn() -> f64>,
}

/// A private smbd: its own smb.conf, state directories and share in `dir`, foreground.
struct Smbd {
    child: Child,
}

impl Drop for Smbd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ensure_unix_user() -> anyhow::Result<()> {
    let known = Command::new("id")
        .arg(USER)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    if !known.success() {
        let st = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", USER])
            .status()?;
        ensure!(
            st.success(),
            "useradd {USER} failed (the bench runs smbd as root)"
        );
    }
    Ok(())
}

fn start_smbd(dir: &Path, port: u16) -> anyhow::Result<(Smbd, PathBuf)> {
    let share = dir.join("share");
    for d in ["share", "private", "lock", "state", "cache", "pid", "log"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    let conf = dir.join("smb.conf");
    let p = |d: &str| dir.join(d).display().to_string();
    // Settings a tuned deployment would use: asynchronous I/O for every size, no NetBIOS,
    // signing required like Quarry's default, encryption when the client asks.
    std::fs::write(
        &conf,
        format!(
            "[global]\n  smb ports = {port}\n  interfaces = 127.0.0.1\n  bind interfaces only = yes\n  \
             private dir = {}\n  lock directory = {}\n  state directory = {}\n  cache directory = {}\n  \
             pid directory = {}\n  log file = {}/log.%m\n  log level = 0\n  disable netbios = yes\n  \
             load printers = no\n  printing = bsd\n  printcap name = /dev/null\n  \
             server signing = mandatory\n  server min protocol = SMB2_02\n  server smb encrypt = if_required\n  \
             aio read size = 1\n  aio write size = 1\n  socket options = TCP_NODELAY\n\
             [{SHARE}]\n  path = {}\n  read only = no\n  force user = root\n",
            p("private"), p("lock"), p("state"), p("cache"), p("pid"), p("log"), share.display()
        ),
    )?;
    ensure_unix_user()?;
    let mut pw = Command::new("smbpasswd")
        .args(["-c", &conf.display().to_string(), "-s", "-a", USER])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .context("smbpasswd (Debian package samba)")?;
    {
        use std::io::Write;
        let mut stdin = pw.stdin.take().context("smbpasswd stdin")?;
        writeln!(stdin, "{PASS}\n{PASS}")?;
    }
    ensure!(pw.wait()?.success(), "smbpasswd failed");
    let child = Command::new("smbd")
        .args(["--foreground", "--no-process-group", "-s"])
        .arg(&conf)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("smbd (Debian package samba)")?;
    let smbd = Smbd { child };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        ensure!(Instant::now() < deadline, "smbd did not listen on {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((smbd, share))
}

/// Runs one smbclient with `commands`; returns its wall time. Output is appended to `log`.
fn smbclient(port: u16, mode: &str, commands: &str, log: &Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Ok(Command::new("smbclient")
        .arg(format!("//127.0.0.1/{SHARE}"))
        .args([
            "-p",
            &port.to_string(),
            "-U",
            &format!("{USER}%{PASS}"),
            "-m",
            "SMB3_11",
        ])
        .arg(format!("--client-protection={mode}"))
        .args(["-c", commands])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?)
}

/// Runs the clients in parallel; returns the slowest one's wall time.
fn parallel(port: u16, mode: &str, commands: &[String], log: &Path) -> anyhow::Result<f64> {
    let start = Instant::now();
    let children = commands
        .iter()
        .map(|c| smbclient(port, mode, c, log))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut slowest = 0.0f64;
    for mut c in children {
        let st = c.wait()?;
        ensure!(
            st.success(),
            "smbclient failed ({st}); see {}",
            log.display()
        );
        slowest = slowest.max(start.elapsed().as_secs_f64());
    }
    Ok(slowest)
}

/// One measured figure.
struct Figure {
    value: f64,
    cpu_per_gib: f64,
}

/// Measures `run` on `server`: (figure from bytes or files and seconds, server CPU/GiB).
fn measure(
    server: &Server,
    bytes: u64,
    units: f64,
    run: impl FnOnce() -> anyhow::Result<f64>,
) -> anyhow::Result<Figure> {
    let cpu0 = (server.cpu)();
    let secs = run()?;
    // Let smbd reap its per-connection children so their time lands in cutime.
    std::thread::sleep(Duration::from_millis(300));
    let cpu = (server.cpu)() - cpu0;
    Ok(Figure {
        value: units / secs,
        cpu_per_gib: cpu / (bytes as f64 / f64::from(1u32 << 30)),
    })
}

fn make_sources(dir: &Path, a: &Args) -> anyhow::Result<(Vec<PathBuf>, PathBuf, u64)> {
    std::fs::create_dir_all(dir)?;
    let mut big = Vec::new();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut fill = |buf: &mut [u8]| {
        for chunk in buf.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let b = x.to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
    };
    let mut block = vec![0u8; 1 << 20];
    for i in 0..a.streams {
        let path = dir.join(format!("rank{i}.bin"));
        let mut f = std::fs::File::create(&path)?;
        for _ in 0..a.size_mib {
            fill(&mut block);
            std::io::Write::write_all(&mut f, &block)?;
        }
        big.push(path);
    }
    let small = dir.join("small");
    std::fs::create_dir_all(&small)?;
    let mut small_bytes = 0u64;
    for i in 0..a.files {
        let len = 16 * 1024 + (i * 7919 % (112 * 1024));
        fill(&mut block[..len]);
        std::fs::write(small.join(format!("f{i:06}.dat")), &block[..len])?;
        small_bytes += len as u64;
    }
    Ok((big, small, small_bytes))
}

/// Loopback TCP ceiling: one sender, one receiver, 1 MiB writes, `bytes` in all; MB/s.
fn loopback_tcp_mbps(bytes: u64) -> anyhow::Result<f64> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let reader = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok(total);
            }
            total += n as u64;
        }
    });
    let mut s = std::net::TcpStream::connect(addr)?;
    let chunk = vec![0x5au8; 1 << 20];
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < bytes {
        s.write_all(&chunk)?;
        sent += chunk.len() as u64;
    }
    drop(s);
    let got = reader
        .join()
        .map_err(|_| anyhow::anyhow!("loopback reader panicked"))??;
    ensure!(got == sent, "loopback: sent {sent}, received {got}");
    Ok(sent as f64 / 1e6 / start.elapsed().as_secs_f64())
}

/// The share file system's ceiling: fio sequential 1 MiB O_DIRECT write then read of
/// `size_mib` in `dir`; (write MB/s, read MB/s).
fn fio_ceiling(dir: &Path, size_mib: u64, out: &Path) -> anyhow::Result<(f64, f64)> {
    let mut figures = [0.0f64; 2];
    for (i, rw) in ["write", "read"].into_iter().enumerate() {
        let output = Command::new("fio")
            .args([
                "--name=ceiling",
                &format!("--directory={}", dir.display()),
                "--filename=fio-ceiling.bin",
                &format!("--rw={rw}"),
                "--bs=1M",
                "--iodepth=8",
                "--ioengine=io_uring",
                "--direct=1",
                &format!("--size={size_mib}M"),
                "--output-format=json",
            ])
            .output()
            .context("running fio (apt-get install fio)")?;
        ensure!(
            output.status.success(),
            "fio failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::write(out.join(format!("fio-{rw}.json")), &output.stdout)?;
        let v: serde_json::Value = serde_json::from_slice(&output.stdout).context("fio JSON")?;
        figures[i] = v["jobs"][0][rw]["bw_bytes"].as_f64().unwrap_or(0.0) / 1e6;
    }
    let _ = std::fs::remove_file(dir.join("fio-ceiling.bin"));
    Ok((figures[0], figures[1]))
}

fn clear_share(dir: &Path) -> anyhow::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    std::fs::create_dir_all(&a.out)?;
    let out = a.out.canonicalize()?;
    let work = tempfile::tempdir()?;
    println!(
        "SMB bench: quarry {} vs Samba smbd, {} streams x {} MiB, {} small files, best of {} A/B runs, raw output in {}",
        quarry_tests::quarry_bin()?.display(),
        a.streams,
        a.size_mib,
        a.files,
        a.runs,
        out.display()
    );
    let (sources, small_dir, small_bytes) = make_sources(&work.path().join("src"), &a)?;

    let q = QuarryProcess::start()?;
    let api = q.admin()?;
    let (s, b) = api.post("/api/v1/users", &json!({"name": USER, "password": PASS}))?;
    ensure!(s == 201, "user: {s} {b}");
    let (s, b) = api.post("/api/v1/shares", &json!({"name": SHARE, "users": [USER]}))?;
    ensure!(s == 201, "share: {s} {b}");
    let qpid = q.pid().context("quarry pid")?;
    let quarry = Server {
        name: "quarry",
        port: q.smb.port(),
        share_dir: q.data.join("pool").join("shares").join(SHARE),
        cpu: Box::new(move || cpu_seconds(qpid).unwrap_or(0.0)),
    };
    let smbd_port = free_port()?;
    let (smbd, smbd_share) = start_smbd(&work.path().join("smbd"), smbd_port)?;
    let spid = smbd.child.id();
    let samba = Server {
        name: "samba",
        port: smbd_port,
        share_dir: smbd_share,
        cpu: Box::new(move || tree_cpu_seconds(spid).unwrap_or(0.0)),
    };

    let tcp = loopback_tcp_mbps(4 << 30)?;
    let (fio_w, fio_r) = fio_ceiling(&quarry.share_dir, a.size_mib * a.streams as u64, &out)?;
    let ceilings = format!(
        "Ceilings measured in this run: loopback TCP {tcp:.0} MB/s (one stream); the share's file system with fio O_DIRECT 1 MiB: write {fio_w:.0} MB/s, read {fio_r:.0} MB/s\n"
    );
    print!("{ceilings}");
    let big_bytes = a.size_mib * (1 << 20) * a.streams as u64;
    let mut rows: Vec<String> = Vec::new();
    for mode in ["sign", "encrypt"] {
        // (workload, unit, best figure per server)
        let mut best: Vec<(&str, &str, [Option<Figure>; 2])> = vec![
            ("checkpoint write", "MB/s", [None, None]),
            ("checkpoint read", "MB/s", [None, None]),
            ("fan-out read", "MB/s", [None, None]),
            ("small files write", "files/s", [None, None]),
            ("small files read", "files/s", [None, None]),
        ];
        for run in 0..a.runs {
            for (si, server) in [&quarry, &samba].into_iter().enumerate() {
                let log = out.join(format!("{}-{mode}-run{run}.log", server.name));
                clear_share(&server.share_dir)?;
                let puts: Vec<String> = sources
                    .iter()
                    .enumerate()
                    .map(|(i, s)| format!("put {} rank{i}.bin", s.display()))
                    .collect();
                let figs = [
                    measure(server, big_bytes, big_bytes as f64 / 1e6, || {
                        parallel(server.port, mode, &puts, &log)
                    })?,
                    {
                        let gets: Vec<String> = (0..a.streams)
                            .map(|i| format!("get rank{i}.bin /dev/null"))
                            .collect();
                        measure(server, big_bytes, big_bytes as f64 / 1e6, || {
                            parallel(server.port, mode, &gets, &log)
                        })?
                    },
                    {
                        let fan: Vec<String> = (0..a.streams * 2)
                            .map(|_| "get rank0.bin /dev/null".to_string())
                            .collect();
                        let bytes = a.size_mib * (1 << 20) * (a.streams as u64 * 2);
                        measure(server, bytes, bytes as f64 / 1e6, || {
                            parallel(server.port, mode, &fan, &log)
                        })?
                    },
                    {
                        let cmd = format!(
                            "prompt off; lcd {}; mkdir small; cd small; mput *",
                            small_dir.display()
                        );
                        measure(server, small_bytes, a.files as f64, || {
                            parallel(server.port, mode, &[cmd], &log)
                        })?
                    },
                    {
                        let back = work.path().join(format!("back-{}", server.name));
                        let _ = std::fs::remove_dir_all(&back);
                        std::fs::create_dir_all(&back)?;
                        let cmd = format!("prompt off; lcd {}; cd small; mget *", back.display());
                        let f = measure(server, small_bytes, a.files as f64, || {
                            parallel(server.port, mode, &[cmd], &log)
                        })?;
                        let n = std::fs::read_dir(&back)?.count();
                        ensure!(
                            n == a.files,
                            "{}: mget brought back {n} of {} files",
                            server.name,
                            a.files
                        );
                        f
                    },
                ];
                for (slot, fig) in best.iter_mut().zip(figs) {
                    let keep = slot.2[si].as_ref().is_none_or(|b| fig.value > b.value);
                    if keep {
                        slot.2[si] = Some(fig);
                    }
                }
            }
        }
        for (name, unit, [qf, sf]) in best {
            let (qf, sf) = (
                qf.context("no quarry figure")?,
                sf.context("no samba figure")?,
            );
            rows.push(format!(
                "| {name} | {mode} | {:.0} {unit} | {:.0} {unit} | {:.2}x | {:.2} | {:.2} | {:.2} |",
                qf.value,
                sf.value,
                qf.value / sf.value,
                qf.cpu_per_gib,
                sf.cpu_per_gib,
                if qf.cpu_per_gib > 0.0 { sf.cpu_per_gib / qf.cpu_per_gib } else { 0.0 },
            ));
        }
    }
    let mut table = String::from(
        "| workload | protection | Quarry | Samba | Quarry/Samba | Quarry CPU s/GiB | Samba CPU s/GiB | Samba/Quarry CPU |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for r in rows {
        table.push_str(&r);
        table.push('\n');
    }
    println!("{table}");
    std::fs::write(out.join("table.md"), format!("{ceilings}\n{table}"))?;
    drop(smbd);
    q.stop()?;
    Ok(())
}
