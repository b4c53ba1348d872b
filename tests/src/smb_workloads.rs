//! The MLPerf-Storage-shaped SMB workloads of issue 8's benchmark, driven by the `smb` crate
//! (smb-rs, async Rust) as the client. Each function runs one workload against one server
//! and returns what it moved and how long it took; `smb_bench` runs them A/B against Quarry
//! and Samba and prints the table. Every task is its own client (its own TCP connection and
//! session), the way ranks and readers on separate training nodes would be, and all tasks
//! connect before the clock starts, so the figures are the data path's, not the logon's.
//!
//! The crate sends each READ/WRITE as one request of the size asked, so the bench keeps every
//! request at or below [`IO_MAX`], the largest read and write both servers negotiate.

use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{ensure, Context};
use futures_util::stream::FuturesUnordered;
use futures_util::StreamExt;
use smb::connection::EncryptionMode;
use smb::{
    Client, ClientConfig, ConnectionConfig, CreateOptions, DirAccessMask, Directory,
    FileAccessMask, FileAttributes, FileCreateArgs, FileIdBothDirectoryInformation,
    FileStandardInformation, UncPath,
};
use tokio::sync::Barrier;

/// The largest READ or WRITE the bench sends: 8 MiB, what Quarry and Samba 4.17 negotiate.
pub const IO_MAX: usize = 8 << 20;
const MIB: u64 = 1 << 20;

/// The server, share and credentials a workload connects to.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server's SMB port on 127.0.0.1.
    pub port: u16,
    /// The share's name.
    pub share: String,
    /// The user to log on as.
    pub user: String,
    /// Their password.
    pub password: String,
    /// Whether every message is encrypted (otherwise only signed).
    pub encrypt: bool,
    /// The credits each client keeps asking for (`None`: the `smb` crate's 128, one 8 MiB
    /// READ or WRITE in flight). A client keeps requests in flight only up to its credits.
    pub credits: Option<u16>,
}

/// What one workload did: bytes moved, units counted (files or entries; bytes for the
/// throughput workloads) and the wall time of the measured part.
#[derive(Clone, Copy, Debug)]
pub struct Outcome {
    /// Payload bytes read or written.
    pub bytes: u64,
    /// Files, entries or bytes, whatever the workload's figure counts.
    pub units: u64,
    /// Seconds from the start signal to the last task's end.
    pub secs: f64,
}

impl Outcome {
    /// A throughput workload's outcome: its figure counts bytes.
    fn throughput(bytes: u64, secs: f64) -> Outcome {
        Outcome {
            bytes,
            units: bytes,
            secs,
        }
    }
}

/// One client connected to the target's share: its own connection and session.
pub struct Conn {
    client: Client,
    share: UncPath,
}

/// A client of the `smb` crate for a server on 127.0.0.1:`port` that requires encryption
/// of every message when `encrypt` is set (a session the server does not encrypt then
/// fails) and otherwise signs; `credits` as [`Target::credits`].
pub fn crate_client(port: u16, encrypt: bool, credits: Option<u16>) -> Client {
    Client::new(ClientConfig {
        connection: ConnectionConfig {
            port: Some(port),
            encryption_mode: if encrypt {
                EncryptionMode::Required
            } else {
                EncryptionMode::Allowed
            },
            credits_backlog: credits,
            ..Default::default()
        },
        ..Default::default()
    })
}

impl Target {
    /// Connects a new client (negotiate, session setup, tree connect).
    pub async fn connect(&self) -> anyhow::Result<Conn> {
        let client = crate_client(self.port, self.encrypt, self.credits);
        let share = UncPath::from_str(&format!(r"\\127.0.0.1:{}\{}", self.port, self.share))
            .context("share path")?;
        client
            .share_connect(&share, &self.user, self.password.clone())
            .await
            .with_context(|| format!("connecting to {share}"))?;
        set_nodelay_on_own_sockets();
        Ok(Conn { client, share })
    }

    /// This target with credits for `depth` requests of [`IO_MAX`] in flight per client
    /// (a credit covers 64 KiB), or as it is for a depth of 1.
    fn with_depth(&self, depth: usize) -> Target {
        let credits = (depth > 1)
            .then(|| u16::try_from(depth * (IO_MAX >> 16)).unwrap_or(u16::MAX))
            .or(self.credits);
        Target {
            credits,
            ..self.clone()
        }
    }

