//! NVMe identity and health through the admin passthrough ioctl (`NVME_IOCTL_ADMIN_CMD`):
//! Identify Controller for model, serial and firmware, and the SMART / Health Information
//! log page for temperature, wear, spare and media errors. Decoding is separate from the
//! ioctl so it can be tested byte for byte.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use serde::Serialize;
use utoipa::ToSchema;

/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)` (72 bytes).
const NVME_IOCTL_ADMIN_CMD: u64 = 0xC048_4E41;
/// Admin opcode: Get Log Page.
const OPC_GET_LOG_PAGE: u8 = 0x02;
/// Admin opcode: Identify.
const OPC_IDENTIFY: u8 = 0x06;
/// Log identifier of SMART / Health Information.
const LID_SMART: u32 = 0x02;
/// Length of the SMART log page.
const SMART_LEN: usize = 512;
/// Length of an Identify data structure.
const IDENTIFY_LEN: usize = 4096;

/// `struct nvme_passthru_cmd` of `<linux/nvme_ioctl.h>`.
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

/// Health from the SMART / Health Information log page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SmartHealth {
    /// Critical warning bits (0 = none): spare, temperature, reliability, read-only, backup.
    pub critical_warning: u8,
    /// Composite temperature in degrees Celsius.
    pub temperature_c: i32,
    /// Available spare, percent.
    pub available_spare_pct: u8,
    /// Available spare threshold, percent.
    pub spare_threshold_pct: u8,
    /// Estimate of the life used, percent (may exceed 100).
    pub percentage_used: u8,
    /// Unrecovered data integrity errors.
    pub media_errors: u64,
    /// Power-on hours.
    pub power_on_hours: u64,
}

/// Identity from Identify Controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerIdentity {
    /// Model number.
    pub model: String,
    /// Serial number.
    pub serial: String,
    /// Firmware revision.
    pub firmware: String,
}

fn le_u64_saturating(b: &[u8; 16]) -> u64 {
    // 128-bit counters: the low 8 bytes, saturated if any high byte is set.
    let (lo, hi) = b.split_at(8);
    if hi.iter().any(|&x| x != 0) {
        u64::MAX
    } else {
        lo.iter().rev().fold(0, |acc, &x| (acc << 8) | u64::from(x))
    }
}

/// The 16-byte field at `at` of a fixed-size page.
fn field16(page: &[u8; SMART_LEN], at: usize) -> Option<&[u8; 16]> {
    page.get(at..at + 16)?.try_into().ok()
}

/// Decodes a SMART / Health Information log page (at least 512 bytes).
pub fn decode_smart(page: &[u8]) -> Option<SmartHealth> {
    let page: &[u8; SMART_LEN] = page.first_chunk()?;
    let kelvin = u16::from_le_bytes([page[1], page[2]]);
    Some(SmartHealth {
        critical_warning: page[0],
        temperature_c: i32::from(kelvin) - 273,
        available_spare_pct: page[3],
        spare_threshold_pct: page[4],
        percentage_used: page[5],
        power_on_hours: le_u64_saturating(field16(page, 128)?),
        media_errors: le_u64_saturating(field16(page, 160)?),
    })
}

fn ascii_field(b: &[u8]) -> String {
    String::from_utf8_lossy(b)
        .trim_matches(|c: char| c == ' ' || c == '\0')
        .to_string()
}

/// Decodes an Identify Controller data structure (at least 72 bytes used).
pub fn decode_identify_controller(data: &[u8]) -> Option<ControllerIdentity> {
    Some(ControllerIdentity {
        serial: ascii_field(data.get(4..24)?),
        model: ascii_field(data.get(24..64)?),
        firmware: ascii_field(data.get(64..72)?),
    })
}

fn admin(dev: &Path, cmd: &mut PassthruCmd, buf: &mut [u8]) -> std::io::Result<()> {
    let f = File::open(dev)?;
    cmd.addr = buf.as_mut_ptr() as u64;
    cmd.data_len = u32::try_from(buf.len()).unwrap_or(u32::MAX);
    cmd.timeout_ms = 5000;
    // SAFETY: `cmd` is a properly laid out nvme_passthru_cmd whose `addr`/`data_len`
    // describe `buf`, which outlives the call; the fd is open.
    let rc = unsafe {
        libc::ioctl(
            f.as_raw_fd(),
            NVME_IOCTL_ADMIN_CMD as _,
            cmd as *mut PassthruCmd,
        )
    };
    match rc {
        0 => Ok(()),
        r if r < 0 => Err(std::io::Error::last_os_error()),
        status => Err(std::io::Error::other(format!(
            "NVMe admin command failed with status {status:#x}"
        ))),
    }
}

/// Reads the SMART log of the controller or namespace device `dev`.
pub fn read_smart(dev: &Path) -> std::io::Result<SmartHealth> {
    let mut buf = vec![0u8; SMART_LEN];
    let numd = (SMART_LEN / 4 - 1) as u32;
    let mut cmd = PassthruCmd {
        opcode: OPC_GET_LOG_PAGE,
        nsid: 0xFFFF_FFFF,
        cdw10: (numd << 16) | LID_SMART,
        ..PassthruCmd::default()
    };
    admin(dev, &mut cmd, &mut buf)?;
    decode_smart(&buf).ok_or_else(|| std::io::Error::other("short SMART log"))
}

/// Reads Identify Controller from `dev`.
pub fn read_identity(dev: &Path) -> std::io::Result<ControllerIdentity> {
    let mut buf = vec![0u8; IDENTIFY_LEN];
    let mut cmd = PassthruCmd {
        opcode: OPC_IDENTIFY,
        cdw10: 1,
        ..PassthruCmd::default()
    };
    admin(dev, &mut cmd, &mut buf)?;
    decode_identify_controller(&buf).ok_or_else(|| std::io::Error::other("short identify"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthru_struct_is_72_bytes() {
        assert_eq!(std::mem::size_of::<PassthruCmd>(), 72);
    }

    #[test]
    fn decodes_smart_log() {
        let mut p = vec![0u8; 512];
        p[0] = 0x04;
        p[1..3].copy_from_slice(&(273u16 + 41).to_le_bytes());
        p[3] = 97;
        p[4] = 10;
        p[5] = 3;
        p[128..136].copy_from_slice(&1234u64.to_le_bytes());
        p[160..168].copy_from_slice(&7u64.to_le_bytes());
        let h = decode_smart(&p).unwrap();
        assert_eq!(h.critical_warning, 4);
        assert_eq!(h.temperature_c, 41);
        assert_eq!(h.available_spare_pct, 97);
        assert_eq!(h.spare_threshold_pct, 10);
        assert_eq!(h.percentage_used, 3);
        assert_eq!(h.power_on_hours, 1234);
        assert_eq!(h.media_errors, 7);
        p[170] = 1;
        assert_eq!(decode_smart(&p).unwrap().media_errors, u64::MAX);
        assert!(decode_smart(&p[..100]).is_none());
    }

    #[test]
    fn decodes_identify_controller() {
        let mut d = vec![0u8; 4096];
        d[4..24].copy_from_slice(b"SN0001              ");
        d[24..64].copy_from_slice(b"Quarry Test NVMe                        ");
        d[64..72].copy_from_slice(b"FW12    ");
        let id = decode_identify_controller(&d).unwrap();
        assert_eq!(id.serial, "SN0001");
        assert_eq!(id.model, "Quarry Test NVMe");
        assert_eq!(id.firmware, "FW12");
    }
}
