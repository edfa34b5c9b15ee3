//! Lease-path operations: admit (falling back to a per-request hold near
//! the limit), batched settles, releases, returns on shutdown, and expiry
//! by the reconciler.

use super::{actual, pick_in, usage_event, Machine};
use domain::Limits;
use proptest::prelude::*;
use quota::{HoldOutcome, LeaseAdmit, LeaseBook, SettleOutcome};
use std::time::Duration;

impl Machine {
    pub(super) async fn lease_admit(
        &mut self,
        est: (i64, i64),
        lim: &Limits,
    ) -> Result<(), TestCaseError> {
        let rid = self.next_rid();
        let req = self.hold_request(&rid, est, lim);
        let book = self.books.len() - 1;
        let outcome = self.books[book].admit(&req, &self.ledger()).await.unwrap();
        let admitted = match outcome {
            LeaseAdmit::Admitted { .. } => {
                self.m.leased.push((book, rid, est.0, est.1));
                true
            }
            // Near the limit: the gateway's per-request hold.
            LeaseAdmit::PerRequest => {
                let outcome = self.hold_once(&rid, est, lim).await;
                let admitted = matches!(outcome, HoldOutcome::Admitted { .. });
                if admitted {
                    self.m.open.push((rid, est.0, est.1));
                }
                admitted
            }
        };
        if admitted {
            self.assert_within(lim, "lease admission").await?;
        }
        Ok(())
    }

    pub(super) async fn lease_settle(
        &mut self,
        pick: usize,
        (pct, in_delta): (i64, i64),
        store_now: bool,
    ) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.leased, pick) else {
            return Ok(());
        };
        let (book, rid, input, output) = self.m.leased.remove(i);
        let (ai, ao) = actual((input, output), pct, in_delta);
        self.m.overrun_of((input, output), (ai, ao));
        let event = usage_event(
            self.tenant(),
            &rid,
            self.month(),
            (input, output),
            (ai, ao),
            None,
        );
        let json = serde_json::to_string(&event).unwrap();
        let used = domain::lease::Need {
            input: ai,
            output: ao,
            cost: 0,
        };
        let answer = self.books[book]
            .settle(&rid, used, json)
            .expect("admitted from a lease")
            .await
            .unwrap();
        prop_assert!(
            matches!(answer, SettleOutcome::Settled { .. }),
            "{answer:?}"
        );
        prop_assert!(
            self.books[book].settle(&rid, used, String::new()).is_none(),
            "settled twice"
        );
        self.book(event, store_now).await;
        Ok(())
    }

    pub(super) fn lease_release(&mut self, pick: usize) -> Result<(), TestCaseError> {
        let Some(i) = pick_in(&self.m.leased, pick) else {
            return Ok(());
        };
        let (book, rid, _, _) = self.m.leased.remove(i);
        prop_assert!(self.books[book].release(&rid));
        Ok(())
    }

    pub(super) async fn lease_return(&mut self) -> Result<(), TestCaseError> {
        let last = self.books.len() - 1;
        self.books[last].shutdown(Duration::from_millis(50)).await;
        let book = LeaseBook::start(self.engine.clone(), self.tuning.clone());
        self.books.push(book);
        Ok(())
    }

    pub(super) async fn lease_expire(&mut self) -> Result<(), TestCaseError> {
        let lost = self.forgotten(false).await;
        self.m.bound = self.m.bound.saturating_add(lost);
        for l in self.q.open_leases(self.tenant(), i64::MAX).await.unwrap() {
            self.q.lease_expire(self.tenant(), &l).await.unwrap();
        }
        Ok(())
    }
}