    /// Connects `n` clients, one after the other.
    async fn connect_many(&self, n: usize) -> anyhow::Result<Vec<Conn>> {
        let mut conns = Vec::with_capacity(n);
        for _ in 0..n {
            conns.push(self.connect().await?);
        }
        Ok(conns)
    }
}

/// Turns Nagle's algorithm off on every TCP socket of this process.
///
/// The `smb` crate (0.12) leaves `TCP_NODELAY` off. As published, it also wrote each
/// message's 4-byte transport header and its body in separate `write` calls, so every
/// request waited for the server's delayed ACK (40 ms on Linux) and a request/response
/// workload measured that timer, not the server; our copy of its transport sends a message
/// in one write (tests/vendor/smb-transport/QUARRY-PATCH.md). Nagle's algorithm would still
/// hold a request back while an earlier one on the connection is unacknowledged. Real
/// clients (the kernel's cifs, Windows, Samba's libsmb) send without Nagle; the bench does
/// the same by setting the option on its own sockets. Fds that are not TCP sockets refuse
/// the option, which is ignored.
fn set_nodelay_on_own_sockets() {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    for entry in fds.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if is_socket {
            let on: libc::c_int = 1;
            // SAFETY: setsockopt only reads `on` (a live c_int of the given length); on an
            // fd that is not a TCP socket (or was closed meanwhile) it fails with an error
            // code and changes nothing.
            unsafe {
                libc::setsockopt(
                    fd,
                    libc::IPPROTO_TCP,
                    libc::TCP_NODELAY,
                    std::ptr::addr_of!(on).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
        }
    }
}

impl Conn {
    fn path(&self, rel: &str) -> UncPath {
        self.share.clone().with_path(rel)
    }

    /// Creates (or truncates) the file `rel` for writing.
    async fn create(&self, rel: &str) -> anyhow::Result<smb::File> {
        Ok(self
            .client
            .create_file(
                &self.path(rel),
                &FileCreateArgs::make_overwrite(Default::default(), Default::default()),
            )
            .await
            .with_context(|| format!("create {rel}"))?
            .unwrap_file())
    }

    /// Opens the existing file `rel` for reading.
    async fn open_read(&self, rel: &str) -> anyhow::Result<smb::File> {
        Ok(self
            .client
            .create_file(
                &self.path(rel),
                &FileCreateArgs::make_open_existing(FileAccessMask::new().with_generic_read(true)),
            )
            .await
            .with_context(|| format!("open {rel}"))?
            .unwrap_file())
    }

    /// Creates the directory `rel`.
    async fn mkdir(&self, rel: &str) -> anyhow::Result<()> {
        let dir = self
            .client
            .create_file(
                &self.path(rel),
                &FileCreateArgs::make_create_new(
                    FileAttributes::new().with_directory(true),
                    CreateOptions::new().with_directory_file(true),
                ),
            )
            .await
            .with_context(|| format!("mkdir {rel}"))?;
        match dir {
            smb::Resource::Directory(d) => d.close().await?,
            _ => anyhow::bail!("{rel} was created as something other than a directory"),
        }
        Ok(())
    }

    /// Lists the directory `rel` completely; returns how many entries it has besides `.`
    /// and `..`.
    async fn count_entries(&self, rel: &str) -> anyhow::Result<u64> {
        self.count_entries_batched(rel, 0x10000).await
    }

    /// Lists the directory `rel` completely, asking for at most `buffer` bytes of entries
    /// a request; returns how many entries it has besides `.` and `..`.
    pub async fn count_entries_batched(&self, rel: &str, buffer: u32) -> anyhow::Result<u64> {
        let dir = self
            .client
            .create_file(
                &self.path(rel),
                &FileCreateArgs::make_open_existing(
                    DirAccessMask::new()
                        .with_list_directory(true)
                        .with_synchronize(true)
                        .into(),
                ),
            )
            .await
            .with_context(|| format!("open directory {rel}"))?;
        let smb::Resource::Directory(dir) = dir else {
            anyhow::bail!("{rel} is not a directory");
        };
        let dir = Arc::new(dir);
        let mut n = 0u64;
        {
            let mut entries =
                Directory::query_with_options::<FileIdBothDirectoryInformation>(&dir, "*", buffer)
                    .await
                    .with_context(|| format!("query directory {rel}"))?;
            while let Some(e) = entries.next().await {
                let e = e.with_context(|| format!("listing {rel}"))?;
                let name = e.file_name.to_string();
                if name != "." && name != ".." {
                    n += 1;
                }
            }
        }
        dir.close().await?;
        Ok(n)
    }

    /// Reads the file `rel` whole; returns its length. Each request asks for one buffer's
    /// length, and as many requests are in flight as `bufs` holds buffers (each request reads
    /// into a buffer of its own): one buffer is a reader that waits for each answer; a
    /// kernel client's readahead keeps several reads outstanding. Requests go out in file
    /// order; a short answer has its rest asked for again, and the file's end is where an
    /// answer brings nothing (the crate answers a read at or past the end it was told at
    /// open without asking the server).
    async fn read_whole(&self, rel: &str, bufs: &mut Vec<Vec<u8>>) -> anyhow::Result<u64> {
        let file = self.open_read(rel).await?;
        let file_ref = &file;
        let mut in_flight = FuturesUnordered::new();
        let mut rests: Vec<(u64, usize)> = Vec::new();
        let (mut next, mut got, mut at_end) = (0u64, 0u64, false);
        loop {
            while rests.len() + usize::from(!at_end) > 0 {
                let Some(mut buf) = bufs.pop() else { break };
                let (at, len) = rests.pop().unwrap_or_else(|| {
                    let at = next;
                    next += buf.len() as u64;
                    (at, buf.len())
                });
                in_flight.push(async move {
                    let n = file_ref.read_block(&mut buf[..len], at, None, false).await;
                    (at, len, buf, n)
                });
            }
            let Some((at, len, buf, n)) = in_flight.next().await else {
                break;
            };
            bufs.push(buf);
            let n = n.with_context(|| format!("read {rel} at {at}"))?;
            got += n as u64;
            if n == 0 {
                at_end = true;
            } else if n < len {
                rests.push((at + n as u64, len - n));
            }
        }
        drop(in_flight);
        file.close().await?;
        Ok(got)
    }

    /// Opens the existing `rel` for its attributes only, queries its standard information
    /// and closes it (a `stat` over SMB); returns its size.
    async fn stat(&self, rel: &str) -> anyhow::Result<u64> {
        let file = self
            .client
            .create_file(
                &self.path(rel),
                &FileCreateArgs::make_open_existing(
                    FileAccessMask::new().with_file_read_attributes(true),
                ),
            )
            .await
            .with_context(|| format!("open {rel} for its attributes"))?
            .unwrap_file();
        let info: FileStandardInformation = file
            .query_info()
            .await
            .with_context(|| format!("query {rel}"))?;
        file.close().await?;
        Ok(info.end_of_file)
    }

    /// Logs off and closes the connection.
    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// A small xorshift generator: the bench's choices (write sizes, read order) are the same
/// for both servers.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed` (any value; zero is avoided).
    pub fn new(seed: u64) -> Self {
        Rng(seed | 1)
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// Write payloads of 1..=8 MiB, each a prefix of the same pseudo-random bytes, shared so
/// that sending one costs the client no copy.
pub struct Payloads(Vec<Arc<[u8]>>);

impl Payloads {
    /// Builds the eight payloads.
    pub fn new(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let mut base = vec![0u8; IO_MAX];
        for chunk in base.chunks_mut(8) {
            let b = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&b[..chunk.len()]);
        }
        Payloads(
            (1..=IO_MAX / MIB as usize)
                .map(|mib| Arc::from(&base[..mib * MIB as usize]))
                .collect(),
        )
    }

    /// The payload of `mib` MiB (1..=8).
    fn mib(&self, mib: u64) -> Arc<[u8]> {
        self.0[(mib as usize).clamp(1, self.0.len()) - 1].clone()
    }

    /// The first `len` bytes (at most 8 MiB) as a slice.
    fn prefix(&self, len: usize) -> &[u8] {
        let all = &self.0[self.0.len() - 1];
        &all[..len.min(all.len())]
    }
}

/// Runs `work` once per connection, all started together after every connection is up;
/// returns each task's result and the seconds until the last one finished. The
/// connections are closed afterwards (outside the measured time).
async fn run_tasks<T, F, Fut>(conns: Vec<Conn>, work: F) -> anyhow::Result<(Vec<T>, f64)>
where
    T: Send + 'static,
    F: Fn(usize, Arc<Conn>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(conns.len() + 1));
    let mut set = tokio::task::JoinSet::new();
    let mut shared = Vec::with_capacity(conns.len());
    for (i, conn) in conns.into_iter().enumerate() {
        let conn = Arc::new(conn);
        shared.push(conn.clone());
        let fut = work(i, conn);
        let barrier = barrier.clone();
        set.spawn(async move {
            barrier.wait().await;
            let r = fut.await;
            (i, r)
        });
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut results: Vec<Option<T>> = (0..shared.len()).map(|_| None).collect();
    let mut first_err = None;
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, Ok(v))) => results[i] = Some(v),
            Ok((i, Err(e))) => {
                first_err.get_or_insert(e.context(format!("task {i}")));
            }
            Err(e) => {
                first_err.get_or_insert(anyhow::anyhow!("task failed: {e}"));
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    for conn in shared {
        if let Ok(conn) = Arc::try_unwrap(conn) {
            conn.close().await;
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok((results.into_iter().flatten().collect(), secs))
}

/// The checkpoint files of rank `r`: model state (a third) and optimizer state (the rest),
/// whole MiB each, together `rank_mib`.
pub fn checkpoint_files(r: usize, rank_mib: u64) -> [(String, u64); 2] {
    let model = (rank_mib / 3).max(1);
    [
        (format!(r"ckpt\rank{r:02}-model.pt"), model * MIB),
        (
            format!(r"ckpt\rank{r:02}-optimizer.pt"),
            (rank_mib - model).max(1) * MIB,
        ),
    ]
}

/// Checkpoint save: `ranks` writers each write their two files sequentially in writes of
/// 1-8 MiB (sizes drawn per write), then FLUSH and close each. The figure is the total
/// divided by the slowest rank's time (what a training job waits for). Each rank keeps
/// `depth` writes in flight, issued in file order: 1 is a writer that waits for each
/// write; a kernel client's writeback keeps several in flight.
pub async fn checkpoint_write(
    t: &Target,
    ranks: usize,
    rank_mib: u64,
    depth: usize,
) -> anyhow::Result<Outcome> {
    let setup = t.connect().await?;
    setup.mkdir("ckpt").await?;
    setup.close().await;
    let payloads = Arc::new(Payloads::new(0xc4e5));
    let t = t.with_depth(depth);
    let conns = t.connect_many(ranks).await?;
    let (per_rank, _) = run_tasks(conns, |r, conn| {
        let payloads = payloads.clone();
        async move {
            let start = Instant::now();
            let mut rng = Rng::new(0x5eed ^ r as u64);
            let mut bytes = 0u64;
            for (name, len) in checkpoint_files(r, rank_mib) {
                let file = conn.create(&name).await?;
                // The writes' (offset, MiB), drawn as a writer that waits would draw them.
                let mut writes = Vec::new();
                let mut at = 0u64;
                while at < len {
                    let mib = rng.between(1, 8).min((len - at) / MIB);
                    writes.push((at, mib));
                    at += mib * MIB;
                }
                let (file_ref, name_ref, payloads) = (&file, &name, &payloads);
                let mut in_flight = futures_util::stream::iter(writes)
                    .map(|(at, mib)| async move {
                        let n = file_ref
                            .write_block_zc(payloads.mib(mib), at, None)
                            .await
                            .with_context(|| format!("write {name_ref} at {at}"))?;
                        ensure!(
                            n as u64 == mib * MIB,
                            "short write to {name_ref} at {at}: {n}"
                        );
                        anyhow::Ok(())
                    })
                    .buffered(depth);
                while let Some(done) = in_flight.next().await {
                    done?;
                }
                file.flush()
                    .await
                    .with_context(|| format!("flush {name}"))?;
                file.close().await?;
                bytes += len;
            }
            Ok((bytes, start.elapsed().as_secs_f64()))
        }
    })
    .await?;
    Ok(slowest(&per_rank))
}

/// Makes this process's allocator keep the memory it frees for reuse. The `smb` crate
/// allocates fresh buffers for every message it receives. With glibc's defaults, each
/// runtime thread's arena holds its memory in heaps of at most 64 MiB, so a few 8 MiB READ
/// responses in flight outgrow a heap, and a new one is mapped (and unmapped again once
/// empty): the client took a page fault and cleared a page for every 4 KiB of those
/// responses (a sixth of its samples in a cold checkpoint read against a server that keeps
/// many READs in flight). One arena (the main heap, which has no such bound), large blocks
/// taken from it rather than mapped one by one, and its top never given back: the bench's
/// client is then limited by its protocol work, the same for every server, and not by the
/// kernel's page handling. glibc only; a no-op elsewhere.
pub fn keep_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes the allocator's parameters; it is called before the
    // client allocates its buffers, and a refused value leaves the default.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
        // The largest threshold glibc takes: an 8 MiB message comes from the heap.
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// Checkpoint restore: every rank reads its two files back whole (the caller drops the page
/// cache first), `depth` reads in flight. Figure: total over the slowest rank's time.
pub async fn checkpoint_read(
    t: &Target,
    ranks: usize,
    rank_mib: u64,
    depth: usize,
) -> anyhow::Result<Outcome> {
    let conns = t.with_depth(depth).connect_many(ranks).await?;
    let (per_rank, _) = run_tasks(conns, |r, conn| async move {
        let start = Instant::now();
        let mut buf = read_buffers(depth, IO_MAX);
        let mut bytes = 0u64;
        for (name, len) in checkpoint_files(r, rank_mib) {
            let got = conn.read_whole(&name, &mut buf).await?;
            ensure!(got == len, "{name}: read {got} bytes of {len}");
            bytes += got;
        }
        Ok((bytes, start.elapsed().as_secs_f64()))
    })
    .await?;
    Ok(slowest(&per_rank))
}

/// `depth` zeroed buffers of `len` bytes for [`Conn::read_whole`]: one per read in flight.
fn read_buffers(depth: usize, len: usize) -> Vec<Vec<u8>> {
    (0..depth).map(|_| vec![0u8; len]).collect()
}

fn slowest(per_task: &[(u64, f64)]) -> Outcome {
    let bytes = per_task.iter().map(|p| p.0).sum();
    let secs = per_task.iter().map(|p| p.1).fold(0.0, f64::max);
    Outcome::throughput(bytes, secs)
}

/// The training set: `count` files named `train\sample-NNNNN.npz` of `mean_mib` MiB ±50%
/// (whole KiB), the same list for every server.
pub fn training_set(count: usize, mean_mib: u64) -> Vec<(String, u64)> {
    let mut rng = Rng::new(0x7a1);
    let mean_kib = mean_mib * 1024;
    (0..count)
        .map(|i| {
            let kib = rng.between(mean_kib / 2, mean_kib * 3 / 2);
            (format!(r"train\sample-{i:05}.npz"), kib * 1024)
        })
        .collect()
}

/// Training epoch (3D-UNet shape): `readers` tasks take the files in one shuffled order and
/// read each whole, `depth` reads in flight. Figure: bytes over the epoch's time.
pub async fn training_read(
    t: &Target,
    files: &[(String, u64)],
    readers: usize,
    depth: usize,
) -> anyhow::Result<Outcome> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    let mut rng = Rng::new(0x5f0f);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.between(0, i as u64) as usize);
    }
    let queue: Arc<Vec<(String, u64)>> =
        Arc::new(order.iter().map(|&i| files[i].clone()).collect());
    let next = Arc::new(AtomicUsize::new(0));
    let conns = t.with_depth(depth).connect_many(readers).await?;
    let (per_reader, secs) = run_tasks(conns, |_, conn| {
        let (queue, next) = (queue.clone(), next.clone());
        async move {
            let mut buf = read_buffers(depth, IO_MAX);
            let mut bytes = 0u64;
            while let Some((name, len)) = queue.get(next.fetch_add(1, Ordering::Relaxed)) {
                let got = conn.read_whole(name, &mut buf).await?;
                ensure!(got == *len, "{name}: read {got} bytes of {len}");
                bytes += got;
            }
            Ok(bytes)
        }
    })
    .await?;
    Ok(Outcome::throughput(per_reader.iter().sum(), secs))
}

