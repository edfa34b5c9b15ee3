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

/// Why a person may not decide a quota request (four eyes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecisionRefusal {
    /// Only platform admins decide.
    NotPlatformAdmin,
    /// Nobody decides their own request.
    OwnRequest,
    /// The decider and the requester are in one creation line.
    SameLine,
}

impl DecisionRefusal {
    /// The API's (English) text; the console translates by variant.
    pub fn message(self) -> &'static str {
        match self {
            DecisionRefusal::NotPlatformAdmin => "only a platform admin decides quota requests",
            DecisionRefusal::OwnRequest => "nobody approves or rejects their own request",
            DecisionRefusal::SameLine => {
                "the requester and the decider are in one line of account creation"
            }
        }
    }
}

/// A person's creation line: their creator, that one's creator, and so on
/// up to an account created by nobody (the operator's, from `tollgate admin
/// create-user`, or the seed). `chain` runs from the person upwards as
/// (account, created by), as `Store::creation_chain` reads it.
pub fn creation_line(chain: &[(String, Option<String>)]) -> Vec<String> {
    chain.iter().skip(1).map(|(id, _)| id.clone()).collect()
}

/// Four eyes: a quota request is decided by a platform admin who did not
/// make it and is not in one creation line with the requester, in either
/// direction and at any depth (A creates B creates C: C decides nothing of
/// A's, A nothing of C's) — a second account made for the purpose is not a
/// second pair of eyes. The first admin's requests are decided by another
/// platform admin outside its line: one the operator made
/// (`tollgate admin create-user`), or one created by such an admin.
pub fn may_decide(
    decider: &Actor,
    requested_by: &str,
    decider_line: &[String],
    requester_line: &[String],
) -> Result<(), DecisionRefusal> {
    if decider.role != Role::PlatformAdmin {
        return Err(DecisionRefusal::NotPlatformAdmin);
    }
    if decider.user_id == requested_by {
        return Err(DecisionRefusal::OwnRequest);
    }
    if decider_line.iter().any(|u| u == requested_by) || requester_line.contains(&decider.user_id) {
        return Err(DecisionRefusal::SameLine);
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
        let none: &[String] = &[];
        let line = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            may_decide(&admin, "u1", none, none),
            Err(DecisionRefusal::OwnRequest)
        );
        assert!(may_decide(&admin, "u2", none, none).is_ok());
        assert_eq!(
            may_decide(&actor(Role::TenantAdmin, Some("t")), "u2", none, none),
            Err(DecisionRefusal::NotPlatformAdmin)
        );
        // u2 made the decider's account, or the decider made u2's: refused.
        assert!(may_decide(&admin, "u2", &line(&["u2"]), none).is_err());
        assert!(may_decide(&admin, "u2", none, &line(&["u1"])).is_err());
        assert!(may_decide(&admin, "u2", &line(&["u9"]), &line(&["u9"])).is_ok());
        // Transitive: u2 made u3, u3 made the decider (u1).
        assert_eq!(
            may_decide(&admin, "u2", &line(&["u3", "u2"]), none),
            Err(DecisionRefusal::SameLine)
        );
        // …and the other way: the decider made u3, u3 made the requester.
        assert!(may_decide(&admin, "u2", none, &line(&["u3", "u1"])).is_err());
    }

    #[test]
    fn a_creation_line_runs_up_to_an_account_made_by_nobody() {
        let chain = |c: &[(&str, Option<&str>)]| {
            c.iter()
                .map(|(a, b)| (a.to_string(), b.map(String::from)))
                .collect::<Vec<_>>()
        };
        // root made a, a made b, b made c: c's line is b, a, root.
        let c = chain(&[
            ("c", Some("b")),
            ("b", Some("a")),
            ("a", Some("root")),
            ("root", None),
        ]);
        assert_eq!(creation_line(&c), vec!["b", "a", "root"]);
        assert!(creation_line(&chain(&[("root", None)])).is_empty());
        // So c decides nothing of root's; another root (ops) decides both.
        let admin = |id: &str| Actor {
            user_id: id.into(),
            email: format!("{id}@x.io"),
            role: Role::PlatformAdmin,
            tenant: None,
        };
        assert!(may_decide(&admin("c"), "root", &creation_line(&c), &[]).is_err());
        assert!(may_decide(&admin("ops"), "root", &[], &[]).is_ok());
        assert!(may_decide(&admin("ops"), "c", &[], &creation_line(&c)).is_ok());
    }
}
