//! The pool: where shares' files and volumes' blocks live. Today the embedded default,
//! a directory (`DATA/pool`) with each share a subdirectory of `shares/` and each volume a
//! sparse file in `volumes/`; the managed btrfs pool will plug in behind the same calls.

pub mod quota;
mod scan;

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

/// The embedded directory pool.
pub struct DirectoryPool {
    root: PathBuf,
    /// Quota trackers keyed by lower-cased share name (share names are case-insensitive).
    quotas: RwLock<HashMap<String, Arc<ShareQuota>>>,
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
        })
    }

    /// The pool's root directory.
    pub fn root(&self) -> &Path {
        &self.root
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

    /// Creates the directory of a dataset (`shares/NAME`) if it does not exist.
    pub fn create_dataset(&self, dataset: &str) -> io::Result<()> {
        fs::create_dir_all(self.root.join(dataset))
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

    /// Creates a volume's sparse backing file of `size` bytes; fails if it exists.
    pub fn create_volume(&self, volume: &str, size: u64) -> io::Result<()> {
        // On failure nothing is left behind, so a retry with another size can succeed.
        let path = self.volume_path(volume);
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        let sized = file.set_len(size).and_then(|()| file.sync_all());
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
            users: vec![],
            dataset: format!("shares/{name}"),
            created_at: 0,
        }
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
