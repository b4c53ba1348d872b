//! File-system information classes (MS-FSCC 2.5) for QUERY_INFO with InfoType FILESYSTEM.

use super::wire::{len_u32, utf16_len, Put};

/// FileFsVolumeInformation.
pub const FS_VOLUME: u8 = 1;
/// FileFsSizeInformation.
pub const FS_SIZE: u8 = 3;
/// FileFsDeviceInformation.
pub const FS_DEVICE: u8 = 4;
/// FileFsAttributeInformation.
pub const FS_ATTRIBUTE: u8 = 5;
/// FileFsControlInformation.
pub const FS_CONTROL: u8 = 6;
/// FileFsFullSizeInformation.
pub const FS_FULL_SIZE: u8 = 7;
/// FileFsObjectIdInformation.
pub const FS_OBJECT_ID: u8 = 8;
/// FileFsSectorSizeInformation.
pub const FS_SECTOR_SIZE: u8 = 11;

/// FILE_DEVICE_DISK.
const FILE_DEVICE_DISK: u32 = 0x0000_0007;
/// FILE_DEVICE_IS_MOUNTED.
const FILE_DEVICE_IS_MOUNTED: u32 = 0x0000_0020;
/// File system attributes we report: case preserved + case sensitive search off, unicode on
/// disk, persistent ACLs off, sparse files, named streams off.
pub const FS_ATTRIBUTES: u32 = 0x0000_0002 | 0x0000_0001 | 0x0000_0004 | 0x0000_0040;
/// Longest component name.
pub const MAX_COMPONENT_NAME: u32 = 255;

/// Capacity facts of a share, already quota-adjusted by the storage layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsSize {
    /// Total bytes.
    pub total_bytes: u64,
    /// Bytes available to the caller.
    pub free_bytes: u64,
    /// Allocation unit (bytes): sectors-per-unit times bytes-per-sector.
    pub block_size: u32,
}

/// Sector size the server reports.
pub const BYTES_PER_SECTOR: u32 = 512;

impl FsSize {
    fn units(&self) -> (u64, u64, u32) {
        let bs = self.block_size.max(BYTES_PER_SECTOR);
        let spu = bs / BYTES_PER_SECTOR;
        let unit = u64::from(spu) * u64::from(BYTES_PER_SECTOR);
        (self.total_bytes / unit, self.free_bytes / unit, spu)
    }
}

/// The fixed part of each file-system class: a shorter output buffer gets
/// STATUS_INFO_LENGTH_MISMATCH (as Windows answers; smbtorture getinfo.qfs_buffercheck).
pub fn fs_min_output_len(class: u8) -> usize {
    match class {
        FS_VOLUME | FS_SIZE => 24,
        FS_DEVICE => 8,
        FS_ATTRIBUTE => 16,
        FS_CONTROL => 48,
        FS_FULL_SIZE => 32,
        FS_OBJECT_ID => 64,
        FS_SECTOR_SIZE => 28,
        _ => 0,
    }
}

/// Everything the file-system classes report about a share's volume.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FsFacts {
    /// Capacity.
    pub size: FsSize,
    /// Volume label.
    pub label: String,
    /// Volume serial number.
    pub serial: u32,
    /// Volume creation time (FILETIME).
    pub created: u64,
    /// FileSystemAttributes.
    pub fs_attributes: u32,
    /// Longest component name.
    pub max_name_len: u32,
    /// File system name.
    pub fs_name: String,
}

/// Encodes a file-system information class; `None` when unsupported.
pub fn encode_fs_info(class: u8, facts: &FsFacts) -> Option<Vec<u8>> {
    let size = &facts.size;
    let volume_label = facts.label.as_str();
    let serial = facts.serial;
    let created = facts.created;
    let mut out = Vec::with_capacity(64);
    match class {
        FS_VOLUME => {
            out.put_u64(created);
            out.put_u32(serial);
            out.put_u32(len_u32(utf16_len(volume_label)));
            out.put_u8(0);
            out.put_u8(0);
            out.put_utf16(volume_label);
        }
        FS_SIZE => {
            let (total, free, spu) = size.units();
            out.put_u64(total);
            out.put_u64(free);
            out.put_u32(spu);
            out.put_u32(BYTES_PER_SECTOR);
        }
        FS_FULL_SIZE => {
            let (total, free, spu) = size.units();
            out.put_u64(total);
            out.put_u64(free);
            out.put_u64(free);
            out.put_u32(spu);
            out.put_u32(BYTES_PER_SECTOR);
        }
        FS_DEVICE => {
            out.put_u32(FILE_DEVICE_DISK);
            out.put_u32(FILE_DEVICE_IS_MOUNTED);
        }
        FS_ATTRIBUTE => {
            let name = facts.fs_name.as_str();
            out.put_u32(facts.fs_attributes);
            out.put_u32(facts.max_name_len);
            out.put_u32(len_u32(utf16_len(name)));
            out.put_utf16(name);
        }
        FS_OBJECT_ID => {
            out.put_u64(u64::from(serial));
            out.put_zeros(56);
        }
        FS_SECTOR_SIZE => {
            for _ in 0..4 {
                out.put_u32(BYTES_PER_SECTOR);
            }
            out.put_u32(0x0000_0003); // ALIGNED_DEVICE | PARTITION_ALIGNED_ON_DEVICE
            out.put_u32(0);
            out.put_u32(0);
        }
        _ => return None,
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_fscc() {
        let mut f = FsFacts {
            size: FsSize {
                total_bytes: 1 << 30,
                free_bytes: 1 << 29,
                block_size: 4096,
            },
            label: "q".into(),
            serial: 1,
            fs_attributes: FS_ATTRIBUTES,
            max_name_len: MAX_COMPONENT_NAME,
            fs_name: "NTFS".into(),
            ..Default::default()
        };
        let full = encode_fs_info(FS_FULL_SIZE, &f).unwrap();
        assert_eq!(full.len(), 32);
        assert_eq!(&full[0..8], &(262_144u64).to_le_bytes());
        assert_eq!(&full[24..28], &8u32.to_le_bytes());
        assert_eq!(encode_fs_info(FS_SIZE, &f).unwrap().len(), 24);
        assert_eq!(encode_fs_info(FS_SECTOR_SIZE, &f).unwrap().len(), 28);
        assert_eq!(encode_fs_info(FS_ATTRIBUTE, &f).unwrap().len(), 12 + 8);
        f.label = "ab".into();
        assert_eq!(encode_fs_info(FS_VOLUME, &f).unwrap().len(), 18 + 4);
        assert!(encode_fs_info(99, &f).is_none());
    }
}
