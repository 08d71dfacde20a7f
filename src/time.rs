//! UTC timestamps without a date crate: RFC 3339 / ISO 8601 `Z` strings for the wire and
//! IMF-fixdate strings for HTTP headers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (0 for clocks set before 1970).
pub fn now_millis() -> u64 {
    millis_of(SystemTime::now())
}

pub fn millis_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `2026-11-29T20:30:09.802Z`
pub fn rfc3339_millis(ms: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(ms / 1000);
    sized(
        24,
        format_args!(
            "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:03}Z",
            ms % 1000
        ),
    )
}

/// `2026-11-29T20:30:09Z` (whole seconds, for RFC 3339 fields such as `created_at`).
pub fn rfc3339_secs(secs: u64) -> String {
    let (y, mo, d, h, mi, s) = civil(secs);
    sized(
        20,
        format_args!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
    )
}

/// `Sun, 29 Nov 2026 20:30:09 GMT` (RFC 9110 IMF-fixdate).
pub fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let (y, mo, d, h, mi, s) = civil(secs);
    let weekday = DAYS[((secs / 86_400) % 7) as usize];
    sized(
        29,
        format_args!(
            "{weekday}, {d:02} {} {y:04} {h:02}:{mi:02}:{s:02} GMT",
            MONTHS[(mo - 1) as usize]
        ),
    )
}

/// Formatted text in one allocation of `capacity` (the length of a four-digit-year stamp);
/// `format!` guesses low for padded fields and grows the string two or three times.
fn sized(capacity: usize, args: std::fmt::Arguments) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(capacity);
    let _ = text.write_fmt(args);
    text
}

/// Parses an RFC 3339 timestamp (any fraction length, `Z` or a numeric offset) into
/// milliseconds since the epoch. Returns `None` for anything else.
pub fn parse_rfc3339_millis(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<u64> {
        let s = text.get(r)?;
        if s.bytes().all(|c| c.is_ascii_digit()) {
            s.parse().ok()
        } else {
            None
        }
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || d == 0 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 60
    {
        return None;
    }
    let mut i = 19;
    let mut millis = 0u64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            if i - start < 3 {
                millis = millis * 10 + u64::from(b[i] - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_secs: i64 = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let oh = num(i + 1..i + 3)? as i64;
            let om = num(i + 4..i + 6)? as i64;
            let off = oh * 3600 + om * 60;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y as i64, mo as i64, d as i64);
    let secs = days * 86_400 + (h * 3600 + mi * 60 + s) as i64 - offset_secs;
    if secs < 0 {
        return None;
    }
    Some(secs as u64 * 1000 + millis)
}

/// A duration as [`parse_duration`] reads it back, in whole seconds: `90m`, `2h`, `1h30m5s`,
/// `0s`.
pub fn duration_text(d: Duration) -> String {
    let secs = d.as_secs();
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 || out.is_empty() {
        out.push_str(&format!("{s}s"));
    }
    out
}

/// Parses a Go-style duration (`60s`, `500ms`, `2m`, `1h30m`, and days: `7d`) or a bare
/// number of seconds.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Ok(secs) = text.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let value: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => Duration::from_millis(value),
            "s" => Duration::from_secs(value),
            "m" => Duration::from_secs(value.checked_mul(60)?),
            "h" => Duration::from_secs(value.checked_mul(3600)?),
            "d" => Duration::from_secs(value.checked_mul(86_400)?),
            _ => return None,
        };
        total = total.checked_add(unit)?;
        rest = &rest[unit_len..];
    }
    Some(total)
}

fn days_in_month(y: u64, m: u64) -> u64 {
    match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Howard Hinnant's days-from-civil.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the epoch → (year, month, day, hour, minute, second).
fn civil(secs: u64) -> (u64, u64, u64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y as u64,
        m as u64,
        d as u64,
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_795_984_209_802),
            "2026-11-29T20:30:09.802Z"
        );
        assert_eq!(rfc3339_secs(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(http_date(1_795_984_209), "Sun, 29 Nov 2026 20:30:09 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn parses_what_it_formats_and_other_fractions() {
        for ms in [0, 1_795_984_209_802, 951_782_400_000, 4_102_444_799_999] {
            assert_eq!(parse_rfc3339_millis(&rfc3339_millis(ms)), Some(ms));
        }
        assert_eq!(
            parse_rfc3339_millis("2026-11-29T20:30:09.802123456Z"),
            Some(1_795_984_209_802)
        );
        assert_eq!(
            parse_rfc3339_millis("2026-11-29T20:30:09Z"),
            Some(1_795_984_209_000)
        );
        assert_eq!(
            parse_rfc3339_millis("2026-11-29T21:30:09.8+01:00"),
            Some(1_795_984_209_800)
        );
        for bad in [
            "",
            "2026-11-29",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-11-29T20:30:09",
            "2026-11-29T20:30:09.Z",
            "2026-11-29T20:30:09Zjunk",
            "２026-11-29T20:30:09Z",
        ] {
            assert_eq!(parse_rfc3339_millis(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_read_units_and_bare_seconds_and_refuse_the_rest() {
        assert_eq!(parse_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        for bad in ["", "s", "10x", "-5s", "1.5s", "99999999999999999999h"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
