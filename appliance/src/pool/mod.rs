//! The pool: where shares' files and volumes' blocks live, always at `DATA/pool` with
//! each share in `shares/NAME` and each volume a sparse file in `volumes/`. Two backends
//! sit behind the same calls ([`Backend`]): the embedded default, a plain directory, and
//! the managed pool, a btrfs file system over chosen devices mounted on `DATA/pool`, where
//! each share is a subvolume and volumes are NOCOW files in the `volumes` subvolume.
//! [`managed`] creates, imports, watches and repairs the btrfs pool.

pub mod btrfs;
pub mod devices;
pub mod managed;
pub mod nvme_admin;
pub mod quota;
mod scan;
pub mod snapshots;

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

pub use quota::{QuotaExceeded, ShareQuota};

use crate::db::Share;

/// Capacity figures of the pool's file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Total bytes.
    pub size_bytes: u64,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes available to unprivileged writers.
    pub available_bytes: u64,
}

/// Which file system holds the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A directory on whatever file system holds the data directory.
    Directory,
    /// The managed btrfs pool mounted on the pool root.
    Btrfs {
        /// File system UUID.
        uuid: String,
        /// Data profile.
        profile: String,
    },
}

/// The pool (historically only the embedded directory pool, hence the name): resolves
/// share roots and volume files for the services, whatever the [`Backend`].
pub struct DirectoryPool {
    root: PathBuf,
    /// Quota trackers keyed by lower-cased share name (share names are case-insensitive).
    quotas: RwLock<HashMap<String, Arc<ShareQuota>>>,
    backend: RwLock<Backend>,
    /// Last health check of the managed pool.
    health: RwLock<managed::Health>,
    /// Held while a health check runs and is stored, so checks store in the order they ran.
    health_check: std::sync::Mutex<()>,
    /// Set while a managed pool is being created: no datasets may appear meanwhile.
    creating: std::sync::atomic::AtomicBool,
    /// Wakes the health poller for an immediate check (after a replace, an add, ...).
    pub kick: tokio::sync::Notify,
}

fn key(share: &str) -> String {
    share.to_ascii_lowercase()
}

