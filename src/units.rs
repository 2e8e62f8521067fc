//! Durations ("100ms", "5m", "1h30m") and sizes ("512M", "64KiB", "1.5G").

use std::time::Duration;

/// Parses a duration such as `100ms`, `2s`, `5m`, `1h 30m`. A bare number is seconds.
/// Never panics: a value too large for a [`Duration`] is an error (callers then check
/// their own, much smaller range with [`DurationRange`]).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = t.parse::<f64>() {
        if !secs.is_finite() || secs < 0.0 {
            return Err(format!("'{t}' is not a non-negative number of seconds"));
        }
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("'{t}' is out of range (far longer than any run)"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("'{t}' is not a duration ({e}); use e.g. 500ms, 30s, 5m, 1h"))
}

/// The accepted range of a duration setting, checked once where the setting enters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationRange {
    pub min: Duration,
    pub max: Duration,
    /// Whether zero is accepted even though `min` is larger (e.g. "no warm-up").
    pub zero_ok: bool,
}

impl DurationRange {
    /// Between `min` and `max`, both included.
    pub const fn new(min: Duration, max: Duration) -> DurationRange {
        DurationRange {
            min,
            max,
            zero_ok: false,
        }
    }

    /// From zero (included) to `max`.
    pub(crate) const fn up_to(max: Duration) -> DurationRange {
        DurationRange {
            min: Duration::ZERO,
            max,
            zero_ok: true,
        }
    }

    /// `"from 10ms to 1h"`, for messages and help texts.
    pub fn describe(&self) -> String {
        let min = if self.min.is_zero() && !self.zero_ok {
            "more than 0".to_string()
        } else if self.zero_ok && !self.min.is_zero() {
            format!("0 or from {}", humantime::format_duration(self.min))
        } else {
            format!("from {}", humantime::format_duration(self.min))
        };
        format!("{min} to {}", humantime::format_duration(self.max))
    }

    /// Parses `text` and checks it against the range; the error says the range.
    pub fn parse(&self, text: &str) -> Result<Duration, String> {
        let must = || format!("must be {}", self.describe());
        let d = match parse_duration(text) {
            Ok(d) => d,
            // A number too large for any duration is simply out of this range.
            Err(_) if text.trim().parse::<f64>().is_ok_and(|v| v > 0.0) => return Err(must()),
            Err(e) => return Err(e),
        };
        let ok = if d.is_zero() {
            self.zero_ok
        } else {
            d >= self.min && d <= self.max
        };
        if ok {
            Ok(d)
        } else {
            Err(must())
        }
    }
}

/// Parses a size in bytes: `4096`, `64K`/`64KiB`, `512M`/`512MiB`, `2G`/`2GiB`, `1.5G`.
/// Suffixes are binary (K = 1024), as in `docker --memory`; `KB`/`MB`/`GB` too.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("'{t}' is not a size; use e.g. 4096, 64K, 512M, 2G"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "ki" | "kib" => 1 << 10,
        "m" | "mb" | "mi" | "mib" => 1 << 20,
        "g" | "gb" | "gi" | "gib" => 1 << 30,
        "t" | "tb" | "ti" | "tib" => 1 << 40,
        other => {
            return Err(format!(
                "'{t}': unknown size unit '{other}'; use K, M, G or T (binary, 1K = 1Ki = 1024)"
            ))
        }
    };
    let bytes = n * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 {
        return Err(format!("'{t}' is out of range"));
    }
    Ok(bytes.round() as u64)
}

/// Formats bytes with a binary unit: `412.3 MiB`; beyond 9999 EiB (only a figure from
/// outside gets there) in scientific notation, `1.80e308 B`, never hundreds of digits.
pub fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if !bytes.is_finite() {
        return format!("{bytes} B");
    }
    let mut v = bytes;
    let mut i = 0;
    while v.abs() >= 1024.0 && i < UNITS.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if v.abs() >= 10000.0 {
        format!("{bytes:.2e} B")
    } else if i == 0 || v.abs() >= 100.0 {
        format!("{v:.0} {}", UNITS[i])
    } else {
        format!("{v:.1} {}", UNITS[i])
    }
}

/// Formats seconds compactly: `850 ms`, `3.42 s`, `12.5 min`; beyond 100000 minutes (no
/// run lasts that long; a figure from outside may say so) in scientific notation,
/// `1.80e308 s`, never hundreds of digits.
/// A count with thousands separators: `703,856`.
pub fn format_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

pub fn format_seconds(s: f64) -> String {
    let a = s.abs();
    if !s.is_finite() {
        format!("{s} s")
    } else if a < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else if a < 600.0 {
        format!("{s:.2} s")
    } else if a < 6e6 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{s:.2e} s")
    }
}

/// The hex SHA-256 of `bytes` (identities: plan fingerprints, hosts, runs).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        // Kubernetes spells binary units Ki, Mi, Gi, Ti.
        assert_eq!(parse_size("8Gi").unwrap(), 8 << 30);
        assert_eq!(parse_size("512Mi").unwrap(), 512 << 20);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("M").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_bytes(512.0), "512 B");
        assert_eq!(format_bytes(1536.0), "1.5 KiB");
        assert_eq!(format_bytes(412.0 * 1048576.0), "412 MiB");
        assert_eq!(format_seconds(0.85), "850 ms");
        assert_eq!(format_seconds(3.421), "3.42 s");
        assert_eq!(format_seconds(900.0), "15.0 min");
    }

    #[test]
    fn extreme_values_print_short() {
        assert_eq!(format_bytes(f64::MAX), "1.80e308 B");
        assert_eq!(format_bytes(-f64::MAX), "-1.80e308 B");
        assert_eq!(format_bytes(u64::MAX as f64), "16.0 EiB");
        assert_eq!(format_bytes(f64::NAN), "NaN B");
        assert_eq!(format_seconds(f64::MAX), "1.80e308 s");
        assert_eq!(format_seconds(-f64::MAX), "-1.80e308 s");
        assert_eq!(format_seconds(-0.5), "-500 ms");
        assert_eq!(format_seconds(f64::INFINITY), "inf s");
        for v in [
            f64::MAX,
            -f64::MAX,
            1e300,
            -1e300,
            f64::MIN_POSITIVE,
            1e20,
            -1e20,
        ] {
            assert!(format_bytes(v).len() <= 12, "{v}: {}", format_bytes(v));
            assert!(format_seconds(v).len() <= 12, "{v}: {}", format_seconds(v));
        }
    }
}
