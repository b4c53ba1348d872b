//! The boot disk as the update service sees it: the slot partitions next to the running
//! root, their PARTUUIDs, and the ESP (mounted at `/efi` by systemd-gpt-auto-generator)
//! where kernels, initrds and loader entries live.

use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context};

use super::boot::{self, EntryName, Slot};

/// Where the ESP is mounted (automount from systemd-gpt-auto-generator).
pub const ESP_DIR: &str = "/efi";
/// Where the new root is mounted read-only to copy its kernel and initrd.
const STAGING_MOUNT: &str = "/run/quarry/update-root";

/// Block device of `slot` on the disk holding the running root (`/dev/vda3`).
pub fn slot_device(slot: Slot) -> anyhow::Result<PathBuf> {
    let meta = fs::metadata("/").context("stat /")?;
    let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
    let root_sys =
        fs::canonicalize(format!("/sys/dev/block/{major}:{minor}")).with_context(|| {
            format!("the root filesystem ({major}:{minor}) is not on a block device partition")
        })?;
    let disk = root_sys
        .parent()
        .context("root partition has no parent disk in sysfs")?;
    let wanted = format!("PARTNAME={}", slot.partition_name());
    for entry in fs::read_dir(disk).with_context(|| format!("listing {}", disk.display()))? {
        let dir = entry?.path();
        if !dir.join("partition").exists() {
            continue;
        }
        let uevent = fs::read_to_string(dir.join("uevent")).unwrap_or_default();
        if uevent.lines().any(|l| l == wanted) {
            let name = dir.file_name().context("partition without a name")?;
            return Ok(Path::new("/dev").join(name));
        }
    }
    bail!(
        "no partition named {} on the boot disk {}",
        slot.partition_name(),
        disk.display()
    )
}

/// Size of a block device in bytes (from sysfs).
pub fn device_size(dev: &Path) -> anyhow::Result<u64> {
    let name = dev.file_name().context("device path without a name")?;
    let sectors = fs::read_to_string(Path::new("/sys/class/block").join(name).join("size"))
        .with_context(|| format!("reading the size of {}", dev.display()))?;
    Ok(sectors
        .trim()
        .parse::<u64>()
        .context("parsing the device size")?
        * 512)
}

/// PARTUUID of a partition device, via udev's `/dev/disk/by-partuuid` links.
pub fn partuuid(dev: &Path) -> anyhow::Result<String> {
    let target = fs::canonicalize(dev)?;
    for entry in fs::read_dir("/dev/disk/by-partuuid").context("listing /dev/disk/by-partuuid")? {
        let entry = entry?;
        if fs::canonicalize(entry.path()).ok().as_deref() == Some(target.as_path()) {
            return Ok(entry.file_name().to_string_lossy().into_owned());
        }
    }
    bail!("no PARTUUID found for {}", dev.display())
}

/// The Quarry loader entries on the ESP.
pub fn entries(esp: &Path) -> anyhow::Result<Vec<EntryName>> {
    let dir = esp.join("loader/entries");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        if let Some(e) = boot::parse_entry_name(&entry?.file_name().to_string_lossy()) {
            out.push(e);
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(out)
}

/// Removes every entry of `slot`, so a slot being rewritten can never be booted.
pub fn remove_entries(esp: &Path, slot: Slot) -> anyhow::Result<()> {
    for e in entries(esp)?.into_iter().filter(|e| e.slot == slot) {
        let path = esp.join("loader/entries").join(&e.file);
        fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
    }
    sync_dir(&esp.join("loader/entries"))
}

/// Writes `text` to `path` atomically (temp file, fsync, rename, fsync dir).
fn write_atomic(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path.parent().context("path without parent")?;
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
    ));
    let mut f = fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("syncing {}", dir.display()))
}

/// Copies the kernel and initrd of the root image now in `dev` to the ESP under
/// `quarry/SLOT/`, reading them from a read-only mount of the new root.
pub fn install_kernel(esp: &Path, dev: &Path, slot: Slot, kernel: &str) -> anyhow::Result<()> {
    let mnt = Path::new(STAGING_MOUNT);
    fs::create_dir_all(mnt).with_context(|| format!("creating {}", mnt.display()))?;
    run(Command::new("mount")
        .args(["-t", "erofs", "-o", "ro,nodev,nosuid,noexec"])
        .arg(dev)
        .arg(mnt))
    .context("mounting the new root image")?;
    let result = (|| -> anyhow::Result<()> {
        let dest = esp.join("quarry").join(slot.letter());
        fs::create_dir_all(&dest).with_context(|| format!("creating {}", dest.display()))?;
        for (src, name) in [
            (format!("boot/vmlinuz-{kernel}"), "vmlinuz"),
            (format!("boot/initrd.img-{kernel}"), "initrd.img"),
        ] {
            let bytes = fs::read(mnt.join(&src))
                .with_context(|| format!("reading {src} from the new root"))?;
            write_atomic(&dest.join(name), &bytes)?;
        }
        Ok(())
    })();
    let unmount = run(Command::new("umount").arg(mnt)).context("unmounting the new root image");
    result.and(unmount)
}

/// Writes the loader entry that makes `slot` the next boot (with the full boot counter).
pub fn write_entry(
    esp: &Path,
    slot: Slot,
    version: &str,
    root_partuuid: &str,
) -> anyhow::Result<()> {
    let cmdline = fs::read_to_string("/proc/cmdline").context("reading /proc/cmdline")?;
    let text = boot::entry_text(
        version,
        slot,
        &boot::entry_options(&cmdline, slot, root_partuuid),
    );
    write_atomic(
        &esp.join("loader/entries").join(boot::new_entry_name(slot)),
        text.as_bytes(),
    )
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
