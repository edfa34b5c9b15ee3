//! Who waits and who goes next when a tenant's in-flight limit or a model
//! pool is full (docs/design.md §7 "Queues"). Pure scheduling: the gateway keeps one
//! `FairScheduler` per replica and asks it, whenever a slot may have freed,
//! in which order its waiting requests should try again.
//!
//! The order is start-time fair queueing (SFQ) between tenants, weighted by
//! priority: each waiting request gets a virtual start tag
//! `max(V, previous finish of its tenant)` and its tenant's finish tag moves
//! on by `SCALE / weight`, so a backlogged core tenant (weight 4) is offered
//! four turns for every turn of a backlogged batch tenant (weight 1), and a
//! tenant flooding its queue only pushes its *own* tags into the future.
//!
//! Ageing: a request that has waited half of its priority's maximum wait is
//! *urgent*; urgent requests go before every other one, oldest first. An
//! urgent batch request therefore goes before every request that arrived
//! after it, whatever its priority; what can still be ahead of it are
//! requests older than it, and those are bounded (interactive ones time out
//! after their short wait, its own tenant's queue is capped). So batch work
//! is never starved: it is offered a turn within its maximum wait as long
//! as the replica frees slots at all (see the property test below).

use std::collections::HashMap;

/// A tenant's priority class (tenants.priority).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Priority {
    Core,
    Standard,
    Batch,
}

impl Priority {
    pub const ALL: [Priority; 3] = [Priority::Core, Priority::Standard, Priority::Batch];

