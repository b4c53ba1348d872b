//! Block device discovery from sysfs (`/sys/block`, NVMe controllers under
//! `/sys/class/nvme`), and the checks that decide whether a device may join the pool.

use std::fs;
use std::path::Path;

use serde::Serialize;
use utoipa::ToSchema;

/// What sort of block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// An NVMe namespace (`nvmeXnY`).
    Nvme,
    /// A loop device (tests; accepted only when `QUARRY_ALLOW_LOOP_DEVICES=1`).
    Loop,
    /// Any other block device.
    Other,
}

impl DeviceKind {
    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            DeviceKind::Nvme => "nvme",
            DeviceKind::Loop => "loop",
            DeviceKind::Other => "other",
        }
    }
}

/// One block device as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct BlockDevice {
    /// Device node (`/dev/nvme0n1`).
    pub path: String,
    /// Kernel name (`nvme0n1`).
    pub name: String,
    /// Sort of device.
    pub kind: DeviceKind,
    /// Model string (empty when the device has none).
    pub model: String,
    /// Serial number (empty when the device has none).
    pub serial: String,
    /// Firmware revision (empty when the device has none).
    pub firmware: String,
    /// Capacity in bytes.
    pub size_bytes: u64,
    /// Logical block (LBA) size in bytes.
    pub lba_bytes: u64,
    /// Partitions on it (kernel names).
    pub partitions: Vec<String>,
    /// Another kernel device stacks on it (device mapper, md, ...).
    pub has_holders: bool,
    /// It or one of its partitions is mounted.
    pub mounted: bool,
    /// NVMe controller (`nvme0`) for admin commands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub controller: Option<String>,
}

fn read_trim(path: &Path) -> String {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn read_u64(path: &Path) -> Option<u64> {
    read_trim(path).parse().ok()
}

/// Whether `/proc/self/mounts` text mounts the device node `dev` (or `dev` + partition).
fn is_mounted(mounts: &str, names: &[&str]) -> bool {
    mounts.lines().any(|l| {
        l.split_whitespace()
            .next()
            .and_then(|src| src.strip_prefix("/dev/"))
            .is_some_and(|src| names.contains(&src))
    })
}

/// Lists the block devices under `sys/block` (`sys` is `/sys` except in tests), with
/// `mounts` the text of `/proc/self/mounts`. Devices of size 0 (an unattached loop
/// device, an empty card reader) and RAM disks are left out.
pub fn discover(sys: &Path, mounts: &str) -> Vec<BlockDevice> {
    let Ok(entries) = fs::read_dir(sys.join("block")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        if name.starts_with("ram") || name.starts_with("zram") {
            continue;
        }
        let dir = sys.join("block").join(&name);
        let sectors = read_u64(&dir.join("size")).unwrap_or(0);
        if sectors == 0 {
            continue;
        }
        let kind = if name.starts_with("nvme") {
            DeviceKind::Nvme
        } else if name.starts_with("loop") {
            DeviceKind::Loop
        } else {
            DeviceKind::Other
        };
        let partitions: Vec<String> = fs::read_dir(&dir)
            .map(|rd| {
                rd.flatten()
                    .filter(|p| p.path().join("partition").exists())
                    .filter_map(|p| p.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        let has_holders = fs::read_dir(dir.join("holders"))
            .map(|mut rd| rd.next().is_some())
            .unwrap_or(false);
        let mut names: Vec<&str> = vec![name.as_str()];
        names.extend(partitions.iter().map(String::as_str));
        let mounted = is_mounted(mounts, &names);
        let device = dir.join("device");
        let firmware = {
            let f = read_trim(&device.join("firmware_rev"));
            if f.is_empty() {
                read_trim(&device.join("rev"))
            } else {
                f
            }
        };
        let controller = (kind == DeviceKind::Nvme)
            .then(|| {
                fs::canonicalize(&device)
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .filter(|n| n.starts_with("nvme"))
            })
            .flatten();
        let mut partitions = partitions.clone();
        partitions.sort();
        out.push(BlockDevice {
            path: format!("/dev/{name}"),
            kind,
            model: read_trim(&device.join("model")),
            serial: read_trim(&device.join("serial")),
            firmware,
            size_bytes: sectors.saturating_mul(512),
            lba_bytes: read_u64(&dir.join("queue/logical_block_size")).unwrap_or(512),
            has_holders,
            mounted,
            partitions,
            controller,
            name,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The devices of this machine (`/sys`, `/proc/self/mounts`).
pub fn discover_system() -> Vec<BlockDevice> {
    let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    discover(Path::new("/sys"), &mounts)
}

/// Why a device cannot be used as is, or `None` when it is free (signatures are checked
/// separately with `blkid`, which needs the device).
pub fn busy_reason(d: &BlockDevice) -> Option<String> {
    if d.mounted {
        Some(format!("{} is mounted", d.path))
    } else if d.has_holders {
        Some(format!("{} is held by another kernel device", d.path))
    } else if !d.partitions.is_empty() {
        Some(format!("{} has a partition table", d.path))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(p: &Path, s: &str) {
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, s).unwrap();
    }

    #[test]
    fn discovers_nvme_loop_and_partitioned_disks() {
        let t = tempfile::tempdir().unwrap();
        let sys = t.path();
        let ctrl = sys.join("devices/pci/nvme/nvme0");
        write(&ctrl.join("model"), "Acme NVMe 1TB      \n");
        write(&ctrl.join("serial"), " S123 \n");
        write(&ctrl.join("firmware_rev"), "1.0\n");
        let n = sys.join("block/nvme0n1");
        write(&n.join("size"), "2097152\n");
        write(&n.join("queue/logical_block_size"), "4096\n");
        fs::create_dir_all(n.join("holders")).unwrap();
        std::os::unix::fs::symlink(&ctrl, n.join("device")).unwrap();
        let l = sys.join("block/loop3");
        write(&l.join("size"), "2097152\n");
        fs::create_dir_all(l.join("holders")).unwrap();
        write(&sys.join("block/loop4/size"), "0\n");
        let v = sys.join("block/vda");
        write(&v.join("size"), "1000\n");
        write(&v.join("vda1/partition"), "1\n");
        write(&sys.join("block/zram0/size"), "100\n");
        let devs = discover(sys, "/dev/vda1 / ext4 rw 0 0\n");
        let names: Vec<_> = devs.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["loop3", "nvme0n1", "vda"]);
        let nvme = &devs[1];
        assert_eq!(nvme.kind, DeviceKind::Nvme);
        assert_eq!(nvme.model, "Acme NVMe 1TB");
        assert_eq!(nvme.serial, "S123");
        assert_eq!(nvme.firmware, "1.0");
        assert_eq!(nvme.size_bytes, 1 << 30);
        assert_eq!(nvme.lba_bytes, 4096);
        assert_eq!(nvme.controller.as_deref(), Some("nvme0"));
        assert_eq!(busy_reason(nvme), None);
        assert_eq!(devs[0].kind, DeviceKind::Loop);
        assert_eq!(busy_reason(&devs[0]), None);
        let vda = &devs[2];
        assert!(vda.mounted);
        assert_eq!(vda.partitions, ["vda1"]);
        assert!(busy_reason(vda).unwrap().contains("mounted"));
    }
}
