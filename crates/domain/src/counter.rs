//! The range every quota counter and amount lives in. The Redis scripts
//! count in Lua doubles, exact only up to 2^53, so no amount above that may
//! reach them, and no counter may be stored above it (they saturate). One
//! copy of the bound, shared by the Rust checks and (as a literal, kept
//! equal by a test in the quota crate) the Lua prelude.

/// 2^53 − 1: the largest integer a double counts exactly.
pub const MAX_COUNTER: i64 = (1 << 53) - 1;

/// An amount sent to the hold engine (tokens, micro-USD, slots): an integer
/// in `[0, MAX_COUNTER]`, or which argument it is and what it was.
pub fn amount(name: &'static str, v: i64) -> Result<i64, OutOfRange> {
    if (0..=MAX_COUNTER).contains(&v) {
        Ok(v)
    } else {
        Err(OutOfRange { name, value: v })
    }
}

/// A limit sent to the hold engine: `-1` (none) stays; a limit above the
/// counters' range is as good as none and is sent as the largest one.
pub fn limit_arg(v: i64) -> i64 {
    if v < 0 {
        -1
    } else {
        v.min(MAX_COUNTER)
    }
}

/// A sum of counters (a month rebuilt from the ledger), saturated to the
/// range instead of wrapping.
pub fn saturating_sum(values: impl IntoIterator<Item = i64>) -> i64 {
    values
        .into_iter()
        .fold(0i64, |a, v| a.saturating_add(v))
        .clamp(0, MAX_COUNTER)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{name} = {value} is outside the counters' range [0, 2^53 - 1]")]
pub struct OutOfRange {
    pub name: &'static str,
    pub value: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_outside_the_exact_range_of_a_double_are_refused() {
        assert_eq!(amount("input_tokens", 0), Ok(0));
        assert_eq!(amount("input_tokens", MAX_COUNTER), Ok(MAX_COUNTER));
        assert!(amount("input_tokens", MAX_COUNTER + 1).is_err());
        assert!(amount("input_tokens", i64::MAX).is_err());
        let e = amount("output_tokens", -1).unwrap_err();
        assert_eq!(e.name, "output_tokens");
        assert!(e.to_string().contains("output_tokens = -1"));
    }

    #[test]
    fn limits_above_the_range_are_the_largest_limit_and_none_stays_none() {
        assert_eq!(limit_arg(-1), -1);
        assert_eq!(limit_arg(1_000), 1_000);
        assert_eq!(limit_arg(i64::MAX), MAX_COUNTER);
    }

    #[test]
    fn a_sum_saturates_instead_of_wrapping() {
        assert_eq!(saturating_sum([1, 2, 3]), 6);
        assert_eq!(saturating_sum([i64::MAX, i64::MAX]), MAX_COUNTER);
        assert_eq!(saturating_sum([MAX_COUNTER, 1]), MAX_COUNTER);
        assert_eq!(saturating_sum([-5, 2]), 0);
    }
}
