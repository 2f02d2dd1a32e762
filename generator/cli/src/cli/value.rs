//! Typed parsers for the numeric flags. Each refuses anything but a finite number in its range
//! (`inf`, `nan`, `1e400`, `2^64`, negatives, garbage), so a bad value is a usage error (exit 2)
//! that names the flag and the range, raised before any work starts or any request is sent.

use std::time::Duration;

/// The largest `--max-runtime`: SageMaker's own limit on a training job (28 days).
pub const MAX_RUNTIME_S: f64 = 28.0 * 86_400.0;
/// The most cores a CPU set can name (Linux's `CPU_SETSIZE`).
pub const MAX_CORES: u64 = 1024;

/// A parser of one flag's values, as clap's `value_parser` takes it.
pub trait Parser<T>: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static {}
impl<T, F: Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static> Parser<T> for F {}

/// A real number in `min ..= high`, described as `what` in the error. Each flag's `min` is
/// the smallest value that means something for it, not merely "more than 0".
pub fn real(min: f64, high: f64, what: &'static str) -> impl Parser<f64> {
    move |text: &str| {
        let expected = || format!("expected {what} from {min} to {high}");
        // `f64::from_str` takes `inf`, `nan` and `1e400` (as infinity): refuse them by range;
        // and `1e-320`, a subnormal that passes "≥ 0" and then divides into nonsense.
        let x: f64 = text.trim().parse().map_err(|_| expected())?;
        if x != 0.0 && !x.is_normal() {
            return Err(expected());
        }
        if x.is_finite() && x >= min && x <= high {
            Ok(x)
        } else {
            Err(expected())
        }
    }
}

/// A number of seconds (decimals allowed) in `min ..= high`.
pub fn seconds(min: f64, high: f64) -> impl Parser<Duration> {
    let parse = real(min, high, "a number of seconds");
    move |text: &str| parse(text).map(Duration::from_secs_f64)
}

/// `--since`: an age (`90s`, `10m`, `2h`, `1day`) before now, or an RFC 3339 time.
pub fn since(text: &str) -> Result<std::time::SystemTime, String> {
    let text = text.trim();
    if let Ok(time) = humantime::parse_rfc3339_weak(text) {
        return Ok(time);
    }
    let age = humantime::parse_duration(text).map_err(|_| {
        "expected an age such as `10m` or `2h`, or a time such as `2026-12-04T14:00:00Z`".to_owned()
    })?;
    std::time::SystemTime::now()
        .checked_sub(age)
        .filter(|t| *t >= std::time::UNIX_EPOCH)
        .ok_or_else(|| format!("`{text}` ago is before 1970"))
}

/// A whole number in `low ..= high`.
pub fn whole<T>(low: u64, high: u64) -> impl Parser<T>
where
    T: TryFrom<u64>,
{
    move |text: &str| {
        let expected = || format!("expected a whole number from {low} to {high}");
        let n: u64 = text.trim().parse().map_err(|_| expected())?;
        if (low..=high).contains(&n) {
            T::try_from(n).map_err(|_| expected())
        } else {
            Err(expected())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reals_in_range_pass_and_everything_else_is_refused() {
        let p = real(0.01, 10.0, "a price");
        assert_eq!(p("2.5"), Ok(2.5));
        assert_eq!(p("10"), Ok(10.0));
        for bad in [
            "0", "-5", "10.5", "inf", "-inf", "nan", "NaN", "1e400", "1e-320", "x", "",
        ] {
            let err = p(bad).unwrap_err();
            assert_eq!(err, "expected a price from 0.01 to 10", "{bad}");
        }
        let s = seconds(0.0, 3600.0);
        assert_eq!(s("0"), Ok(Duration::ZERO));
        assert_eq!(s("1.5"), Ok(Duration::from_millis(1500)));
        // Zero is a value; a subnormal is not a meaningful one.
        assert!(s("5e-324").is_err());
        assert!(s("3600.001").is_err());
    }

    #[test]
    fn whole_numbers_in_range_pass_and_everything_else_is_refused() {
        let p = whole::<usize>(1, MAX_CORES);
        assert_eq!(p("1"), Ok(1));
        assert_eq!(p("1024"), Ok(1024));
        for bad in [
            "0",
            "1025",
            "-1",
            "1.5",
            "18446744073709551616",
            "2^64",
            "inf",
            "",
        ] {
            assert_eq!(
                p(bad).unwrap_err(),
                "expected a whole number from 1 to 1024",
                "{bad}"
            );
        }
        let i = whole::<i32>(1, 100);
        assert_eq!(i("100"), Ok(100));
    }
}
