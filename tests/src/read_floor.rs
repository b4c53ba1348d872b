//! The least CPU a READ served from the page cache costs this host, measured in the bench's
//! own run so that the servers' CPU per GiB can be read against it.
//!
//! A server that answers a cached READ with the data behind a signed or sealed header
//! (Quarry, and Samba once signing or encryption is on) passes over every byte three
//! times: it copies the bytes out of the page cache, hashes them (AES-GMAC) or encrypts
//! them (AES-128-GCM), and copies them into the socket, which on loopback also delivers
//! them to the receiver's queue. [`ReadFloor::measure`] does exactly those passes on one
//! thread, with nothing around them: `pread` into an aligned buffer on huge pages, Quarry's
//! own GMAC and seal (`quarry_smb::crypto`), and a blocking write to a loopback TCP
//! connection that another thread drains. Each pass is timed with the thread's own CPU
//! clock, so the drain, the other cores and the servers' idle waits are not in it.
//!
//! What it bounds: a server making these passes cannot spend less per GiB on this host,
//! and with the client on the same cores, no such server can move more than
//! `cores / (floor + the client's CPU per GiB)`. A server that hashes or sends from a
//! mapping of the file, or shares one copy among several READs (Quarry's shared reads on
//! a fan-out), can pass below the copy's part.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context};
use quarry_hugemem::HugeBuf;
use quarry_smb::crypto::gmac::GmacKey;
use quarry_smb::crypto::{Cipher, CipherKey, TRANSFORM_HEADER_LEN};

/// Bytes one READ carries: the largest READ Quarry grants (its MaxReadSize), as the bench's
/// client asks for.
pub const PIECE: usize = 8 << 20;
/// Room in front of the data, as in Quarry's pooled READ buffers.
const LEAD: usize = 4096;
/// How long the drain may wait for the next bytes before the measurement counts as hung.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// CPU seconds per GiB of each pass, the least over the passes measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReadFloor {
    /// `pread` out of the page cache into an aligned buffer.
    pub copy: f64,
    /// AES-128-GMAC over the data (a signed READ's signature).
    pub gmac: f64,
    /// AES-128-GCM in place (a sealed READ).
    pub seal: f64,
    /// A blocking write to a loopback TCP connection, the delivery to the receiver included.
    pub send: f64,
    /// Bytes each pass read.
    pub bytes: u64,
}

impl ReadFloor {
    /// Runs the three passes over `files` (already in the page cache) `passes` times, at most
    /// `budget` bytes a pass; each pass's least per-GiB cost over the runs.
    pub fn measure(
        files: &[impl AsRef<Path>],
        budget: u64,
        passes: usize,
    ) -> anyhow::Result<ReadFloor> {
        let mut best: Option<ReadFloor> = None;
        for _ in 0..passes.max(1) {
            let f = one_pass(files, budget)?;
            best = Some(match best {
                None => f,
                Some(b) => b.least(&f),
            });
        }
        best.context("no pass measured")
    }

    /// The cost of a signed READ: copy, GMAC, send.
    pub fn signed(&self) -> f64 {
        self.copy + self.gmac + self.send
    }

    /// The cost of a sealed READ: copy, seal, send.
    pub fn sealed(&self) -> f64 {
        self.copy + self.seal + self.send
    }

    /// Each pass's lesser cost of `self` and `other`.
    pub fn least(&self, other: &ReadFloor) -> ReadFloor {
        ReadFloor {
            copy: self.copy.min(other.copy),
            gmac: self.gmac.min(other.gmac),
            seal: self.seal.min(other.seal),
            send: self.send.min(other.send),
            bytes: self.bytes.max(other.bytes),
        }
    }
}

/// The most MB/s any server making passes that cost `floor` s/GiB could move on `cores`
/// cores, with a client that spends `client` s/GiB on the same cores.
pub fn joint_cap_mbps(floor: f64, client: f64, cores: usize) -> f64 {
    let per_gib = floor + client;
    if per_gib <= 0.0 {
        return f64::INFINITY;
    }
    cores as f64 / per_gib * f64::from(1u32 << 30) / 1e6
}

