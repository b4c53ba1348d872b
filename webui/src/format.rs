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
    let mut units = UNITS.iter();
    let mut unit = units.next().unwrap_or(&"B");
    while value >= 1024.0 {
        let Some(next) = units.next() else { break };
        value /= 1024.0;
        unit = next;
    }
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

/// Parses a size typed into a form: `"100 MiB"`, `"1.5G"`, `"4096"`, `"2 TiB"`.
/// Suffixes `K`, `M`, `G`, `T`, `P` (optionally followed by `iB` or `B`, any case) are
/// powers of 1024. An empty field is `Ok(None)` (no limit). Errors are one sentence.
/// The arithmetic is exact in integers (a fraction is rounded to the nearest byte once),
/// so sizes above 2^53 bytes come out as typed.
pub fn parse_size(text: &str) -> Result<Option<u64>, String> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let not_a_size = || format!("{text:?} is not a size (try \"10 GiB\")");
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(split);
    let suffix = suffix.trim().to_ascii_lowercase();
    let shift: u32 = match suffix.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(not_a_size()),
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(not_a_size());
    }
    // At most 18 fraction digits count (below a byte even at PiB); the rest are dropped.
    let fraction = &fraction[..fraction.len().min(18)];
    let out_of_range = || format!("{text:?} is out of range");
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| out_of_range())?
    };
    let mut bytes = whole
        .checked_shl(shift)
        .filter(|b| b >> shift == whole)
        .ok_or_else(out_of_range)?;
    if !fraction.is_empty() {
        let numerator: u128 = fraction.parse().map_err(|_| not_a_size())?;
        let denominator = 10u128.pow(fraction.len() as u32);
        bytes += ((numerator << shift) + denominator / 2) / denominator;
    }
    u64::try_from(bytes).map(Some).map_err(|_| out_of_range())
}

/// Percent-encodes `text` as one URL path segment: everything but unreserved characters
/// (RFC 3986: letters, digits, `-._~`) and `:` / `@` becomes `%XX`.
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// SVG polyline points for `values` in a [`CHART_WIDTH`]×[`CHART_HEIGHT`] box scaled to
/// `max`, right-aligned so the newest sample is at the right edge. `app.js` draws the
/// same way when it refreshes the chart.
pub fn chart_points(values: &[u64], max: u64) -> String {
    let max = max.max(1) as f64;
    let shown = values
        .get(values.len().saturating_sub(CHART_WIDTH)..)
        .unwrap_or_default();
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
        // Exact above 2^53, and fractions round once.
        assert_eq!(
            parse_size("9007199254740993"),
            Ok(Some(9_007_199_254_740_993))
        );
        assert_eq!(parse_size("18446744073709551615"), Ok(Some(u64::MAX)));
        assert!(parse_size("18446744073709551616").is_err());
        assert_eq!(parse_size("15 PiB"), Ok(Some(15 << 50)));
        assert_eq!(parse_size("0.5k"), Ok(Some(512)));
        assert_eq!(parse_size(".25 KiB"), Ok(Some(256)));
        assert_eq!(parse_size("1.0000000001 K"), Ok(Some(1024)));
        assert!(parse_size("1.2.3").is_err());
        assert!(parse_size(".").is_err());
    }

    #[test]
    fn path_segments_escape_what_would_change_the_url() {
        assert_eq!(
            path_segment("nqn.2014-08.org.example:vol/1?x#y%z"),
            "nqn.2014-08.org.example:vol%2F1%3Fx%23y%25z"
        );
        assert_eq!(path_segment("a b"), "a%20b");
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
