//! Durations written as `250ms`, `15s`, `2m`, `1h`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration from the config file; serializes back to the shortest exact form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dur(pub Duration);

/// Parses `<digits><unit>` with unit `ms`, `s`, `m` or `h`.
///
/// Strict on purpose: no sign, no spaces, no fractions, no missing unit, no
/// compound forms (`1m30s`); operators write `90s` instead.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let digits_end = text.bytes().position(|b| !b.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!("invalid duration {}: expected digits followed by ms, s, m or h", super::show(text)));
    }
    let n: u64 = digits.parse().map_err(|_| format!("invalid duration {}: number too large", super::show(text)))?;
    let ms_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "" => return Err(format!("invalid duration {}: missing unit (ms, s, m or h)", super::show(text))),
        _ => {
            return Err(format!(
                "invalid duration {}: unknown unit {} (use ms, s, m or h)",
                super::show(text),
                super::show(unit)
            ))
        }
    };
    let ms = n.checked_mul(ms_per_unit).ok_or_else(|| format!("invalid duration {}: too large", super::show(text)))?;
    Ok(Duration::from_millis(ms))
}

impl fmt::Display for Dur {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.0.as_millis();
        if ms != 0 && ms.is_multiple_of(3_600_000) {
            write!(f, "{}h", ms / 3_600_000)
        } else if ms != 0 && ms.is_multiple_of(60_000) {
            write!(f, "{}m", ms / 60_000)
        } else if ms.is_multiple_of(1_000) {
            write!(f, "{}s", ms / 1_000)
        } else {
            write!(f, "{ms}ms")
        }
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Dur;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as 250ms, 15s or 2m")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Dur, E> {
                parse_duration(v).map(Dur).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

impl Serialize for Dur {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_loose_forms() {
        for bad in ["", "+5s", "5 s", " 5s", "5s ", "5", "5sec", "1.5s", "-1s", "1m30s", "s", "99999999999999999999s"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn displays_shortest_exact_form() {
        for (ms, text) in
            [(250, "250ms"), (15_000, "15s"), (120_000, "2m"), (7_200_000, "2h"), (0, "0s"), (1_500, "1500ms")]
        {
            assert_eq!(Dur(Duration::from_millis(ms)).to_string(), text);
        }
    }
}
