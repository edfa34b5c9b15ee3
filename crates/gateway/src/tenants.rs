//! The catalog as settlement's view of the tenants (for borrowing and the
//! outbox sweeper).

use crate::catalog::TenantEntry;
use crate::state::CatalogCache;
use chrono::{DateTime, Utc};
use domain::fairq::Priority;
use domain::Limits;
use settlement::{Tenant, Tenants};
use std::collections::HashMap;
use std::sync::Arc;

impl Tenant for TenantEntry {
    fn id(&self) -> &str {
        &self.id
    }
    fn priority(&self) -> Priority {
        self.priority
    }
    fn may_borrow(&self) -> bool {
        self.may_borrow
    }
    fn borrow_cap_tokens(&self) -> i64 {
        self.borrow_cap_tokens
    }
    fn borrowed_in(&self, month: &str) -> (i64, i64) {
        TenantEntry::borrowed_in(self, month)
    }
    fn set_borrowed(&self, month: &str, tokens: i64, cost_micro: i64) {
        TenantEntry::set_borrowed(self, month, tokens, cost_micro)
    }
    fn effective(&self, now: DateTime<Utc>, month: &str) -> Limits {
        TenantEntry::effective(self, now, month)
    }
}

impl Tenants for CatalogCache {
    fn tenant_ids(&self) -> Vec<String> {
        self.get().tenant_ids.clone()
    }
    fn tenant(&self, id: &str) -> Option<Arc<dyn Tenant>> {
        let t: Arc<dyn Tenant> = self.get().tenants.get(id)?.clone();
        Some(t)
    }
    fn tenants(&self) -> HashMap<String, Arc<dyn Tenant>> {
        self.get()
            .tenants
            .iter()
            .map(|(id, t)| (id.clone(), t.clone() as Arc<dyn Tenant>))
            .collect()
    }
}
