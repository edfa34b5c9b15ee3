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

    /// The amount as people read it: "$125,000.00", "-$3.50". Cents always;
    /// more decimals only for what lies below a cent, and then exactly
    /// ("$0.0042", "$1.234567"): a shown amount is never rounded, so a sum
    /// of shown amounts is the shown sum. The one rule every page uses.
    pub fn shown(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let a = self.0.unsigned_abs();
        let whole = a / 1_000_000;
        let frac = format!("{:06}", a % 1_000_000);
        let frac = frac.trim_end_matches('0');
        let frac = if frac.len() < 2 {
            &format!("{:06}", a % 1_000_000)[..2]
        } else {
            frac
        };
        format!("{sign}${}.{frac}", group_thousands(whole))
    }
}

/// 1234567 → "1,234,567".
pub fn group_thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
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

/// Pico-USD per micro-USD.
pub const PICO_PER_MICRO: i128 = 1_000_000;

/// Exact pico-USD as whole micro-USD, rounded half up (half a micro-dollar
/// and more up, less down): how a bill line is rounded, once, from the
/// exact sum of its rows (docs/billing.md, "Exact cost, and the rounding
/// rule"). Saturated to `[0, i64::MAX]`.
pub fn micro_rounded(pico: i128) -> i64 {
    let micro = (pico.max(0) + PICO_PER_MICRO / 2) / PICO_PER_MICRO;
    i64::try_from(micro).unwrap_or(i64::MAX)
}

/// Signed exact pico-USD as whole micro-USD, rounded half away from zero:
/// an adjustment, which may be a credit (docs/billing.md, "Adjustments").
pub fn signed_micro_rounded(pico: i128) -> i64 {
    let m = micro_rounded(pico.abs());
    if pico < 0 {
        -m
    } else {
        m
    }
}

/// An exact amount of pico-USD as people read it, every significant digit
/// kept: "$0.00018", "$1.500000000001", "$12.00" (cents always).
pub fn pico_shown(pico: i128) -> String {
    let sign = if pico < 0 { "-" } else { "" };
    let a = pico.unsigned_abs();
    let whole = u64::try_from(a / 1_000_000_000_000).unwrap_or(u64::MAX);
    let frac = format!("{:012}", a % 1_000_000_000_000);
    let frac = frac.trim_end_matches('0');
    let frac = if frac.len() < 2 {
        format!("{frac:0<2}")
    } else {
        frac.to_string()
    };
    format!("{sign}${}.{frac}", group_thousands(whole))
}

/// Splits `total` into shares proportional to `weights` that add up to
/// `total` exactly: each share is its proportional part rounded down, and
/// the units left over go one each to the largest remainders (ties: the
/// earlier weight). How a rounded bill line is split across the lines
/// below it (departments, apps, components), so that they add up to it.
/// Weights ≤ 0 count as 0; when all are 0, the first share takes the total.
pub fn apportion(total: i128, weights: &[i128]) -> Vec<i128> {
    let mut shares = vec![0i128; weights.len()];
    if weights.is_empty() {
        return shares;
    }
    let sum: i128 = weights.iter().map(|w| (*w).max(0)).sum();
    if sum == 0 {
        shares[0] = total;
        return shares;
    }
    let mut remainders = Vec::with_capacity(weights.len());
    let mut given = 0i128;
    for (i, w) in weights.iter().enumerate() {
        let w = (*w).max(0);
        // total × w / sum without overflow for any realistic amount:
        // i128 holds 10^38, a month's pico-USD is far below 10^24.
        let exact = total.saturating_mul(w);
        shares[i] = exact.div_euclid(sum);
        remainders.push((exact.rem_euclid(sum), i));
        given += shares[i];
    }
    let left = total - given;
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, i) in remainders
        .into_iter()
        .take(usize::try_from(left.max(0)).unwrap_or(0))
    {
        shares[i] += 1;
    }
    shares
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
    fn shown_with_separators_and_cents_and_sub_cent_digits_only_when_there() {
        let cases = [
            (125_000_000_000, "$125,000.00"),
            (50_000_000, "$50.00"),
            (0, "$0.00"),
            (1_500_000, "$1.50"),
            (1_230_000, "$1.23"),
            (1_234_567, "$1.234567"),
            (4_200, "$0.0042"),
            (1, "$0.000001"),
            (75_000, "$0.075"),
            (999_999_999_990_000, "$999,999,999.99"),
            (-3_500_000, "-$3.50"),
            (-1, "-$0.000001"),
            (i64::MIN, "-$9,223,372,036,854.775808"),
        ];
        for (micro, want) in cases {
            assert_eq!(MicroUsd(micro).shown(), want, "{micro}");
        }
        assert_eq!(group_thousands(999), "999");
        assert_eq!(group_thousands(1_000), "1,000");
        assert_eq!(group_thousands(12_345_678), "12,345,678");
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

    #[test]
    fn a_line_rounds_half_up_once() {
        assert_eq!(super::micro_rounded(499_999), 0);
        assert_eq!(super::micro_rounded(500_000), 1);
        assert_eq!(super::micro_rounded(1_499_999), 1);
        assert_eq!(super::micro_rounded(-5), 0);
    }

    #[test]
    fn shares_add_up_to_the_line_and_follow_the_weights() {
        use super::apportion;
        // Three departments of exactly a third each: 100 µUSD split 34/33/33.
        assert_eq!(apportion(100, &[1, 1, 1]), vec![34, 33, 33]);
        // Largest remainder wins the leftover unit.
        assert_eq!(apportion(10, &[1, 2, 7]), vec![1, 2, 7]);
        assert_eq!(apportion(3, &[333, 333, 334]), vec![1, 1, 1]);
        assert_eq!(apportion(2, &[1, 1, 8]), vec![0, 0, 2]);
        assert_eq!(apportion(7, &[0, 0]), vec![7, 0]);
        assert!(apportion(5, &[]).is_empty());
        // Any split adds up, whatever the weights.
        let mut seed = 7u64;
        for _ in 0..500 {
            let n = (seed % 9 + 1) as usize;
            let weights: Vec<i128> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    i128::from(seed >> 40)
                })
                .collect();
            let total = i128::from(seed >> 50);
            let shares = apportion(total, &weights);
            assert_eq!(shares.iter().sum::<i128>(), total);
            let sum: i128 = weights.iter().sum();
            for (s, w) in shares.iter().zip(&weights) {
                // Each share within one unit of its exact part.
                if sum > 0 {
                    assert!(
                        (s * sum - total * w).abs() <= sum,
                        "{s} of {total} for {w}/{sum}"
                    );
                }
            }
        }
    }

    #[test]
    fn exact_amounts_keep_every_digit() {
        assert_eq!(super::pico_shown(180_000_000), "$0.00018");
        assert_eq!(super::pico_shown(1_500_000_000_001), "$1.500000000001");
        assert_eq!(super::pico_shown(12_000_000_000_000), "$12.00");
        assert_eq!(super::pico_shown(0), "$0.00");
        assert_eq!(super::pico_shown(-10_000_000_000), "-$0.01");
    }
}
