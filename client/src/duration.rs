//! Human durations on the command line: `500ms`, `30s`, `2m`, `1h`, or a
//! bare number of seconds (`10`, `1.5`).

use std::fmt;
use std::time::Duration;

/// Why a duration was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DurationError {
    /// The text given.
    pub input: String,
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a duration; write e.g. 500ms, 30s, 2m, 1h or a number of seconds",
            self.input
        )
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration such as `50ms`, `1.5s`, `2m`, `1h` or `10` (seconds).
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_owned(),
    };
    let text = input.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if number.is_empty() || number.starts_with('.') || number.ends_with('.') {
        return Err(err());
    }
    let value: f64 = number.parse().map_err(|_| err())?;
    let seconds_per_unit = match unit.trim() {
        "ms" => 0.001,
        "" | "s" | "sec" | "secs" => 1.0,
        "m" | "min" | "mins" => 60.0,
        "h" | "hour" | "hours" => 3600.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(value * seconds_per_unit).map_err(|_| err())
}

/// Formats a duration the way [`parse_duration`] reads it back.
pub fn format_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_bare_seconds() {
        assert_eq!(parse_duration("50ms").unwrap(), Duration::from_millis(50));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(format_duration(Duration::from_millis(50)), "50ms");
        assert_eq!(format_duration(Duration::from_secs(3)), "3s");
    }

    #[test]
    fn garbage_is_refused_with_a_hint() {
        for bad in ["", "ms", "-1s", "1.s", ".5s", "5 parsecs", "1e400", "nan"] {
            let e = parse_duration(bad).unwrap_err();
            assert!(e.to_string().contains("500ms"), "{bad}: {e}");
        }
    }
}