/// CPU seconds this thread has run.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// One pass of the three passes over up to `budget` bytes of `files`.
fn one_pass(files: &[impl AsRef<Path>], budget: u64) -> anyhow::Result<ReadFloor> {
    let listener = TcpListener::bind("127.0.0.1:0").context("a loopback listener")?;
    let addr = listener.local_addr()?;
    let drain = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        s.set_read_timeout(Some(DRAIN_TIMEOUT))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });
    let mut sock = TcpStream::connect(addr).context("connecting to the drain")?;
    let gmac = GmacKey::new(&[0x5a; 16]);
    let seal = CipherKey::new(Cipher::Aes128Gcm, &[0xa5; 16])?;
    // The data starts a huge page, behind a page of room for headers, as a pooled READ
    // buffer's does in Quarry.
    let mut buf = HugeBuf::new(LEAD + PIECE, LEAD).context("mapping the read buffer")?;
    let mut header = [0u8; TRANSFORM_HEADER_LEN];
    let (mut copy, mut hash, mut sealing, mut send) = (0.0, 0.0, 0.0, 0.0);
    let mut moved = 0u64;
    let mut nonce = 0u64;
    'files: for path in files {
        let path = path.as_ref();
        let file =
            std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut offset = 0u64;
        loop {
            if moved >= budget {
                break 'files;
            }
            let data = buf
                .get_mut(LEAD..LEAD + PIECE)
                .context("the read buffer is shorter than a READ")?;
            let t0 = thread_cpu();
            let n = file.read_at(data, offset)?;
            let t1 = thread_cpu();
            if n == 0 {
                break;
            }
            let data = data.get_mut(..n).context("pread overran its buffer")?;
            nonce += 1;
            let mut gmac_nonce = [0u8; 12];
            gmac_nonce[..8].copy_from_slice(&nonce.to_le_bytes());
            let tag = gmac.tag(data, &gmac_nonce);
            std::hint::black_box(tag);
            let t2 = thread_cpu();
            let mut seal_nonce = [0u8; 16];
            seal_nonce[..8].copy_from_slice(&nonce.to_le_bytes());
            seal.seal(&mut header, &seal_nonce, 1, data)?;
            let t3 = thread_cpu();
            sock.write_all(data)?;
            let t4 = thread_cpu();
            copy += t1 - t0;
            hash += t2 - t1;
            sealing += t3 - t2;
            send += t4 - t3;
            moved += n as u64;
            offset += n as u64;
        }
    }
    drop(sock);
    let drained = drain
        .join()
        .map_err(|_| anyhow::anyhow!("the drain thread panicked"))?
        .context("draining the loopback connection")?;
    ensure!(moved > 0, "no bytes read: the files are empty or missing");
    ensure!(
        drained == moved,
        "the drain received {drained} of {moved} bytes"
    );
    let gib = moved as f64 / f64::from(1u32 << 30);
    Ok(ReadFloor {
        copy: copy / gib,
        gmac: hash / gib,
        seal: sealing / gib,
        send: send / gib,
        bytes: moved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pass_is_timed_and_the_bytes_arrive() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("data");
        std::fs::write(&path, vec![7u8; 3 * PIECE + 4096]).expect("writing");
        let f = ReadFloor::measure(&[&path], u64::MAX, 1).expect("measuring");
        // Every pass did real work over 24 MiB, so each took some CPU time; none is
        // absurd (a GiB in under a millisecond or over a minute).
        for (name, v) in [
            ("copy", f.copy),
            ("gmac", f.gmac),
            ("seal", f.seal),
            ("send", f.send),
        ] {
            assert!(v > 0.001 && v < 60.0, "{name}: {v} s/GiB");
        }
        assert_eq!(f.signed(), f.copy + f.gmac + f.send);
        assert_eq!(f.sealed(), f.copy + f.seal + f.send);
    }

    #[test]
    fn the_budget_stops_a_pass_and_bad_files_fail_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("data");
        std::fs::write(&path, vec![1u8; 2 * PIECE]).expect("writing");
        // A budget below one READ still reads one: the floor is per GiB either way.
        let one = ReadFloor::measure(&[&path, &path], 1, 2).expect("measuring");
        assert_eq!(one.bytes, PIECE as u64);
        let all = ReadFloor::measure(&[&path, &path], u64::MAX, 1).expect("measuring");
        assert_eq!(all.bytes, 4 * PIECE as u64);
        let missing = dir.path().join("missing");
        assert!(ReadFloor::measure(&[&missing], u64::MAX, 1).is_err());
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").expect("writing");
        assert!(ReadFloor::measure(&[&empty], u64::MAX, 1).is_err());
    }

    #[test]
    fn least_takes_each_pass_apart_and_the_cap_follows_the_sum() {
        let a = ReadFloor {
            copy: 0.1,
            gmac: 0.3,
            seal: 0.2,
            send: 0.2,
            bytes: 1,
        };
        let b = ReadFloor {
            copy: 0.2,
            gmac: 0.2,
            seal: 0.3,
            send: 0.1,
            bytes: 1,
        };
        assert_eq!(
            a.least(&b),
            ReadFloor {
                copy: 0.1,
                gmac: 0.2,
                seal: 0.2,
                send: 0.1,
                bytes: 1,
            }
        );
        // 2 cores at 0.5 + 0.5 s/GiB: 2 GiB/s.
        let cap = joint_cap_mbps(0.5, 0.5, 2);
        assert!((cap - 2.0 * 1073.741824).abs() < 1e-6, "{cap}");
        assert!(joint_cap_mbps(0.0, 0.0, 2).is_infinite());
    }
}
