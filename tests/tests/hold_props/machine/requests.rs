//! Per-request operations: hold (with the gateway's on-demand borrow),
//! extend, settle, release, and replays of open and closed request ids.

use super::{actual, budget_refusal, end_user_of, pick_in, usage_event, Machine};
use domain::Limits;
use proptest::prelude::*;
use quota::{ExtendOutcome, ExtendRequest, HoldOutcome, SettleOutcome};

impl Machine {
    /// A request's hold. Refused for the tenant's monthly budget, it asks
    /// the borrower and, when the limit grew, retries once (the gateway's
    /// on-demand borrowing).
    pub(super) async fn hold(
        &mut self,
        est: (i64, i64),
        lim: &Limits,
    ) -> Result<(), TestCaseError> {
        let rid = self.next_rid();
        let mut lim = lim.clone();
        let mut outcome = self.hold_once(&rid, est, &lim).await;
        if budget_refusal(&outcome) && self.pool.borrow_on_demand(&self.budget).await? {
            lim = self.budget.limits();
            outcome = self.hold_once(&rid, est, &lim).await;
        }
        if let HoldOutcome::Admitted { .. } = outcome {
            self.m.open.push((rid, est.0, est.1));
            self.assert_within(&lim, "hold").await?;
        }
        Ok(())
    }

    pub(super) async fn extend(
        &mut self,
        pick: usize,
        add: i64,
        lim: &Limits,
    ) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.open, pick) else {
            return Ok(());
        };
        let rid = self.m.open[i].0.clone();
        let req = ExtendRequest {
            budgets: &[],
            request_id: &rid,
            tenant: self.tenant(),
            app: "a",
            key: "k",
            month: self.month(),
            add_output: add,
            add_cost: 0,
            limits: self.scopes(lim),
        };
        match self.q.extend_with(&req, self.eu(&rid)).await.unwrap() {
            ExtendOutcome::Extended { .. } => {
                self.m.open[i].2 += add;
                self.assert_within(lim, "extend").await?;
            }
            ExtendOutcome::Refused(_) => {}
            // The hold record was flushed away with Redis.
            ExtendOutcome::NotHeld { .. } => {}
        }
        Ok(())
    }

    pub(super) async fn settle(
        &mut self,
        pick: usize,
        (pct, in_delta): (i64, i64),
        store_now: bool,
        lim: &Limits,
    ) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.open, pick) else {
            return Ok(());
        };
        let (rid, input, output) = self.m.open.remove(i);
        let act = actual((input, output), pct, in_delta);
        self.m.overrun_of((input, output), act);
        self.m.eu_overrun_of(&rid, (input, output), act);
        let u = end_user_of(&rid);
        let event = usage_event(
            self.tenant(),
            &rid,
            self.month(),
            (input, output),
            act,
            Some(u),
        );
        let json = serde_json::to_string(&event).unwrap();
        let req = self.settle_request(&rid, act, &json, lim);
        let first = self.q.settle_with(&req, Some(u)).await.unwrap();
        prop_assert!(matches!(first, SettleOutcome::Settled { .. }), "{first:?}");
        // A replayed settle charges nothing more.
        let again = self.q.settle_with(&req, Some(u)).await.unwrap();
        prop_assert!(
            matches!(again, SettleOutcome::AlreadyClosed { .. }),
            "{again:?}"
        );
        self.m.closed.push((rid, input, output));
        // The ledger writer's path; otherwise the event waits in the outbox.
        self.book(event, store_now).await;
        Ok(())
    }

    pub(super) async fn release(&mut self, pick: usize, lim: &Limits) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.open, pick) else {
            return Ok(());
        };
        let (rid, input, output) = self.m.open.remove(i);
        let (t, m) = (self.tenant(), self.month());
        let u = Some(end_user_of(&rid));
        let released = self
            .q
            .release_with(t, "a", "k", m, &rid, self.scopes(lim), u);
        // A hold a flush lost leaves no record to answer a replay.
        if released.await.unwrap() {
            self.m.closed.push((rid, input, output));
        }
        Ok(())
    }

    pub(super) async fn replay(&mut self, pick: usize, lim: &Limits) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.open, pick) else {
            return Ok(());
        };
        let (rid, input, output) = self.m.open[i].clone();
        let before = self.counters().await;
        let eu_before = self.eu_counters(end_user_of(&rid)).await;
        let r = self.hold_once(&rid, (input, output), lim).await;
        // A replay is a no-op (or a fresh hold, if Redis lost the record).
        if matches!(r, HoldOutcome::Duplicate { .. }) {
            prop_assert_eq!(self.counters().await, before);
            prop_assert_eq!(self.eu_counters(end_user_of(&rid)).await, eu_before);
        }
        if let HoldOutcome::Admitted { .. } = r {
            self.assert_within(lim, "a replayed hold").await?;
        }
        Ok(())
    }

    /// A closed request's hold, release and settle again: each answers from
    /// the request's record and changes no counter.
    pub(super) async fn replay_closed(
        &mut self,
        pick: usize,
        lim: &Limits,
    ) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.closed, pick) else {
            return Ok(());
        };
        let (rid, input, output) = self.m.closed[i].clone();
        let u = end_user_of(&rid);
        let before = self.counters().await;
        let eu_before = self.eu_counters(u).await;
        let r = self.hold_once(&rid, (input, output), lim).await;
        prop_assert!(matches!(r, HoldOutcome::Duplicate { .. }), "{r:?}");
        let (t, m) = (self.tenant(), self.month());
        let released = self
            .q
            .release_with(t, "a", "k", m, &rid, self.scopes(lim), Some(u));
        prop_assert!(!released.await.unwrap(), "released a closed request");
        let settle = self.settle_request(&rid, (input, output), "{}", lim);
        let s = self.q.settle_with(&settle, Some(u)).await.unwrap();
        prop_assert!(matches!(s, SettleOutcome::AlreadyClosed { .. }), "{s:?}");
        // Nothing moved — but the lease book's janitor may return an idle
        // lease meanwhile (idle after `lease_life_ms`), which only lowers
        // what is held (the same race `reclaim` allows for): held may have
        // fallen, every other counter is as it was.
        let after = self.counters().await;
        for (k, was) in &before.0 {
            let now = after.0.get(k).copied().unwrap_or(0);
            if k.ends_with(":ht") || k.ends_with(":hc") {
                prop_assert!(now <= *was, "{k}: {was} -> {now} on a replay");
            } else {
                prop_assert_eq!(now, *was, "{} on a replay", k);
            }
        }
        prop_assert!(
            after.0.keys().all(|k| before.0.contains_key(k)),
            "a replay added a counter: {after:?} after {before:?}"
        );
        prop_assert_eq!(self.eu_counters(u).await, eu_before);
        Ok(())
    }
}