/// Inference fan-out: `readers` clients read the same weights file whole at once, `depth`
/// reads in flight each. Figure: aggregate bytes over the time until the last reader is done.
pub async fn fanout_read(
    t: &Target,
    file: &str,
    len: u64,
    readers: usize,
    depth: usize,
) -> anyhow::Result<Outcome> {
    let conns = t.with_depth(depth).connect_many(readers).await?;
    let name = Arc::new(file.to_string());
    let (per_reader, secs) = run_tasks(conns, |_, conn| {
        let name = name.clone();
        async move {
            let mut buf = read_buffers(depth, IO_MAX);
            let got = conn.read_whole(&name, &mut buf).await?;
            ensure!(got == len, "{name}: read {got} bytes of {len}");
            Ok(got)
        }
    })
    .await?;
    Ok(Outcome::throughput(per_reader.iter().sum(), secs))
}

/// The small-file data set: file `i` lives in directory `i % dirs` and is 16-128 KiB long.
fn small_file(i: usize, dirs: usize) -> (String, usize) {
    (
        format!(r"small\d{:03}\f{i:06}.dat", i % dirs),
        16 * 1024 + (i * 7919 % (112 * 1024)),
    )
}

/// Dataset preparation (CosmoFlow/ResNet shape): make `dirs` directories, then `workers`
/// clients create and write `files` files of 16-128 KiB across them. Figure: files/s.
pub async fn small_write(
    t: &Target,
    files: usize,
    dirs: usize,
    workers: usize,
) -> anyhow::Result<Outcome> {
    let payloads = Arc::new(Payloads::new(0x5a11));
    let mut conns = t.connect_many(workers).await?;
    let mkdirs = conns.remove(0);
    let start = Instant::now();
    mkdirs.mkdir("small").await?;
    for d in 0..dirs {
        mkdirs.mkdir(&format!(r"small\d{d:03}")).await?;
    }
    let mkdir_secs = start.elapsed().as_secs_f64();
    conns.insert(0, mkdirs);
    let (per_worker, secs) = run_tasks(conns, |w, conn| {
        let payloads = payloads.clone();
        async move {
            let mut bytes = 0u64;
            for i in (w..files).step_by(workers) {
                let (name, len) = small_file(i, dirs);
                let file = conn.create(&name).await?;
                let n = file
                    .write_block(payloads.prefix(len), 0, None)
                    .await
                    .with_context(|| format!("write {name}"))?;
                ensure!(n == len, "short write to {name}: {n} of {len}");
                file.close().await?;
                bytes += len as u64;
            }
            Ok(bytes)
        }
    })
    .await?;
    Ok(Outcome {
        bytes: per_worker.iter().sum(),
        units: files as u64,
        secs: secs + mkdir_secs,
    })
}

