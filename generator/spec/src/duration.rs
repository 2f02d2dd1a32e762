//! Durations written the way people write them: `"90m"`, `"2h"`, `"1h30m"`, `"1d"`, `"45s"`.

/// Seconds in `text`, a sequence of `<integer><unit>` with units `d`, `h`, `m`, `s` in that
/// order, each at most once. `None` when it is not of that form or overflows.
pub fn parse_seconds(text: &str) -> Option<u64> {
    const UNITS: [(char, u64); 4] = [('d', 86_400), ('h', 3_600), ('m', 60), ('s', 1)];
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut next_unit = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 || digits == rest.len() {
            return None;
        }
        let value: u64 = rest[..digits].parse().ok()?;
        let unit = rest[digits..].chars().next()?;
        let position = UNITS[next_unit..].iter().position(|(u, _)| *u == unit)?;
        let (_, scale) = UNITS[next_unit + position];
        next_unit += position + 1;
        total = total.checked_add(value.checked_mul(scale)?)?;
        rest = &rest[digits + unit.len_utf8()..];
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::parse_seconds;

    #[test]
    fn parses_unit_sequences() {
        assert_eq!(parse_seconds("2h"), Some(7200));
        assert_eq!(parse_seconds("1h30m"), Some(5400));
        assert_eq!(parse_seconds("1d"), Some(86_400));
        assert_eq!(parse_seconds("45s"), Some(45));
        assert_eq!(parse_seconds("1d2h3m4s"), Some(93_784));
    }

    #[test]
    fn rejects_other_forms() {
        for bad in [
            "",
            "2",
            "h",
            "2x",
            "30m1h",
            "1h1h",
            "-1h",
            "99999999999999999999d",
            "1.5h",
        ] {
            assert_eq!(parse_seconds(bad), None, "{bad:?}");
        }
    }
}