impl DirectoryPool {
    /// Opens (creating) the pool directory layout under `root`.
    pub fn open(root: &Path) -> io::Result<DirectoryPool> {
        fs::create_dir_all(root.join("shares"))?;
        fs::create_dir_all(root.join("volumes"))?;
        Ok(DirectoryPool {
            root: root.to_path_buf(),
            quotas: RwLock::new(HashMap::new()),
            backend: RwLock::new(Backend::Directory),
            health: RwLock::new(managed::Health::default()),
            health_check: std::sync::Mutex::new(()),
            creating: std::sync::atomic::AtomicBool::new(false),
            kick: tokio::sync::Notify::new(),
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> Backend {
        self.backend
            .read()
            .map(|b| b.clone())
            .unwrap_or(Backend::Directory)
    }

    /// Switches the backend (after a managed pool was created or imported).
    pub fn set_backend(&self, backend: Backend) {
        let mut b = self.backend.write().unwrap_or_else(|p| p.into_inner());
        *b = backend;
    }

    /// Whether the pool's storage is there: always for the directory pool; for the managed
    /// pool, whether its btrfs is mounted on the pool root.
    pub fn is_mounted(&self) -> bool {
        !self.is_btrfs()
            || btrfs::is_btrfs_mountpoint(
                &fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
                &self.root,
            )
    }

    /// Whether the managed btrfs pool is in use.
    pub fn is_btrfs(&self) -> bool {
        matches!(self.backend(), Backend::Btrfs { .. })
    }

    /// The last health check.
    pub fn health(&self) -> managed::Health {
        self.health.read().map(|h| h.clone()).unwrap_or_default()
    }

    /// Runs `check` on the pool root and stores its result, one check at a time: a
    /// poller's check that began before a job changed the pool cannot land after the
    /// job's own check and hide the change.
    pub fn store_health_of(&self, check: impl FnOnce(&Path) -> managed::Health) -> managed::Health {
        let _one_at_a_time = self.health_check.lock().unwrap_or_else(|p| p.into_inner());
        let health = check(&self.root);
        let mut h = self.health.write().unwrap_or_else(|p| p.into_inner());
        *h = health.clone();
        health
    }

    /// Marks (or clears) a managed pool creation in progress; returns false when one was
    /// already marked.
    pub fn set_creating(&self, on: bool) -> bool {
        use std::sync::atomic::Ordering;
        if on {
            self.creating
                .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        } else {
            self.creating.store(false, Ordering::SeqCst);
            true
        }
    }

    /// Whether a managed pool is being created.
    pub fn is_creating(&self) -> bool {
        self.creating.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The pool's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the data of a snapshot recorded at `rel` (relative to the pool root) lives.
    pub fn snapshot_root(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Directory of a share's files. Share names are validated (no separators), so the
    /// join cannot leave the pool.
    pub fn share_root(&self, share: &str) -> PathBuf {
        let canonical = self
            .existing_share_dir(share)
            .unwrap_or_else(|| share.to_string());
        self.root.join("shares").join(canonical)
    }

    /// Finds the on-disk spelling of a share directory, whatever case the caller used.
    fn existing_share_dir(&self, share: &str) -> Option<String> {
        let dir = self.root.join("shares");
        if dir.join(share).is_dir() {
            return Some(share.to_string());
        }
        fs::read_dir(dir).ok()?.flatten().find_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.eq_ignore_ascii_case(share).then_some(name)
        })
    }

    /// Creates the directory of a dataset (`shares/NAME`) if it does not exist; on the
    /// btrfs pool a dataset is a subvolume.
    pub fn create_dataset(&self, dataset: &str) -> io::Result<()> {
        if self.is_creating() {
            return Err(io::Error::from_raw_os_error(libc::EBUSY));
        }
        let path = self.root.join(dataset);
        if !self.is_btrfs() || path.exists() {
            return fs::create_dir_all(path);
        }
        if !self.is_mounted() {
            // Never create a share in the directory beneath an unmounted pool.
            return Err(io::Error::other(
                "the managed pool is not mounted (see GET /api/v1/pool)",
            ));
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        let p = path.to_string_lossy();
        btrfs::run("btrfs", &["subvolume", "create", &p], btrfs::QUICK)
            .map(|_| ())
            .map_err(io::Error::other)
    }

    /// The quota tracker of a share (a fresh unlimited one if the share is unknown, which
    /// only happens in the instant between an API delete and the SMB tree disconnect).
    pub fn share_quota(&self, share: &str) -> Arc<ShareQuota> {
        let k = key(share);
        if let Some(q) = self.quotas.read().ok().and_then(|m| m.get(&k).cloned()) {
            return q;
        }
        let mut map = self.quotas.write().unwrap_or_else(|p| p.into_inner());
        map.entry(k)
            .or_insert_with(|| Arc::new(ShareQuota::new(None, 0)))
            .clone()
    }

    /// Starts tracking a share, or updates its quota. A share seen for the first time
    /// has its usage measured by a scan of its directory (blocking: call from a
    /// blocking context).
    pub fn register_share(&self, share: &Share) -> Arc<ShareQuota> {
        let k = key(&share.name);
        let existing = self.quotas.read().ok().and_then(|m| m.get(&k).cloned());
        match existing {
            Some(q) => {
                q.set_limit(share.quota_bytes);
                q
            }
            None => {
                let used = scan::apparent_size(&self.share_root(&share.name));
                let q = Arc::new(ShareQuota::new(share.quota_bytes, used));
                let mut map = self.quotas.write().unwrap_or_else(|p| p.into_inner());
                map.entry(k).or_insert(q).clone()
            }
        }
    }

    /// Stops tracking a share and deletes its files.
    pub fn remove_share(&self, share: &Share) -> io::Result<()> {
        if let Ok(mut map) = self.quotas.write() {
            map.remove(&key(&share.name));
        }
        let dir = self.root.join(&share.dataset);
        if self.is_btrfs() {
            self.delete_snapshots_of("shares", &share.name);
        }
        if self.is_btrfs() && managed::is_subvolume(&dir) {
            let p = dir.to_string_lossy();
            return btrfs::run("btrfs", &["subvolume", "delete", &p], btrfs::QUICK)
                .map(|_| ())
                .map_err(io::Error::other);
        }
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Usage of every tracked share, for persisting to the database.
    pub fn share_usage(&self) -> Vec<(String, u64)> {
        self.quotas
            .read()
            .map(|m| m.iter().map(|(k, q)| (k.clone(), q.used())).collect())
            .unwrap_or_default()
    }

    /// Backing file of a volume.
    pub fn volume_path(&self, volume: &str) -> PathBuf {
        self.root
            .join("volumes")
            .join(format!("{}.vol", key(volume)))
    }

    /// Creates a volume's sparse backing file of `size` bytes; fails if it exists. On btrfs
    /// (a managed pool, or a directory pool on a btrfs disk) the file is NOCOW: volumes are
    /// rewritten in place, COW would fragment them, and from Linux 6.14 btrfs turns a
    /// direct write to a file with data checksums into a buffered one that waits for its
    /// writeback (tests/bench/nvme.md).
    pub fn create_volume(&self, volume: &str, size: u64) -> io::Result<()> {
        // On failure nothing is left behind, so a retry with another size can succeed.
        let path = self.volume_path(volume);
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let nocow = if self.is_btrfs() || btrfs::is_on_btrfs(&file) {
            btrfs::set_nocow(&file)
        } else {
            Ok(())
        };
        let sized = nocow
            .and_then(|()| file.set_len(size))
            .and_then(|()| file.sync_all());
        if sized.is_err() {
            let _ = fs::remove_file(&path);
        }
        sized
    }

    /// Grows a volume's backing file.
    pub fn resize_volume(&self, volume: &str, size: u64) -> io::Result<()> {
        let file = fs::OpenOptions::new()
            .write(true)
            .open(self.volume_path(volume))?;
        file.set_len(size)?;
        file.sync_all()
    }

    /// Deletes a volume's backing file.
    pub fn delete_volume(&self, volume: &str) -> io::Result<()> {
        if self.is_btrfs() {
            self.delete_snapshots_of("volumes", volume);
        }
        match fs::remove_file(self.volume_path(volume)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        }
    }

    /// Capacity of the file system holding the pool.
    pub fn capacity(&self) -> io::Result<Capacity> {
        scan::statvfs(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn share(name: &str, quota: Option<u64>) -> Share {
        Share {
            name: name.into(),
            comment: String::new(),
            quota_bytes: quota,
            read_only: false,
            encrypt: false,
            guest_ok: false,
            continuously_available: false,
            users: vec![],
            dataset: format!("shares/{name}"),
            created_at: 0,
        }
    }

    /// A check that began before a change (here: reports Degraded, slowly) and one that
    /// began after it (Healthy) store in the order they ran, so the later one stays.
    #[test]
    fn health_checks_store_in_the_order_they_ran() {
        use managed::{Health, PoolState};
        use std::sync::mpsc::channel;
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let pool = Arc::new(DirectoryPool::open(dir.path()).unwrap());
        let (started, in_check) = channel();
        let (release, hold) = channel::<()>();
        let early = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                pool.store_health_of(|_| {
                    started.send(()).unwrap();
                    hold.recv().unwrap();
                    Health {
                        state: PoolState::Degraded,
                        ..Health::default()
                    }
                })
            })
        };
        in_check.recv().unwrap();
        let (finished, late_done) = channel();
        let late = {
            let pool = pool.clone();
            std::thread::spawn(move || {
                pool.store_health_of(|_| Health::default());
                finished.send(()).unwrap();
            })
        };
        // The late check must wait for the early one; give it the chance not to.
        let overtook = late_done.recv_timeout(Duration::from_millis(300)).is_ok();
        release.send(()).unwrap();
        early.join().unwrap();
        late.join().unwrap();
        assert!(
            !overtook,
            "a later check ran while an earlier one was storing"
        );
        assert_eq!(pool.health().state, PoolState::Healthy);
    }

    #[test]
    fn share_usage_is_scanned_and_quota_tracked() {
        let dir = tempfile::tempdir().unwrap();
        let pool = DirectoryPool::open(dir.path()).unwrap();
        pool.create_dataset("shares/Data").unwrap();
        fs::create_dir(pool.share_root("data").join("sub")).unwrap();
        fs::write(pool.share_root("DATA").join("sub/a"), vec![0u8; 1000]).unwrap();
        let q = pool.register_share(&share("Data", Some(1500)));
        assert_eq!(q.used(), 1000);
        assert!(q.try_charge(600).is_err());
        assert!(Arc::ptr_eq(&q, &pool.share_quota("data")));
        pool.register_share(&share("Data", Some(2000)));
        q.try_charge(600).unwrap();
        pool.remove_share(&share("Data", None)).unwrap();
        assert!(!dir.path().join("shares/Data").exists());
    }

    #[test]
    fn volumes_are_sparse_files() {
        let dir = tempfile::tempdir().unwrap();
        let pool = DirectoryPool::open(dir.path()).unwrap();
        pool.create_volume("v1", 1 << 30).unwrap();
        assert!(pool.create_volume("V1", 1 << 20).is_err());
        let meta = fs::metadata(pool.volume_path("v1")).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        pool.resize_volume("v1", 2 << 30).unwrap();
        assert_eq!(fs::metadata(pool.volume_path("v1")).unwrap().len(), 2 << 30);
        // A size the file system refuses leaves no file behind.
        assert!(pool.create_volume("huge", u64::MAX / 2).is_err());
        assert!(!pool.volume_path("huge").exists());
        pool.create_volume("huge", 1 << 20).unwrap();
        pool.delete_volume("v1").unwrap();
        assert!(pool.capacity().unwrap().size_bytes > 0);
    }
}