/// Lists the small-file directories, spread over `workers` clients; every file must be
/// seen. Figure: entries/s.
pub async fn small_list(
    t: &Target,
    files: usize,
    dirs: usize,
    workers: usize,
) -> anyhow::Result<Outcome> {
    let conns = t.connect_many(workers).await?;
    let (counts, secs) = run_tasks(conns, |w, conn| async move {
        let mut n = 0u64;
        for d in (w..dirs).step_by(workers) {
            n += conn.count_entries(&format!(r"small\d{d:03}")).await?;
        }
        Ok(n)
    })
    .await?;
    let seen: u64 = counts.iter().sum();
    ensure!(seen == files as u64, "listing saw {seen} of {files} files");
    Ok(Outcome {
        bytes: 0,
        units: seen,
        secs,
    })
}

/// Reads every small file back whole, spread over `workers` clients. Figure: files/s.
pub async fn small_read(
    t: &Target,
    files: usize,
    dirs: usize,
    workers: usize,
) -> anyhow::Result<Outcome> {
    let conns = t.connect_many(workers).await?;
    let (per_worker, secs) = run_tasks(conns, |w, conn| async move {
        let mut buf = read_buffers(1, 128 * 1024);
        let mut bytes = 0u64;
        for i in (w..files).step_by(workers) {
            let (name, len) = small_file(i, dirs);
            let got = conn.read_whole(&name, &mut buf).await?;
            ensure!(got == len as u64, "{name}: read {got} bytes of {len}");
            bytes += got;
        }
        Ok(bytes)
    })
    .await?;
    Ok(Outcome {
        bytes: per_worker.iter().sum(),
        units: files as u64,
        secs,
    })
}

