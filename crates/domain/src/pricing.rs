//! Prices are micro-USD per one million tokens; a request's cost rounds up to
//! the next micro-USD so many small requests never add up to less than owed.

use crate::money::MicroUsd;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Price {
    pub input_micro_per_mtok: i64,
    pub output_micro_per_mtok: i64,
}

impl Price {
    pub fn cost(&self, input_tokens: i64, output_tokens: i64) -> MicroUsd {
        let n = input_tokens.max(0) as i128 * self.input_micro_per_mtok.max(0) as i128
            + output_tokens.max(0) as i128 * self.output_micro_per_mtok.max(0) as i128;
        let c = (n + 999_999) / 1_000_000;
        MicroUsd(i64::try_from(c).unwrap_or(i64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_rounds_up_to_a_micro_dollar() {
        // $0.15 / 1M input, $0.60 / 1M output (gpt-4o-mini list price).
        let p = Price {
            input_micro_per_mtok: 150_000,
            output_micro_per_mtok: 600_000,
        };
        assert_eq!(p.cost(1_000_000, 0), MicroUsd(150_000));
        assert_eq!(p.cost(1, 0), MicroUsd(1)); // 0.15 micro-USD rounds up
        assert_eq!(p.cost(0, 0), MicroUsd(0));
        assert_eq!(p.cost(1000, 500), MicroUsd(150 + 300));
    }

    #[test]
    fn cost_never_overflows() {
        let p = Price {
            input_micro_per_mtok: i64::MAX,
            output_micro_per_mtok: i64::MAX,
        };
        assert_eq!(p.cost(i64::MAX, i64::MAX), MicroUsd(i64::MAX));
    }
}