    /// Unknown strings are `standard` (the schema only admits the three).
    pub fn parse(s: &str) -> Priority {
        match s {
            "core" => Priority::Core,
            "batch" => Priority::Batch,
            _ => Priority::Standard,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Core => "core",
            Priority::Standard => "standard",
            Priority::Batch => "batch",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Reclaim order: lower ranks give quota back first.
    pub fn rank(self) -> u8 {
        match self {
            Priority::Batch => 0,
            Priority::Standard => 1,
            Priority::Core => 2,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePolicy {
    /// Weights of core, standard and batch.
    pub weights: [u64; 3],
    /// Maximum wait of core, standard and batch, in ms.
    pub max_wait_ms: [u64; 3],
    /// Waiting requests per tenant (per replica); beyond it: refused.
    pub max_per_tenant: usize,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        Self {
            weights: [4, 2, 1],
            max_wait_ms: [2_000, 2_000, 60_000],
            max_per_tenant: 64,
        }
    }
}

impl QueuePolicy {
    pub fn max_wait_ms(&self, p: Priority) -> u64 {
        self.max_wait_ms[p.index()]
    }

    fn weight(&self, p: Priority) -> u64 {
        self.weights[p.index()].max(1)
    }
}

/// Virtual cost of one request at weight 1.
const SCALE: u64 = 1_000_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFull {
    pub depth: usize,
}

#[derive(Debug, Clone)]
struct Waiting {
    ticket: u64,
    tenant: String,
    priority: Priority,
    start: u64,
    arrived_ms: u64,
    deadline_ms: u64,
}

impl Waiting {
    fn urgent(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.arrived_ms) * 2 >= self.deadline_ms - self.arrived_ms
    }
}

#[derive(Debug, Clone, Default)]
pub struct FairScheduler {
    policy: QueuePolicy,
    vtime: u64,
    finish: HashMap<String, u64>,
    waiting: Vec<Waiting>,
    next_ticket: u64,
}

impl FairScheduler {
    pub fn new(policy: QueuePolicy) -> Self {
        Self {
            policy,
            ..Default::default()
        }
    }

    pub fn policy(&self) -> &QueuePolicy {
        &self.policy
    }

    /// A tenant's cap on waiting requests: its own when set, else the
    /// policy's.
    pub fn cap(&self, tenant_cap: Option<usize>) -> usize {
        tenant_cap.unwrap_or(self.policy.max_per_tenant)
    }

    /// Queues a request; its ticket, or `QueueFull` when its tenant already
    /// has `max_per_tenant` requests waiting here.
    pub fn enqueue(
        &mut self,
        tenant: &str,
        priority: Priority,
        now_ms: u64,
    ) -> Result<u64, QueueFull> {
        self.enqueue_capped(tenant, priority, now_ms, None)
    }

    /// As `enqueue`, with the tenant's own cap on its waiting requests
    /// (`tenants.max_queued_requests`) instead of the policy's when given.
    pub fn enqueue_capped(
        &mut self,
        tenant: &str,
        priority: Priority,
        now_ms: u64,
        cap: Option<usize>,
    ) -> Result<u64, QueueFull> {
        let depth = self.depth(tenant);
        if depth >= self.cap(cap) {
            return Err(QueueFull { depth });
        }
        let start = self
            .vtime
            .max(self.finish.get(tenant).copied().unwrap_or(0));
        let cost = SCALE / self.policy.weight(priority);
        self.finish.insert(tenant.to_string(), start + cost);
        self.next_ticket += 1;
        let ticket = self.next_ticket;
        self.waiting.push(Waiting {
            ticket,
            tenant: tenant.to_string(),
            priority,
            start,
            arrived_ms: now_ms,
            deadline_ms: now_ms + self.policy.max_wait_ms(priority),
        });
        Ok(ticket)
    }

    /// Waiting tickets in the order they should be offered a slot.
    pub fn order(&self, now_ms: u64) -> Vec<u64> {
        let mut w: Vec<&Waiting> = self.waiting.iter().collect();
        w.sort_by_key(|x| {
            let urgent = x.urgent(now_ms);
            // Urgent first (oldest first), then the rest by start tag.
            let key = if urgent { x.arrived_ms } else { x.start };
            (!urgent, key, x.ticket)
        });
        w.into_iter().map(|x| x.ticket).collect()
    }

    /// The ticket got its slot: it leaves the queue and virtual time moves on.
    pub fn served(&mut self, ticket: u64) -> bool {
        match self.take(ticket) {
            Some(w) => {
                self.vtime = self.vtime.max(w.start);
                true
            }
            None => false,
        }
    }

    /// The ticket left without a slot (timed out, client gone). A tenant
    /// whose queue empties this way keeps no debt for turns it never used.
    pub fn cancel(&mut self, ticket: u64) -> bool {
        match self.take(ticket) {
            Some(w) => {
                if self.depth(&w.tenant) == 0 {
                    self.finish.remove(&w.tenant);
                }
                true
            }
            None => false,
        }
    }

    fn take(&mut self, ticket: u64) -> Option<Waiting> {
        let i = self.waiting.iter().position(|w| w.ticket == ticket)?;
        Some(self.waiting.swap_remove(i))
    }

    /// Tickets whose maximum wait has passed.
    pub fn expired(&self, now_ms: u64) -> Vec<u64> {
        self.waiting
            .iter()
            .filter(|w| w.deadline_ms <= now_ms)
            .map(|w| w.ticket)
            .collect()
    }

    pub fn deadline_ms(&self, ticket: u64) -> Option<u64> {
        self.waiting
            .iter()
            .find(|w| w.ticket == ticket)
            .map(|w| w.deadline_ms)
    }

    pub fn depth(&self, tenant: &str) -> usize {
        self.waiting.iter().filter(|w| w.tenant == tenant).count()
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn tenant_of(&self, ticket: u64) -> Option<(&str, Priority)> {
        self.waiting
            .iter()
            .find(|w| w.ticket == ticket)
            .map(|w| (w.tenant.as_str(), w.priority))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn serve_first(s: &mut FairScheduler, now: u64) -> Option<String> {
        let t = *s.order(now).first()?;
        let tenant = s.tenant_of(t).unwrap().0.to_string();
        s.served(t);
        Some(tenant)
    }

    #[test]
    fn backlogged_tenants_share_by_weight() {
        let mut s = FairScheduler::new(QueuePolicy {
            max_per_tenant: 1000,
            max_wait_ms: [1_000_000; 3],
            ..Default::default()
        });
        for _ in 0..100 {
            s.enqueue("core", Priority::Core, 0).unwrap();
            s.enqueue("batch", Priority::Batch, 0).unwrap();
        }
        let first: Vec<String> = (0..50).map(|_| serve_first(&mut s, 1).unwrap()).collect();
        let core = first.iter().filter(|t| *t == "core").count();
        assert_eq!(core, 40, "4:1 weights give core 40 of 50 turns");
    }

    #[test]
    fn a_flooding_tenant_does_not_push_back_another() {
        let mut s = FairScheduler::new(QueuePolicy {
            max_per_tenant: 1000,
            ..Default::default()
        });
        for _ in 0..500 {
            s.enqueue("flood", Priority::Standard, 0).unwrap();
        }
        serve_first(&mut s, 1);
        s.enqueue("steady", Priority::Standard, 1).unwrap();
        assert_eq!(serve_first(&mut s, 2).as_deref(), Some("steady"));
    }

    #[test]
    fn queue_length_is_capped_per_tenant() {
        let mut s = FairScheduler::new(QueuePolicy {
            max_per_tenant: 2,
            ..Default::default()
        });
        s.enqueue("a", Priority::Batch, 0).unwrap();
        s.enqueue("a", Priority::Batch, 0).unwrap();
        assert_eq!(
            s.enqueue("a", Priority::Batch, 0),
            Err(QueueFull { depth: 2 })
        );
        assert!(s.enqueue("b", Priority::Batch, 0).is_ok());
    }

    #[test]
    fn a_tenants_own_cap_replaces_the_policys() {
        let mut s = FairScheduler::new(QueuePolicy {
            max_per_tenant: 2,
            ..Default::default()
        });
        // Lower than the policy's: refused at its own cap.
        s.enqueue_capped("a", Priority::Standard, 0, Some(1))
            .unwrap();
        assert_eq!(
            s.enqueue_capped("a", Priority::Standard, 0, Some(1)),
            Err(QueueFull { depth: 1 })
        );
        // Higher than the policy's: may wait past it.
        for _ in 0..3 {
            s.enqueue_capped("b", Priority::Standard, 0, Some(3))
                .unwrap();
        }
        assert!(s
            .enqueue_capped("b", Priority::Standard, 0, Some(3))
            .is_err());
        // Unset: the policy's.
        s.enqueue_capped("c", Priority::Standard, 0, None).unwrap();
        s.enqueue_capped("c", Priority::Standard, 0, None).unwrap();
        assert!(s.enqueue_capped("c", Priority::Standard, 0, None).is_err());
    }

    #[test]
    fn waiting_past_half_the_max_wait_goes_first() {
        let mut s = FairScheduler::new(QueuePolicy::default());
        let first = s.enqueue("batch", Priority::Batch, 0).unwrap();
        let old = s.enqueue("batch", Priority::Batch, 0).unwrap();
        s.served(first);
        for _ in 0..3 {
            s.enqueue("core", Priority::Core, 29_500).unwrap();
        }
        // At 29.9 s the batch request is not urgent yet: its tag is behind
        // the core tenant's, so core goes first.
        assert_eq!(s.order(29_900)[3], old);
        // From 30 s (half its 60 s) it goes before everything newer.
        assert_eq!(s.order(30_000)[0], old);
        assert!(!s.expired(59_999).contains(&old));
        assert!(s.expired(60_000).contains(&old));
    }

    #[test]
    fn cancelling_forgets_unused_turns() {
        let mut s = FairScheduler::new(QueuePolicy::default());
        let a = s.enqueue("a", Priority::Standard, 0).unwrap();
        s.enqueue("b", Priority::Standard, 0).unwrap();
        assert!(s.cancel(a));
        assert!(!s.cancel(a));
        let a2 = s.enqueue("a", Priority::Standard, 1).unwrap();
        // "a" starts again at virtual time 0, level with "b".
        assert_eq!(s.order(2)[1], a2);
        assert_eq!(s.len(), 2);
    }

    proptest! {
        /// Under any interactive flood (up to 3 arrivals per 10 ms step, one
        /// slot freed per step, per-tenant queues capped), no batch request
        /// ever waits past its maximum wait: it is always served in time.
        #[test]
        fn batch_is_never_starved(
            arrivals in proptest::collection::vec(
                proptest::collection::vec((0usize..4, 0u8..3), 0..4), 200..400),
        ) {
            let policy = QueuePolicy {
                weights: [4, 2, 1],
                max_wait_ms: [200, 200, 1_000],
                max_per_tenant: 8,
            };
            let mut s = FairScheduler::new(policy);
            let mut batch: HashMap<u64, u64> = HashMap::new();
            let steps = arrivals.len() as u64 + 200;
            for step in 0..steps {
                let now = step * 10;
                if let Some(a) = arrivals.get(step as usize) {
                    for (tenant, kind) in a {
                        // Tenant 3 is the batch tenant; the others flood interactive work.
                        let (name, p) = if *tenant == 3 {
                            ("batch".to_string(), Priority::Batch)
                        } else {
                            (format!("i{tenant}"), if *kind == 0 { Priority::Core } else { Priority::Standard })
                        };
                        if let Ok(t) = s.enqueue(&name, p, now) {
                            if p == Priority::Batch { batch.insert(t, now); }
                        }
                    }
                }
                for t in s.expired(now) {
                    prop_assert!(!batch.contains_key(&t), "batch request {} timed out", t);
                    s.cancel(t);
                }
                if let Some(t) = s.order(now).first().copied() {
                    s.served(t);
                    if let Some(at) = batch.remove(&t) {
                        prop_assert!(now - at < 1_000);
                    }
                }
            }
            prop_assert!(batch.is_empty());
        }
    }
}
