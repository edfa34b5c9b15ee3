//! The shared pool (docs/design.md §7): how much one borrow may take, what the
//! reclaim job takes back and from whom, and the model-pool guarantee rule.
//! Pure arithmetic on integers (tokens, micro-USD, parts per million).

use crate::fairq::Priority;

pub const PPM: i64 = 1_000_000;

/// The platform's monthly pool and its borrowing policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolPolicy {
    pub monthly_tokens: Option<i64>,
    pub monthly_cost_micro: Option<i64>,
    /// One borrow takes at most this share of the pool (ppm).
    pub max_borrow_share_ppm: i64,
    /// Reclaim runs while the pool's free share is below this (ppm).
    pub reclaim_below_share_ppm: i64,
}

impl Default for PoolPolicy {
    fn default() -> Self {
        Self {
            monthly_tokens: None,
            monthly_cost_micro: None,
            max_borrow_share_ppm: 50_000,
            reclaim_below_share_ppm: 200_000,
        }
    }
}

/// A share given as a JSON number in [0, 1] → parts per million.
pub fn share_ppm(share: f64) -> Option<i64> {
    (share.is_finite() && (0.0..=1.0).contains(&share)).then(|| (share * PPM as f64).round() as i64)
}

pub fn ppm_share(ppm: i64) -> f64 {
    ppm as f64 / PPM as f64
}

fn of(total: i64, ppm: i64) -> i64 {
    ((total as i128 * ppm as i128) / PPM as i128) as i64
}

impl PoolPolicy {
    /// Tokens one borrow may take (before the pool's free part and the
    /// tenant's cap clip it). Zero when the pool has no token budget:
    /// borrowing is in tokens.
    pub fn chunk_tokens(&self) -> i64 {
        self.monthly_tokens
            .map_or(0, |t| of(t, self.max_borrow_share_ppm).max(1).min(t))
    }

    /// The cost lent with `tokens`, at the pool's average price per token
    /// (rounded down), when the pool also has a cost budget.
    pub fn cost_for(&self, tokens: i64) -> i64 {
        match (self.monthly_tokens, self.monthly_cost_micro) {
            (Some(t), Some(c)) if t > 0 => ((tokens as i128 * c as i128) / t as i128) as i64,
            _ => 0,
        }
    }

    /// Tokens the reclaim job should take back so the free share returns to
    /// the threshold; 0 when the pool is healthy.
    pub fn reclaim_need(&self, lent_tokens: i64) -> i64 {
        let Some(total) = self.monthly_tokens.filter(|t| *t > 0) else {
            return 0;
        };
        let free = (total - lent_tokens).max(0);
        (of(total, self.reclaim_below_share_ppm) - free).max(0)
    }
}

/// One outstanding borrow the reclaim job may take from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimCandidate {
    pub borrow: String,
    pub tenant: String,
    pub priority: Priority,
    /// When the borrow was taken (ms): longest-held goes first.
    pub borrowed_at_ms: i64,
    pub outstanding_tokens: i64,
}

/// What one run takes back from one borrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReclaimStep {
    pub borrow: String,
    pub tenant: String,
    pub tokens: i64,
}

/// Plans one reclaim run: lowest priority first, then longest-held; from
/// each borrow at most `fraction_ppm` of its outstanding amount (rounded
/// up); never more of a tenant than its unused headroom (`headroom(tenant)`
/// = effective limit − used − held), so a tenant never ends below what it
/// has already used; stops once `need` is covered.
pub fn plan_reclaim(
    need: i64,
    candidates: &[ReclaimCandidate],
    fraction_ppm: i64,
    mut headroom: impl FnMut(&str) -> i64,
) -> Vec<ReclaimStep> {
    let mut order: Vec<&ReclaimCandidate> = candidates.iter().collect();
    order.sort_by_key(|c| (c.priority.rank(), c.borrowed_at_ms, c.borrow.clone()));
    let mut left_of: std::collections::HashMap<&str, i64> = Default::default();
    let mut need = need;
    let mut steps = Vec::new();
    for c in order {
        if need <= 0 {
            break;
        }
        let left = left_of
            .entry(c.tenant.as_str())
            .or_insert_with(|| headroom(&c.tenant).max(0));
        let part = ((c.outstanding_tokens as i128 * fraction_ppm as i128 + PPM as i128 - 1)
            / PPM as i128) as i64;
        let take = part.min(*left).min(need).min(c.outstanding_tokens);
        if take <= 0 {
            continue;
        }
        *left -= take;
        need -= take;
        steps.push(ReclaimStep {
            borrow: c.borrow.clone(),
            tenant: c.tenant.clone(),
            tokens: take,
        });
    }
    steps
}

