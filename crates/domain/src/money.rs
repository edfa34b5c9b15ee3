//! Money is integer micro-USD. JSON carries it as a decimal string of USD
//! with six places ("12.500000"); floats never touch it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MicroUsd(pub i64);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MoneyError {
    #[error("not a decimal amount of USD: {0:?}")]
    Malformed(String),
    #[error("more than six decimal places: {0:?}")]
    TooPrecise(String),
    #[error("amount out of range: {0:?}")]
    Overflow(String),
}

impl MicroUsd {
    pub const ZERO: MicroUsd = MicroUsd(0);

    pub fn from_usd_str(s: &str) -> Result<Self, MoneyError> {
        let t = s.trim();
        let (neg, body) = match t.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, t),
        };
        let (int, frac) = match body.split_once('.') {
            Some((i, f)) => (i, f),
            None => (body, ""),
        };
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(int) || (!frac.is_empty() && !digits(frac)) || (body.ends_with('.')) {
            return Err(MoneyError::Malformed(s.to_string()));
        }
        if frac.len() > 6 {
            return Err(MoneyError::TooPrecise(s.to_string()));
        }
        let whole: i64 = int
            .parse()
            .map_err(|_| MoneyError::Overflow(s.to_string()))?;
        let mut f: i64 = if frac.is_empty() {
            0
        } else {
            frac.parse().unwrap_or(0)
        };
        for _ in frac.len()..6 {
            f *= 10;
        }
        let v = whole
            .checked_mul(1_000_000)
            .and_then(|w| w.checked_add(f))
            .ok_or_else(|| MoneyError::Overflow(s.to_string()))?;
        Ok(MicroUsd(if neg { -v } else { v }))
    }

    pub fn checked_add(self, o: MicroUsd) -> Option<MicroUsd> {
        self.0.checked_add(o.0).map(MicroUsd)
    }
}

impl fmt::Display for MicroUsd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
    }
}

impl Serialize for MicroUsd {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for MicroUsd {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        MicroUsd::from_usd_str(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_usd() {
        assert_eq!(
            MicroUsd::from_usd_str("12.5").unwrap(),
            MicroUsd(12_500_000)
        );
        assert_eq!(MicroUsd::from_usd_str("0.000001").unwrap(), MicroUsd(1));
        assert_eq!(MicroUsd::from_usd_str("3").unwrap().to_string(), "3.000000");
        assert_eq!(MicroUsd(-1_500_000).to_string(), "-1.500000");
    }

    #[test]
    fn refuses_bad_amounts() {
        assert!(matches!(
            MicroUsd::from_usd_str("1.0000001"),
            Err(MoneyError::TooPrecise(_))
        ));
        assert!(matches!(
            MicroUsd::from_usd_str("1e3"),
            Err(MoneyError::Malformed(_))
        ));
        assert!(matches!(
            MicroUsd::from_usd_str("1."),
            Err(MoneyError::Malformed(_))
        ));
        assert!(matches!(
            MicroUsd::from_usd_str(""),
            Err(MoneyError::Malformed(_))
        ));
        assert!(matches!(
            MicroUsd::from_usd_str("99999999999999999"),
            Err(MoneyError::Overflow(_))
        ));
    }

    #[test]
    fn json_is_a_decimal_string() {
        let v: MicroUsd = serde_json::from_str("\"0.250000\"").unwrap();
        assert_eq!(v, MicroUsd(250_000));
        assert_eq!(serde_json::to_string(&v).unwrap(), "\"0.250000\"");
    }
}
