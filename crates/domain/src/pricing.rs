//! Prices are micro-USD per one million tokens; a request's cost rounds up to
//! the next micro-USD so many small requests never add up to less than owed.

use crate::money::MicroUsd;
use serde::{Deserialize, Serialize};

pub mod litellm;
pub mod sheet;

pub use crate::charges::{Charges, Component};
pub use sheet::{PriceBook, PriceSheet};

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

/// The largest output per choice that the budget headroom still covers
/// after the input, when it is at least `min_per_choice`; None when no
/// budget binds or too little is left to be useful.
pub fn clamped_output_per_choice(
    headroom_tokens: Option<i64>,
    headroom_cost: Option<i64>,
    input: i64,
    price: &Price,
    choices: i64,
    min_per_choice: i64,
) -> Option<i64> {
    let mut out: Option<i64> = None;
    if let Some(t) = headroom_tokens {
        out = Some(t - input);
    }
    if let Some(c) = headroom_cost {
        // cost = ceil((in*pin + out*pout) / 1e6) <= c  <=>  in*pin + out*pout <= c*1e6
        let room = c as i128 * 1_000_000 - input as i128 * price.input_micro_per_mtok as i128;
        if room < 0 {
            return None;
        }
        let by_cost = match price.output_micro_per_mtok {
            0 => i64::MAX,
            p => (room / p as i128).min(i64::MAX as i128) as i64,
        };
        out = Some(out.map_or(by_cost, |o| o.min(by_cost)));
    }
    let per_choice = out? / choices.max(1);
    (per_choice >= min_per_choice).then_some(per_choice)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamps_to_the_tightest_budget_and_refuses_useless_answers() {
        let p = Price {
            input_micro_per_mtok: 1_000_000,
            output_micro_per_mtok: 2_000_000,
        };
        // 1000 tokens of room, 100 of them input: 900 of output.
        assert_eq!(
            clamped_output_per_choice(Some(1000), None, 100, &p, 1, 64),
            Some(900)
        );
        assert_eq!(
            clamped_output_per_choice(Some(1000), None, 100, &p, 3, 64),
            Some(300)
        );
        // 500 micro-USD: 100 input cost 100, leaving 400 = 200 output tokens.
        assert_eq!(
            clamped_output_per_choice(Some(1000), Some(500), 100, &p, 1, 64),
            Some(200)
        );
        assert_eq!(p.cost(100, 200).0, 500);
        // Too little left to be useful, or no budget binding at all.
        assert_eq!(
            clamped_output_per_choice(Some(150), None, 100, &p, 1, 64),
            None
        );
        assert_eq!(
            clamped_output_per_choice(None, Some(50), 100, &p, 1, 1),
            None
        );
        assert_eq!(clamped_output_per_choice(None, None, 100, &p, 1, 1), None);
    }

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