/// A core tenant's guaranteed slots of a model pool and how many it uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guarantee {
    pub tenant: String,
    pub slots: i64,
    pub inflight: i64,
}

/// The model-pool rule: a request of `tenant` is admitted when, after it,
/// the unused guaranteed slots of every *other* guarantee holder are still
/// free: `inflight + 1 + Σ_{g ≠ tenant} max(0, slots_g − inflight_g) ≤ capacity`.
/// A holder may use its own unused guarantee and, beyond it, whatever is
/// free like anyone else.
pub fn pool_admits(capacity: i64, inflight: i64, tenant: &str, guarantees: &[Guarantee]) -> bool {
    let reserved: i64 = guarantees
        .iter()
        .filter(|g| g.tenant != tenant)
        .map(|g| (g.slots - g.inflight).max(0))
        .sum();
    inflight + 1 + reserved <= capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool() -> PoolPolicy {
        PoolPolicy {
            monthly_tokens: Some(100_000),
            monthly_cost_micro: Some(50_000_000),
            ..Default::default()
        }
    }

    #[test]
    fn a_borrow_is_a_share_of_the_pool_with_cost_at_the_pool_price() {
        let p = pool();
        assert_eq!(p.chunk_tokens(), 5_000);
        assert_eq!(p.cost_for(5_000), 2_500_000);
        assert_eq!(PoolPolicy::default().chunk_tokens(), 0);
        assert_eq!(share_ppm(0.05), Some(50_000));
        assert_eq!(share_ppm(1.5), None);
        assert_eq!(share_ppm(f64::NAN), None);
    }

    #[test]
    fn reclaim_need_restores_the_free_share() {
        let p = pool(); // reclaim below 20 % free
        assert_eq!(p.reclaim_need(70_000), 0);
        assert_eq!(p.reclaim_need(90_000), 10_000);
        assert_eq!(p.reclaim_need(120_000), 20_000);
    }

    fn cand(b: &str, t: &str, p: Priority, at: i64, out: i64) -> ReclaimCandidate {
        ReclaimCandidate {
            borrow: b.into(),
            tenant: t.into(),
            priority: p,
            borrowed_at_ms: at,
            outstanding_tokens: out,
        }
    }

    #[test]
    fn reclaim_takes_lowest_priority_and_longest_held_first_never_below_used() {
        let c = vec![
            cand("core-old", "core", Priority::Core, 1, 1000),
            cand("batch-new", "batch", Priority::Batch, 5, 1000),
            cand("batch-old", "batch", Priority::Batch, 2, 1000),
            cand("std", "std", Priority::Standard, 0, 1000),
        ];
        // Half of each borrow per run; batch has used all but 700 of its limit.
        let head = |t: &str| if t == "batch" { 700 } else { 10_000 };
        let steps = plan_reclaim(1_400, &c, 500_000, head);
        let got: Vec<(&str, i64)> = steps
            .iter()
            .map(|s| (s.borrow.as_str(), s.tokens))
            .collect();
        assert_eq!(
            got,
            vec![
                ("batch-old", 500),
                ("batch-new", 200),
                ("std", 500),
                ("core-old", 200)
            ]
        );
        assert!(plan_reclaim(0, &c, 500_000, head).is_empty());
    }

    #[test]
    fn guarantees_keep_their_unused_slots_free() {
        // Capacity 10; core tenant "search" is guaranteed 4 and uses 1.
        let g = vec![Guarantee {
            tenant: "search".into(),
            slots: 4,
            inflight: 1,
        }];
        // Others may fill up to 10 - 3 unused = 7 in flight.
        assert!(pool_admits(10, 6, "batchy", &g));
        assert!(!pool_admits(10, 7, "batchy", &g));
        // The holder may still take its guaranteed slots...
        assert!(pool_admits(10, 7, "search", &g));
        // ...and, beyond its share, what is free like anyone else.
        let g2 = vec![Guarantee {
            tenant: "search".into(),
            slots: 4,
            inflight: 5,
        }];
        assert!(pool_admits(10, 9, "search", &g2));
        assert!(pool_admits(10, 9, "batchy", &g2));
        assert!(!pool_admits(10, 10, "search", &g2));
    }
}
