//! Key layout. Every key of a tenant carries the hash tag `{t:<tenant>}` so a
//! script touches one slot (Redis Cluster); the period is part of the key so a
//! month starts from zero without a reset.

#[derive(Debug, Clone)]
pub struct KeySpace {
    prefix: String,
}

impl KeySpace {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    fn tag(&self, tenant: &str) -> String {
        format!("{}:{{t:{}}}", self.prefix, tenant)
    }

    /// Used/held tokens and cost of every scope of the tenant for a month.
    pub fn month(&self, tenant: &str, month: &str) -> String {
        format!("{}:m:{}", self.tag(tenant), month)
    }

    /// In-flight counts and token buckets (no period: they are windows).
    /// The counters of a tenant's budgets in one period (`d:2026-12-07`,
    /// `q:2026-10`: `domain::chain_budgets::Applied::period_id`).
    pub fn budget_period(&self, tenant: &str, period_id: &str) -> String {
        format!("{}:b:{}", self.tag(tenant), period_id)
    }

    pub fn rates(&self, tenant: &str) -> String {
        format!("{}:rt", self.tag(tenant))
    }

    pub fn hold(&self, tenant: &str, request_id: &str) -> String {
        format!("{}:h:{}", self.tag(tenant), request_id)
    }

    /// Open holds by the time they were taken (for the stale-hold reconciler).
    pub fn open_holds(&self, tenant: &str) -> String {
        format!("{}:open", self.tag(tenant))
    }

    /// Settled usage events waiting for the ledger writer.
    pub fn outbox(&self, tenant: &str) -> String {
        format!("{}:ob", self.tag(tenant))
    }

    /// A replica's lease on one scope chain (docs/design.md §4, "Leases").
    pub fn lease(&self, tenant: &str, lease_id: &str) -> String {
        format!("{}:l:{}", self.tag(tenant), lease_id)
    }

    /// Live leases by the time they were last touched (for the reconciler).
    pub fn leases(&self, tenant: &str) -> String {
        format!("{}:leases", self.tag(tenant))
    }

    /// A sign-in subject's run of failed logins (an email or a client IP;
    /// not tenant data: no tenant tag).
    pub fn login(&self, subject: &str) -> String {
        format!("{}:login:{}", self.prefix, subject)
    }

    /// A replica's heartbeat (not tenant data: no tenant tag).
    pub fn replica(&self, replica: &str) -> String {
        format!("{}:replica:{}", self.prefix, replica)
    }

    /// A tenant's settled cost of one day (`YYYY-MM-DD`, platform time).
    pub fn day(&self, tenant: &str, day: &str) -> String {
        format!("{}:d:{}", self.tag(tenant), day)
    }

    /// The platform pool's month: its own hash tag, never touched by the
    /// per-request scripts.
    pub fn pool(&self, month: &str) -> String {
        format!("{}:{{pool}}:m:{}", self.prefix, month)
    }

    /// A model pool's slots and per-tenant counts (the model's own tag).
    pub fn model_slots(&self, model: &str) -> String {
        format!("{}:{{m:{}}}:slots", self.prefix, model)
    }

    pub fn model_by_tenant(&self, model: &str) -> String {
        format!("{}:{{m:{}}}:by", self.prefix, model)
    }

    /// An end user's used/held tokens and cost in a month (`digest`:
    /// `domain::attribution::end_user_digest`); expires with the month.
    pub fn end_user_month(&self, tenant: &str, app: &str, digest: &str, month: &str) -> String {
        format!("{}:eu:{app}:{digest}:m:{month}", self.tag(tenant))
    }

    /// An end user's rpm bucket; expires two idle minutes after its last use.
    pub fn end_user_rates(&self, tenant: &str, app: &str, digest: &str) -> String {
        format!("{}:eu:{app}:{digest}:rt", self.tag(tenant))
    }

    /// The app's end users of the last minute (for its distinct cap).
    pub fn end_users_seen(&self, tenant: &str, app: &str) -> String {
        format!("{}:eus:{app}", self.tag(tenant))
    }

    pub fn rebuild_lock(&self, tenant: &str, month: &str) -> String {
        format!("{}:rblock:{}", self.tag(tenant), month)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_keys_of_a_tenant_share_one_hash_tag() {
        let k = KeySpace::new("tg");
        assert_eq!(k.month("sales", "2026-11"), "tg:{t:sales}:m:2026-11");
        for key in [
            k.rates("sales"),
            k.hold("sales", "r1"),
            k.outbox("sales"),
            k.open_holds("sales"),
            k.day("sales", "2026-11-29"),
            k.lease("sales", "l1"),
            k.leases("sales"),
            k.end_user_month("sales", "a", "00ff", "2026-11"),
            k.end_user_rates("sales", "a", "00ff"),
            k.end_users_seen("sales", "a"),
        ] {
            assert!(key.starts_with("tg:{t:sales}:"), "{key}");
        }
        assert_eq!(k.pool("2026-11"), "tg:{pool}:m:2026-11");
        assert!(k.model_slots("gpt-4o").starts_with("tg:{m:gpt-4o}:"));
        assert!(k.model_by_tenant("gpt-4o").starts_with("tg:{m:gpt-4o}:"));
    }
}
