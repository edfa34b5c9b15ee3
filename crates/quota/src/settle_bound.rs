//! The sanity bound at the quota store's settle entry points: whatever a
//! caller passes, a settle books amounts within its request's bound and
//! within what Lua's doubles hold exactly — checked here, in Rust, before
//! any script runs (per-request settle and lease settle alike).

use crate::engine::{SettleOutcome, SettleRequest};
use crate::lease::LeaseBook;
use domain::lease::Need;
use tokio::sync::oneshot;

impl SettleRequest<'_> {
    /// (input tokens, output tokens, cost) as they may be booked.
    pub fn billable(&self) -> (i64, i64, i64) {
        self.bound
            .clamp(self.input_tokens, self.output_tokens, self.cost)
    }
}

impl LeaseBook {
    /// Settles a lease-admitted request at its billable amounts; None when
    /// the request was not admitted from a lease (see [`LeaseBook::settle`]).
    pub fn settle_request(
        &self,
        req: &SettleRequest<'_>,
    ) -> Option<oneshot::Receiver<SettleOutcome>> {
        let (input, output, cost) = req.billable();
        let actual = Need {
            input,
            output,
            cost,
        };
        self.settle(req.request_id, actual, req.event_json.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::usage::{Bound, MAX_SETTLE_AMOUNT};
    use domain::Limits;

    #[test]
    fn a_settle_books_within_its_bound_and_lua_range() {
        let l = Limits::default();
        let mut req = SettleRequest {
            request_id: "r",
            tenant: "t",
            app: "a",
            key: "k",
            month: "2026-12",
            input_tokens: -1_616,
            output_tokens: i64::MAX,
            cost: i64::MAX,
            event_json: "{}",
            status: "ok",
            limits: [&l, &l, &l],
            bound: Bound::SAFE,
        };
        assert_eq!(req.billable(), (0, MAX_SETTLE_AMOUNT, MAX_SETTLE_AMOUNT));
        req.bound = Bound {
            input: 100,
            output: 40,
            cost: 1_000,
        };
        assert_eq!(req.billable(), (0, 40, 1_000));
    }
}
