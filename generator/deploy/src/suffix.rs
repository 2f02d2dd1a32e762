//! Unique job names: `<name>-YYYYMMDD-HHMMSS-xxxx` (21 characters appended, as validation
//! reserves).

use std::hash::{BuildHasher, Hasher};
use std::time::{SystemTime, UNIX_EPOCH};

/// `base` with a UTC timestamp and 4 random hex digits, so two deploys in one second differ.
pub fn unique_name(base: &str, now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    // std's RandomState is seeded from the OS: random enough to tell two deploys apart.
    let random = std::hash::RandomState::new().build_hasher().finish() & 0xffff;
    format!(
        "{base}-{y:04}{m:02}{d:02}-{:02}{:02}{:02}-{random:04x}",
        t / 3600,
        t / 60 % 60,
        t % 60
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn suffix_is_21_characters_of_utc_time() {
        // 2026-12-02T18:50:27Z
        let now = UNIX_EPOCH + Duration::from_secs(1_796_237_427);
        let name = unique_name("job", now);
        assert_eq!(name.len(), "job".len() + 21, "{name}");
        assert!(name.starts_with("job-20261202-185027-"), "{name}");
    }

    #[test]
    fn calendar_edges() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }
}
