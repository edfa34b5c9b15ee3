//! Who may do what in the control plane (docs/design.md §1). Pure rules; the console
//! crate turns a signed session into a `Role` and asks these.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    PlatformAdmin,
    TenantAdmin,
    Finance,
    Auditor,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "platform_admin" => Some(Role::PlatformAdmin),
            "tenant_admin" => Some(Role::TenantAdmin),
            "finance" => Some(Role::Finance),
            "auditor" => Some(Role::Auditor),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::PlatformAdmin => "platform_admin",
            Role::TenantAdmin => "tenant_admin",
            Role::Finance => "finance",
            Role::Auditor => "auditor",
        }
    }
}

/// A person acting: their id, role and (for tenant admins) their tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub user_id: String,
    pub email: String,
    pub role: Role,
    pub tenant: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read a tenant's objects, usage and bill.
    Read,
    /// Manage a tenant's apps and keys, request quota for it.
    Manage,
}

impl Actor {
    /// May this actor see or manage tenant `t`? Tenant admins only their
    /// own; finance and auditors read everything; platform admins all.
    pub fn may(&self, access: Access, t: &str) -> bool {
        match (self.role, access) {
            (Role::PlatformAdmin, _) => true,
            (Role::TenantAdmin, _) => self.tenant.as_deref() == Some(t),
            (Role::Finance | Role::Auditor, Access::Read) => true,
            (Role::Finance | Role::Auditor, Access::Manage) => false,
        }
    }

    pub fn is_platform_admin(&self) -> bool {
        self.role == Role::PlatformAdmin
    }

    /// The audit trail names people by email.
    pub fn label(&self) -> String {
        format!("user:{}", self.email)
    }
}

/// Four eyes: a quota request is decided by a platform admin who did not
/// make it, and who neither created the requester's account nor was created
/// by the requester (a second account made for the purpose is not a second
/// pair of eyes).
pub fn may_decide(
    decider: &Actor,
    requested_by: &str,
    decider_created_by: Option<&str>,
    requester_created_by: Option<&str>,
) -> Result<(), &'static str> {
    if decider.role != Role::PlatformAdmin {
        return Err("only a platform admin decides quota requests");
    }
    if decider.user_id == requested_by {
        return Err("nobody approves or rejects their own request");
    }
    if decider_created_by == Some(requested_by)
        || requester_created_by == Some(decider.user_id.as_str())
    {
        return Err("the requester and the decider created one another's accounts");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(role: Role, tenant: Option<&str>) -> Actor {
        Actor {
            user_id: "u1".into(),
            email: "a@x.io".into(),
            role,
            tenant: tenant.map(String::from),
        }
    }

    #[test]
    fn tenant_admins_see_only_their_tenant() {
        let a = actor(Role::TenantAdmin, Some("sales"));
        assert!(a.may(Access::Manage, "sales"));
        assert!(!a.may(Access::Read, "research"));
        let f = actor(Role::Finance, None);
        assert!(f.may(Access::Read, "research") && !f.may(Access::Manage, "research"));
        assert!(actor(Role::PlatformAdmin, None).may(Access::Manage, "any"));
    }

    #[test]
    fn four_eyes() {
        let admin = actor(Role::PlatformAdmin, None);
        assert!(may_decide(&admin, "u1", None, None).is_err());
        assert!(may_decide(&admin, "u2", None, None).is_ok());
        assert!(may_decide(&actor(Role::TenantAdmin, Some("t")), "u2", None, None).is_err());
        // u2 made the decider's account, or the decider made u2's: refused.
        assert!(may_decide(&admin, "u2", Some("u2"), None).is_err());
        assert!(may_decide(&admin, "u2", None, Some("u1")).is_err());
        assert!(may_decide(&admin, "u2", Some("u9"), Some("u9")).is_ok());
    }
}
