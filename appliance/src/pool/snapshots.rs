//! Snapshots on the managed pool: a share's is a read-only btrfs snapshot of its
//! subvolume, a volume's a reflink copy of its NOCOW file, both under `.snapshots/` (not
//! reachable through any share). Restores rewrite the share's contents in place (its root
//! directory stays the same inode, so connected SMB trees keep working) or clone the
//! snapshot back over the volume file (open NVMe descriptors stay valid).

use std::fs;
use std::io;
use std::path::Path;

use super::{btrfs, scan, DirectoryPool};

fn tool(r: Result<String, btrfs::PoolError>) -> io::Result<()> {
    r.map(|_| ()).map_err(io::Error::other)
}

fn parent_dirs(p: &Path) -> io::Result<()> {
    match p.parent() {
        Some(d) => fs::create_dir_all(d),
        None => Ok(()),
    }
}

/// Clones `src` into a new NOCOW file `dst` (fails if `dst` exists).
fn reflink_new(src: &Path, dst: &Path) -> io::Result<u64> {
    parent_dirs(dst)?;
    let from = fs::File::open(src)?;
    let to = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(dst)?;
    let res = btrfs::set_nocow(&to)
        .and_then(|()| btrfs::reflink(&from, &to))
        .and_then(|()| to.sync_all());
    if let Err(e) = res {
        let _ = fs::remove_file(dst);
        return Err(e);
    }
    Ok(from.metadata()?.len())
}

impl DirectoryPool {
    /// Takes a read-only snapshot of share `share` at `rel` (relative to the pool root).
    pub fn snapshot_share(&self, share: &str, rel: &str) -> io::Result<()> {
        let dst = self.root.join(rel);
        parent_dirs(&dst)?;
        let src = self.share_root(share);
        let (s, d) = (src.to_string_lossy(), dst.to_string_lossy());
        tool(btrfs::run(
            "btrfs",
            &["subvolume", "snapshot", "-r", &s, &d],
            btrfs::QUICK,
        ))
    }

    /// Takes a reflink copy of volume `volume` at `rel`.
    pub fn snapshot_volume(&self, volume: &str, rel: &str) -> io::Result<()> {
        reflink_new(&self.volume_path(volume), &self.root.join(rel)).map(|_| ())
    }

    /// Deletes a snapshot's data at `rel`.
    pub fn delete_snapshot_data(&self, rel: &str) -> io::Result<()> {
        let p = self.root.join(rel);
        if p.is_dir() {
            let ps = p.to_string_lossy();
            tool(btrfs::run(
                "btrfs",
                &["subvolume", "delete", &ps],
                btrfs::QUICK,
            ))
        } else {
            match fs::remove_file(&p) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        }
    }

    /// Replaces share `share`'s contents by the snapshot at `rel` (reflink copies), and
    /// re-measures its usage for the quota.
    pub fn restore_share(&self, share: &str, rel: &str) -> io::Result<()> {
        let root = self.share_root(share);
        for e in fs::read_dir(&root)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                fs::remove_dir_all(e.path())?;
            } else {
                fs::remove_file(e.path())?;
            }
        }
        let src = format!("{}/.", self.root.join(rel).display());
        let dst = root.to_string_lossy();
        tool(btrfs::run(
            "cp",
            &["-a", "--reflink=always", &src, &dst],
            btrfs::LONG,
        ))?;
        self.share_quota(share).set_used(scan::apparent_size(&root));
        Ok(())
    }

    /// Clones the snapshot at `rel` back over volume `volume`, keeping at least `size`.
    pub fn restore_volume(&self, volume: &str, rel: &str, size: u64) -> io::Result<()> {
        let from = fs::File::open(self.root.join(rel))?;
        let to = fs::OpenOptions::new()
            .write(true)
            .open(self.volume_path(volume))?;
        btrfs::reflink(&from, &to)?;
        if to.metadata()?.len() < size {
            to.set_len(size)?;
        }
        to.sync_all()
    }

    /// Size of the volume snapshot at `rel`.
    pub fn snapshot_size(&self, rel: &str) -> io::Result<u64> {
        Ok(fs::metadata(self.root.join(rel))?.len())
    }

    /// Creates volume `volume` as a reflink clone of the snapshot at `rel`.
    pub fn clone_volume(&self, rel: &str, volume: &str) -> io::Result<()> {
        reflink_new(&self.root.join(rel), &self.volume_path(volume)).map(|_| ())
    }

    /// Deletes every snapshot of a share or volume (`kind` is `shares` or `volumes`).
    pub fn delete_snapshots_of(&self, kind: &str, name: &str) {
        let dir = self
            .root
            .join(".snapshots")
            .join(kind)
            .join(name.to_ascii_lowercase());
        let Ok(entries) = fs::read_dir(&dir) else {
            return;
        };
        for e in entries.flatten() {
            let rel = format!(
                ".snapshots/{kind}/{}/{}",
                name.to_ascii_lowercase(),
                e.file_name().to_string_lossy()
            );
            if let Err(err) = self.delete_snapshot_data(&rel) {
                tracing::warn!(snapshot = %rel, error = %err, "deleting a snapshot failed");
            }
        }
        let _ = fs::remove_dir(&dir);
    }
}