/// Metadata: opens, queries and closes every small file, spread over `workers` clients;
/// every size must match what was written. Figure: files/s.
pub async fn small_stat(
    t: &Target,
    files: usize,
    dirs: usize,
    workers: usize,
) -> anyhow::Result<Outcome> {
    let conns = t.connect_many(workers).await?;
    let (counts, secs) = run_tasks(conns, |w, conn| async move {
        let mut n = 0u64;
        for i in (w..files).step_by(workers) {
            let (name, len) = small_file(i, dirs);
            let size = conn.stat(&name).await?;
            ensure!(size == len as u64, "{name}: size {size}, written {len}");
            n += 1;
        }
        Ok(n)
    })
    .await?;
    Ok(Outcome {
        bytes: 0,
        units: counts.iter().sum(),
        secs,
    })
}

/// Lists one large directory `rel` of `entries` files with one client. Figure: entries/s.
pub async fn list_large(t: &Target, rel: &str, entries: u64) -> anyhow::Result<Outcome> {
    let conns = t.connect_many(1).await?;
    let name = Arc::new(rel.to_string());
    let (counts, secs) = run_tasks(conns, |_, conn| {
        let name = name.clone();
        async move { conn.count_entries(&name).await }
    })
    .await?;
    let seen = counts.iter().sum();
    ensure!(
        seen == entries,
        "listing {rel} saw {seen} of {entries} entries"
    );
    Ok(Outcome {
        bytes: 0,
        units: seen,
        secs,
    })
}

