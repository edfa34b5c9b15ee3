//! A tenant's settled cost of one day as a replica sees it, for the daily
//! soft limit (docs/design.md §3: crossing it degrades, it never refuses).
//!
//! The counter lives in Redis. A replica keeps a [`DayView`] of it: the
//! total Redis answered at its last sync, plus every cost this replica
//! settled since — so its own spend counts at once, and another replica's
//! once the view syncs. A sync is one Redis call that adds what this replica
//! has not sent yet and answers the new total; the view is fresh for a
//! while after it ([`DayView::current`]). Syncs of one view never overlap
//! ([`DayView::begin_sync`]), so the total a sync answers includes exactly
//! the amounts sent up to it, and the costs settled during it wait for the
//! next one: nothing is counted twice or lost.

/// One tenant-day as this replica sees it: Redis's total at the last
/// sync, what a sync under way is adding, and what waits to be sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DayView {
    /// Redis's total at the last sync (None: never synced).
    synced: Option<i64>,
    /// When that was (ms, the caller's clock).
    synced_at_ms: u64,
    /// The amount a sync under way adds (None: no sync under way).
    in_flight: Option<i64>,
    /// Settled here and not yet sent to Redis.
    unsent: i64,
}

impl DayView {
    /// A cost settled on this replica: seen at once, sent with the next sync.
    pub fn add(&mut self, cost: i64) {
        self.unsent = self.unsent.saturating_add(cost);
    }

    /// The day's cost, if the view synced within `fresh_ms` of `now_ms`.
    pub fn current(&self, now_ms: u64, fresh_ms: u64) -> Option<i64> {
        let fresh = now_ms.saturating_sub(self.synced_at_ms) < fresh_ms;
        self.last_known().filter(|_| fresh)
    }

    /// The day's cost however old the view (None: never synced).
    pub fn last_known(&self) -> Option<i64> {
        let local = self.unsent.saturating_add(self.in_flight.unwrap_or(0));
        self.synced.map(|t| t.saturating_add(local))
    }

    /// Costs settled here wait to be sent.
    pub fn has_unsent(&self) -> bool {
        self.unsent != 0
    }

    /// Starts a sync: the amount to add in Redis (possibly 0: a read), or
    /// None while another sync of this view is under way.
    pub fn begin_sync(&mut self) -> Option<i64> {
        if self.in_flight.is_some() {
            return None;
        }
        let amount = std::mem::take(&mut self.unsent);
        self.in_flight = Some(amount);
        Some(amount)
    }

    /// Redis answered the day's `total`, the sync's amount included.
    pub fn synced(&mut self, total: i64, now_ms: u64) {
        self.synced = Some(total);
        self.synced_at_ms = now_ms;
        self.in_flight = None;
    }

    /// The sync failed: its amount waits for the next one.
    pub fn sync_failed(&mut self) {
        let amount = self.in_flight.take().unwrap_or(0);
        self.unsent = self.unsent.saturating_add(amount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis's counter as a plain sum of what was sent, and one view.
    #[test]
    fn own_costs_count_at_once_and_reach_redis_once() {
        let mut redis = 1_000; // another replica's spend
        let mut v = DayView::default();
        assert_eq!(v.current(0, 100), None, "never synced");
        let amount = v.begin_sync().unwrap();
        assert_eq!(amount, 0);
        redis += amount;
        v.synced(redis, 10);
        assert_eq!(v.current(20, 100), Some(1_000));

        v.add(30);
        v.add(12);
        assert_eq!(v.current(20, 100), Some(1_042), "own spend at once");

        // A sync starts; more is settled while it is under way.
        let amount = v.begin_sync().unwrap();
        assert_eq!(v.begin_sync(), None, "syncs never overlap");
        v.add(5);
        redis += amount + 200; // and another replica spent 200
        v.synced(redis, 50);
        assert_eq!(redis, 1_242);
        assert_eq!(v.current(60, 100), Some(1_247));
        assert!(v.has_unsent());

        // Stale after `fresh`, but still known.
        assert_eq!(v.current(150, 100), None);
        assert_eq!(v.last_known(), Some(1_247));

        // A failed sync keeps its amount for the next.
        let amount = v.begin_sync().unwrap();
        assert_eq!(amount, 5);
        v.add(1);
        assert_eq!(v.last_known(), Some(1_248), "in flight still counts");
        v.sync_failed();
        assert_eq!(v.last_known(), Some(1_248));
        let amount = v.begin_sync().unwrap();
        assert_eq!(amount, 6, "the failed 5 and the new 1");
        redis += amount;
        v.synced(redis, 200);
        assert_eq!(v.current(210, 100), Some(1_248));
        assert_eq!(redis, 1_248, "every cost reached Redis exactly once");
        assert!(!v.has_unsent());
    }
}
