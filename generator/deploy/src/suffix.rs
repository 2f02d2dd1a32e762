//! Unique job names: `<name>-YYYYMMDD-HHMMSS-xxxx` (21 characters appended, as validation
//! reserves).

use std::hash::{BuildHasher, Hasher};
use std::time::SystemTime;

use hetgen_spec::model::name_timestamp;

/// `base` with a UTC timestamp ([`name_timestamp`], as a local run's folder has) and 4 random
/// hex digits, so two deploys in one second differ.
pub fn unique_name(base: &str, now: SystemTime) -> String {
    // std's RandomState is seeded from the OS: random enough to tell two deploys apart.
    let random = std::hash::RandomState::new().build_hasher().finish() & 0xffff;
    format!("{base}-{}-{random:04x}", name_timestamp(now))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

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
        let at = |secs| unique_name("job", UNIX_EPOCH + Duration::from_secs(secs));
        assert!(at(0).starts_with("job-19700101-000000-"));
        assert!(at(951_782_400).starts_with("job-20000229-000000-"));
        let before = unique_name("job", UNIX_EPOCH - Duration::from_secs(1));
        assert!(before.starts_with("job-19700101-000000-"), "{before}");
    }
}
