//! [`TenantScope`]: which tenants' data a caller may read. Made only by
//! sign-in and the session checks (`auth`: a user's scope from their row)
//! or explicitly for the platform's own work ([`TenantScope::system`]); see
//! `auth`'s documentation for why nothing else can make one.

use domain::roles::Role;

/// Which tenants' data a caller may read: every tenant, or exactly one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantScope {
    /// `None`: every tenant.
    tenant: Option<String>,
}

impl TenantScope {
    /// Every tenant, for the platform's own work: the gateway's catalog,
    /// jobs, billing, the CLI and tests. Never for a person's request (the
    /// console's `clippy.toml` disallows it there).
    pub fn system() -> TenantScope {
        TenantScope { tenant: None }
    }

    /// A user's scope from their row: a tenant admin reads their tenant,
    /// platform admins, finance and auditors read every tenant. A tenant
    /// admin without a tenant (the schema forbids it) gets no scope.
    pub(crate) fn of_user(role: Role, tenant: Option<String>) -> Option<TenantScope> {
        match role {
            Role::TenantAdmin => tenant.map(|t| TenantScope { tenant: Some(t) }),
            Role::PlatformAdmin | Role::Finance | Role::Auditor => Some(TenantScope::system()),
        }
    }

    /// The one tenant this scope reads, or `None` for every tenant. This is
    /// what store queries bind: `($n::text IS NULL OR tenant_id = $n)`.
    pub fn tenant(&self) -> Option<&str> {
        self.tenant.as_deref()
    }

    /// Reads every tenant (and the platform's records that belong to no
    /// tenant: the audit log, job runs).
    pub fn is_all(&self) -> bool {
        self.tenant.is_none()
    }

    pub fn covers(&self, tenant: &str) -> bool {
        self.tenant.as_deref().is_none_or(|t| t == tenant)
    }

    /// This scope cut down to `tenant`, or `None` when `tenant` is outside
    /// it. Narrows, never widens.
    pub fn narrow_to(&self, tenant: &str) -> Option<TenantScope> {
        self.covers(tenant).then(|| TenantScope {
            tenant: Some(tenant.to_string()),
        })
    }
}
