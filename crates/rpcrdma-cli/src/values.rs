//! clap value parsers for numbers with a range: an out-of-range value is a
//! usage error (exit status 2, like every other bad option), not a runtime
//! error.

use std::time::Duration;

/// A number of seconds: finite, above zero, at most `max` and representable
/// as a [`Duration`].
fn seconds_up_to(text: &str, max: f64) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs.is_finite() && secs > 0.0 && secs <= max) {
        return Err(format!(
            "expected a number of seconds above 0 and at most {max}"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"))
}

/// `call --timeout`, `bench --seconds`: 0 < S <= 86400 (one day).
pub fn up_to_a_day(text: &str) -> Result<Duration, String> {
    seconds_up_to(text, 86_400.0)
}

/// `demo --bench-seconds`: 0 < S <= 60.
pub fn demo_seconds(text: &str) -> Result<Duration, String> {
    seconds_up_to(text, 60.0)
}

/// A count of at least 1 (`--depth`, `--connections`).
pub fn at_least_one(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(0) => Err("expected 1 or more".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!(
            "{text:?}: {e} (expected a whole number, 1 or more)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds() {
        assert_eq!(up_to_a_day("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(up_to_a_day("86400"), Ok(Duration::from_secs(86_400)));
        for bad in ["0", "-1", "1e20", "NaN", "inf", "abc", "86401"] {
            assert!(up_to_a_day(bad).is_err(), "{bad}");
        }
        assert!(demo_seconds("61").is_err());
        assert!(up_to_a_day("0.1").is_ok());
    }

    #[test]
    fn counts() {
        assert_eq!(at_least_one("3"), Ok(3));
        assert!(at_least_one("0").is_err());
        assert!(at_least_one("-1").is_err());
    }
}