/// Piece size of [`write_then_read_back`]: several requests for a multi-MiB file.
const ROUND_TRIP_PIECE: usize = 1 << 20;

/// Writes `data` to `path` (created or overwritten) in 1 MiB pieces, closes it, reopens it
/// for reading and reads it back in 1 MiB pieces: the interop tests' round trip through a
/// client whose share is already connected. Each write must take its whole piece.
pub async fn write_then_read_back(
    client: &Client,
    path: &UncPath,
    data: &[u8],
) -> smb::Result<Vec<u8>> {
    write_then_read_back_in(client, path, data, ROUND_TRIP_PIECE).await
}

/// [`write_then_read_back`] in requests of `piece` bytes (at most the server's largest).
pub async fn write_then_read_back_in(
    client: &Client,
    path: &UncPath,
    data: &[u8],
    piece: usize,
) -> smb::Result<Vec<u8>> {
    use smb::{ReadAt, WriteAt};
    let file = client
        .create_file(
            path,
            &FileCreateArgs::make_overwrite(Default::default(), Default::default()),
        )
        .await?
        .unwrap_file();
    for (i, chunk) in data.chunks(piece).enumerate() {
        let at = i * piece;
        let n = file.write_at(chunk, at as u64).await?;
        assert_eq!(n, chunk.len(), "short write at {at}");
    }
    file.close().await?;
    let file = client
        .create_file(
            path,
            &FileCreateArgs::make_open_existing(FileAccessMask::new().with_generic_read(true)),
        )
        .await?
        .unwrap_file();
    let mut back = vec![0u8; data.len()];
    let mut at = 0;
    while at < back.len() {
        let end = (at + piece).min(back.len());
        let n = file.read_at(&mut back[at..end], at as u64).await?;
        assert!(n > 0, "unexpected end of file at {at}");
        at += n;
    }
    file.close().await?;
    Ok(back)
}
