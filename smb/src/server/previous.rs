//! Previous versions (MS-SMB2 2.2.13.2.7, 2.2.32.2, 3.3.5.15.1): the share's snapshots,
//! listed by FSCTL_SRV_ENUMERATE_SNAPSHOTS as `@GMT-YYYY.MM.DD-HH.MM.SS` tokens and opened
//! read-only either through the timewarp create context (`TWrp`, what Windows and Samba's
//! clients send) or through a token as a path component (what users type).
//!
//! Pure: token formatting and parsing, path splitting and the snapshot array encoding.
//! Times are whole seconds since the Unix epoch (a snapshot's identity at the wire's
//! resolution).

use crate::proto::status;

/// FSCTL_SRV_ENUMERATE_SNAPSHOTS (FSCTL_GET_SHADOW_COPY_DATA).
pub const FSCTL_SRV_ENUMERATE_SNAPSHOTS: u32 = 0x0014_4064;
/// Create context tag of a timewarp request.
pub const CTX_TWRP: &[u8] = b"TWrp";
/// Characters of a token (`@GMT-2026.11.25-02.00.00`).
pub const TOKEN_LEN: usize = 24;
/// Bytes one token takes in the snapshot array: 25 UTF-16 units with the terminator.
const LABEL_BYTES: usize = 2 * (TOKEN_LEN + 1);
/// Seconds between 1601-01-01 (FILETIME) and 1970-01-01.
const FILETIME_UNIX_OFFSET: i64 = 11_644_473_600;
/// Most snapshots listed (the array must fit one IOCTL response).
pub const MAX_LISTED: usize = 4096;

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The token of a snapshot taken at `unix_secs`.
pub fn gmt_token(unix_secs: i64) -> String {
    let (days, secs) = (unix_secs.div_euclid(86_400), unix_secs.rem_euclid(86_400));
    let (y, mo, d) = civil_from_days(days);
    format!(
        "@GMT-{y:04}.{mo:02}.{d:02}-{:02}.{:02}.{:02}",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// The time a token names, if `s` is exactly one.
pub fn parse_gmt_token(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != TOKEN_LEN || !s.starts_with("@GMT-") {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<u32> {
        let part = s.get(from..from + len)?;
        if !part.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        part.parse().ok()
    };
    let seps = [(9, b'.'), (12, b'.'), (15, b'-'), (18, b'.'), (21, b'.')];
    if seps.iter().any(|&(i, c)| b.get(i) != Some(&c)) {
        return None;
    }
    let (y, mo, d) = (num(5, 4)?, num(10, 2)?, num(13, 2)?);
    let (h, mi, se) = (num(16, 2)?, num(19, 2)?, num(22, 2)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 59 {
        return None;
    }
    let days = days_from_civil(i64::from(y), mo, d);
    if civil_from_days(days) != (i64::from(y), mo, d) {
        return None; // 31 February and the like
    }
    Some(days * 86_400 + i64::from(h * 3600 + mi * 60 + se))
}

/// Splits a token out of a CREATE path: the path without it and the time it names. More
/// than one token is an invalid name.
pub fn strip_gmt_token(path: &str) -> Result<(String, Option<i64>), u32> {
    if !path.contains("@GMT-") {
        return Ok((path.to_string(), None));
    }
    let mut at = None;
    let mut rest: Vec<&str> = Vec::new();
    for part in path.split('\\') {
        match parse_gmt_token(part) {
            Some(t) if at.is_none() => at = Some(t),
            Some(_) => return Err(status::OBJECT_NAME_INVALID),
            None => rest.push(part),
        }
    }
    Ok((rest.join("\\"), at))
}

/// The time of a timewarp context's data (a FILETIME, truncated to whole seconds).
pub fn twrp_time(data: &[u8]) -> Result<i64, u32> {
    let raw: [u8; 8] = data
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or(status::INVALID_PARAMETER)?;
    let ft = i64::try_from(u64::from_le_bytes(raw)).map_err(|_| status::INVALID_PARAMETER)?;
    Ok(ft / 10_000_000 - FILETIME_UNIX_OFFSET)
}

/// The SRV_SNAPSHOT_ARRAY answer listing `times` within `max_output` bytes. A 16-byte
/// buffer asks for the counts only; a larger one that cannot hold every token is
/// BUFFER_TOO_SMALL (the client asks again with the size given by the counts reply).
pub fn encode_snapshot_array(times: &[i64], max_output: usize) -> Result<Vec<u8>, u32> {
    if max_output < 16 {
        return Err(status::INVALID_PARAMETER);
    }
    let times = times.get(..MAX_LISTED).unwrap_or(times);
    let n = u32::try_from(times.len()).map_err(|_| status::INVALID_PARAMETER)?;
    let labels_size = times.len() * LABEL_BYTES + 2;
    let labels_u32 = u32::try_from(labels_size).map_err(|_| status::INVALID_PARAMETER)?;
    let mut out = Vec::with_capacity(12 + labels_size);
    out.extend_from_slice(&n.to_le_bytes());
    if max_output == 16 {
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&labels_u32.to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        return Ok(out);
    }
    if max_output < 12 + labels_size {
        return Err(status::BUFFER_TOO_SMALL);
    }
    out.extend_from_slice(&n.to_le_bytes());
    out.extend_from_slice(&labels_u32.to_le_bytes());
    for t in times {
        for unit in gmt_token(*t).encode_utf16().chain([0]) {
            out.extend_from_slice(&unit.to_le_bytes());
        }
    }
    out.extend_from_slice(&[0, 0]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_format_and_parse_back() {
        assert_eq!(gmt_token(0), "@GMT-1970.01.01-00.00.00");
        // 2026-11-25 02:03:04 UTC.
        let t = 1_795_572_184;
        assert_eq!(gmt_token(t), "@GMT-2026.11.25-02.03.04");
        assert_eq!(parse_gmt_token("@GMT-2026.11.25-02.03.04"), Some(t));
        assert_eq!(
            parse_gmt_token("@GMT-2024.02.29-23.59.59"),
            Some(1_709_251_199)
        );
        for bad in [
            "@GMT-2026.02.30-00.00.00",
            "@GMT-2026.13.01-00.00.00",
            "@GMT-2026.11.25-24.00.00",
            "@GMT-2026.11.25_02.03.04",
            "@GMT-2026.11.25-02.03.0x",
            "@GMT-2026.11.25-02.03.045",
            "GMT-2026.11.25-02.03.04",
        ] {
            assert_eq!(parse_gmt_token(bad), None, "{bad}");
        }
    }

    #[test]
    fn paths_lose_their_token_and_twrp_converts_filetimes() {
        assert_eq!(
            strip_gmt_token("@GMT-2026.11.25-02.03.04\\dir\\a.bin"),
            Ok(("dir\\a.bin".to_string(), Some(1_795_572_184)))
        );
        assert_eq!(
            strip_gmt_token("dir\\@GMT-1970.01.01-00.00.01"),
            Ok(("dir".to_string(), Some(1)))
        );
        assert_eq!(
            strip_gmt_token("a@GMT-x"),
            Ok(("a@GMT-x".to_string(), None))
        );
        assert_eq!(
            strip_gmt_token("@GMT-1970.01.01-00.00.01\\@GMT-1970.01.01-00.00.02"),
            Err(status::OBJECT_NAME_INVALID)
        );
        let ft: u64 = (1_795_572_184 + 11_644_473_600) * 10_000_000 + 1234;
        assert_eq!(twrp_time(&ft.to_le_bytes()), Ok(1_795_572_184));
        assert_eq!(twrp_time(&[1, 2]), Err(status::INVALID_PARAMETER));
    }

    #[test]
    fn the_snapshot_array_gives_counts_then_tokens() {
        let times = [1_795_572_184, 0];
        let counts = encode_snapshot_array(&times, 16).unwrap_or_default();
        assert_eq!(counts.len(), 16);
        assert_eq!(&counts[..4], &2u32.to_le_bytes());
        assert_eq!(&counts[4..8], &0u32.to_le_bytes());
        assert_eq!(&counts[8..12], &102u32.to_le_bytes());
        assert_eq!(
            encode_snapshot_array(&times, 100),
            Err(status::BUFFER_TOO_SMALL)
        );
        assert_eq!(
            encode_snapshot_array(&times, 8),
            Err(status::INVALID_PARAMETER)
        );
        let full = encode_snapshot_array(&times, 4096).unwrap_or_default();
        assert_eq!(full.len(), 12 + 102);
        assert_eq!(&full[4..8], &2u32.to_le_bytes());
        let first: Vec<u16> = full[12..12 + 48]
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(String::from_utf16_lossy(&first), "@GMT-2026.11.25-02.03.04");
        assert_eq!(&full[full.len() - 4..], &[0, 0, 0, 0]);
    }
}
