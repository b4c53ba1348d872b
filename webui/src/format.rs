//! Formatting and parsing shared by the pages: byte sizes for people, sizes typed into
//! forms, and the points of the throughput chart.

/// Width of the chart's SVG view box (one unit per sample slot).
pub const CHART_WIDTH: usize = 300;
/// Height of the chart's SVG view box.
pub const CHART_HEIGHT: u64 = 100;

/// `1536` → `"1.5 KiB"`: binary units, one decimal below 10 of a unit.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[unit])
    } else {
        format!("{value:.0} {}", UNITS[unit])
    }
}

/// Parses a size typed into a form: `"100 MiB"`, `"1.5G"`, `"4096"`, `"2 TiB"`.
/// Suffixes `K`, `M`, `G`, `T`, `P` (optionally followed by `iB` or `B`, any case) are
/// powers of 1024. An empty field is `Ok(None)` (no limit). Errors are one sentence.
pub fn parse_size(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let suffix = suffix.trim().to_ascii_lowercase();
    let shift = match suffix.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(format!("{text:?} is not a size (try \"10 GiB\")")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a size (try \"10 GiB\")"))?;
    let bytes = value * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes >= u64::MAX as f64 {
        return Err(format!("{text:?} is out of range"));
    }
    Ok(Some(bytes.round() as u64))
}

/// SVG polyline points for `values` in a [`CHART_WIDTH`]×[`CHART_HEIGHT`] box scaled to
/// `max`, right-aligned so the newest sample is at the right edge. `app.js` draws the
/// same way when it refreshes the chart.
pub fn chart_points(values: &[u64], max: u64) -> String {
    let max = max.max(1) as f64;
    let shown = &values[values.len().saturating_sub(CHART_WIDTH)..];
    let start = CHART_WIDTH.saturating_sub(shown.len());
    let mut out = String::new();
    for (i, v) in shown.iter().enumerate() {
        let x = start + i;
        let y = CHART_HEIGHT as f64 - (*v as f64 / max) * (CHART_HEIGHT as f64 - 2.0);
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&format!("{x},{y:.1}"));
    }
    out
}

/// `values` reduced to at most [`CHART_WIDTH`] points, each the mean of consecutive
/// samples, so an hour or a day of samples fits the chart without dropping its start.
/// `app.js` reduces the same way.
pub fn downsample(values: &[u64]) -> Vec<u64> {
    if values.len() <= CHART_WIDTH {
        return values.to_vec();
    }
    let per = values.len().div_ceil(CHART_WIDTH);
    values
        .chunks(per)
        .map(|c| c.iter().map(|v| u128::from(*v)).sum::<u128>() / c.len() as u128)
        .map(|v| u64::try_from(v).unwrap_or(u64::MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn humanises_sizes() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(100 << 20), "100 MiB");
        assert_eq!(human_bytes(u64::MAX), "16384 PiB");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_size(""), Ok(None));
        assert_eq!(parse_size(" 4096 "), Ok(Some(4096)));
        assert_eq!(parse_size("100 MiB"), Ok(Some(100 << 20)));
        assert_eq!(parse_size("1.5G"), Ok(Some(3 << 29)));
        assert_eq!(parse_size("2tb"), Ok(Some(2 << 40)));
        assert!(parse_size("ten").is_err());
        assert!(parse_size("10 XB").is_err());
        assert!(parse_size("1e30").is_err());
        assert!(parse_size("99999999999 PiB").is_err());
    }

    #[test]
    fn chart_is_right_aligned_and_scaled() {
        assert_eq!(chart_points(&[], 0), "");
        assert_eq!(downsample(&[1, 2, 3]), vec![1, 2, 3]);
        let day: Vec<u64> = (0..1440).collect();
        let d = downsample(&day);
        assert!(
            d.len() <= CHART_WIDTH && d.len() >= CHART_WIDTH / 2,
            "{}",
            d.len()
        );
        assert_eq!(d[0], 2);
        assert_eq!(chart_points(&[0, 10], 10), "298,100.0 299,2.0");
        let many: Vec<u64> = (0..400).collect();
        assert!(chart_points(&many, 399).starts_with("0,"));
    }
}
