//! Who may do what in the control plane (docs/design.md §1). Pure rules; the console
//! crate turns a signed session into a `Role` and asks these.

use chrono::{DateTime, Utc};
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
    /// Only finance approves or rejects a bill adjustment.
    NotFinance,
    /// Nobody decides their own request.
    OwnRequest,
    /// The decider and the requester are in one creation line.
    SameLine,
    /// One of the two set the other's password, role, tenant or enabled
    /// state within the four-eyes window (`auth.four_eyes_days`), directly
    /// or through accounts they held so.
    AccountSet,
}

impl DecisionRefusal {
    /// The API's (English) text; the console translates by variant.
    pub fn message(self) -> &'static str {
        match self {
            DecisionRefusal::NotPlatformAdmin => "only a platform admin decides quota requests",
            DecisionRefusal::NotFinance => "only a finance user decides bill adjustments",
            DecisionRefusal::OwnRequest => "nobody approves or rejects their own request",
            DecisionRefusal::SameLine => {
                "the requester and the decider are in one line of account creation"
            }
            DecisionRefusal::AccountSet => {
                "four eyes: one of the requester and the decider set the other's password, role, tenant or enabled state within the last auth.four_eyes_days days (default 30); another platform admin decides"
            }
        }
    }

    /// What the audit row of a refusal names.
    pub fn code(self) -> &'static str {
        match self {
            DecisionRefusal::NotPlatformAdmin => "not_platform_admin",
            DecisionRefusal::NotFinance => "not_finance",
            DecisionRefusal::OwnRequest => "own_request",
            DecisionRefusal::SameLine => "same_creation_line",
            DecisionRefusal::AccountSet => "account_set_by_the_other",
        }
    }
}

/// Who holds a hand over one account: who created it, and who last set
/// its password and its access (role, tenant, enabled state), and when —
/// as `Store::account_hands` reads it (ids as text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountHands {
    pub id: String,
    pub created_by: Option<String>,
    pub password_set: Option<(String, DateTime<Utc>)>,
    pub access_set: Option<(String, DateTime<Utc>)>,
}

/// The accounts holding a hand over a person, at any depth: `creators`
/// through account creation alone (however long ago), `recent` through
/// creation or a password, role, tenant or enabled state set within the
/// window (`now - window` or later). The person is in neither.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hands {
    pub creators: Vec<String>,
    pub recent: Vec<String>,
}

/// [`Hands`] over `user`, walking `accounts` (the person's and, upwards,
/// every account reachable from it; an account missing from the list ends
/// its branch). One's own password change is no one else's hand.
pub fn hands_over(
    user: &str,
    accounts: &[AccountHands],
    now: DateTime<Utc>,
    window: chrono::Duration,
) -> Hands {
    let since = now - window;
    let by_id: std::collections::HashMap<&str, &AccountHands> =
        accounts.iter().map(|a| (a.id.as_str(), a)).collect();
    let walk = |recent_too: bool| {
        let mut seen: Vec<String> = Vec::new();
        let mut todo = vec![user.to_string()];
        while let Some(at) = todo.pop() {
            let Some(a) = by_id.get(at.as_str()) else {
                continue;
            };
            let mut parents: Vec<&String> = a.created_by.iter().collect();
            if recent_too {
                for (by, when) in [&a.password_set, &a.access_set].into_iter().flatten() {
                    if *when >= since && by != &a.id {
                        parents.push(by);
                    }
                }
            }
            for p in parents {
                if p != user && !seen.contains(p) {
                    seen.push(p.clone());
                    todo.push(p.clone());
                }
            }
        }
        seen
    };
    Hands {
        creators: walk(false),
        recent: walk(true),
    }
}

/// Four eyes: a quota request is decided by a platform admin who did not
/// make it and over whom the requester holds no hand, nor they over the
/// requester — in either direction and at any depth:
///
/// - not in one creation line (A creates B creates C: C decides nothing of
///   A's, A nothing of C's) — a second account made for the purpose is not
///   a second pair of eyes. The first admin's requests are decided by
///   another platform admin outside its line: one the operator made
///   (`tollgate admin create-user`), or one created by such an admin;
/// - neither set the other's password, role, tenant or enabled state
///   within the window (`auth.four_eyes_days`): an admin who resets a
///   person's password and promotes them knows the password and made the
///   approver — that person is the admin's second account for as long as
///   the window runs (after it, changing their own password is theirs).
pub fn may_decide(
    decider: &Actor,
    requested_by: &str,
    decider_hands: &Hands,
    requester_hands: &Hands,
) -> Result<(), DecisionRefusal> {
    if decider.role != Role::PlatformAdmin {
        return Err(DecisionRefusal::NotPlatformAdmin);
    }
    second_pair_of_eyes(decider, requested_by, decider_hands, requester_hands)
}

/// Whether `decider` may approve or reject a bill adjustment proposed by
/// `proposed_by`: a finance user, under the same four-eyes rule as
/// [`may_decide`].
pub fn may_decide_adjustment(
    decider: &Actor,
    proposed_by: &str,
    decider_hands: &Hands,
    proposer_hands: &Hands,
) -> Result<(), DecisionRefusal> {
    if decider.role != Role::Finance {
        return Err(DecisionRefusal::NotFinance);
    }
    second_pair_of_eyes(decider, proposed_by, decider_hands, proposer_hands)
}

/// Four eyes: not the asker, not in one creation line, neither set the
/// other's account within the window.
fn second_pair_of_eyes(
    decider: &Actor,
    requested_by: &str,
    decider_hands: &Hands,
    requester_hands: &Hands,
) -> Result<(), DecisionRefusal> {
    if decider.user_id == requested_by {
        return Err(DecisionRefusal::OwnRequest);
    }
    let holds = |hands: &[String], who: &str| hands.iter().any(|u| u == who);
    if holds(&decider_hands.creators, requested_by)
        || holds(&requester_hands.creators, &decider.user_id)
    {
        return Err(DecisionRefusal::SameLine);
    }
    if holds(&decider_hands.recent, requested_by)
        || holds(&requester_hands.recent, &decider.user_id)
    {
        return Err(DecisionRefusal::AccountSet);
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

    fn account(id: &str, created_by: Option<&str>) -> AccountHands {
        AccountHands {
            id: id.into(),
            created_by: created_by.map(String::from),
            password_set: None,
            access_set: None,
        }
    }

    fn hands(user: &str, accounts: &[AccountHands]) -> Hands {
        hands_over(user, accounts, now(), chrono::Duration::days(30))
    }

    fn now() -> DateTime<Utc> {
        "2026-12-01T00:00:00Z".parse().unwrap()
    }

    fn admin(id: &str) -> Actor {
        Actor {
            user_id: id.into(),
            email: format!("{id}@x.io"),
            role: Role::PlatformAdmin,
            tenant: None,
        }
    }

    #[test]
    fn four_eyes() {
        let none = Hands::default();
        let a = admin("u1");
        assert_eq!(
            may_decide(&a, "u1", &none, &none),
            Err(DecisionRefusal::OwnRequest)
        );
        assert!(may_decide(&a, "u2", &none, &none).is_ok());
        assert_eq!(
            may_decide(&actor(Role::TenantAdmin, Some("t")), "u2", &none, &none),
            Err(DecisionRefusal::NotPlatformAdmin)
        );
        // u2 made the decider's account, or the decider made u2's: refused.
        let made_u1 = hands("u1", &[account("u1", Some("u2")), account("u2", None)]);
        assert_eq!(
            may_decide(&a, "u2", &made_u1, &none),
            Err(DecisionRefusal::SameLine)
        );
        let made_u2 = hands("u2", &[account("u2", Some("u1")), account("u1", None)]);
        assert!(may_decide(&a, "u2", &none, &made_u2).is_err());
        // Siblings (one creator) are two pairs of eyes.
        let sib = |u: &str| hands(u, &[account(u, Some("u9")), account("u9", None)]);
        assert!(may_decide(&a, "u2", &sib("u1"), &sib("u2")).is_ok());
        // Transitive: u2 made u3, u3 made the decider (u1)…
        let line = [
            account("u1", Some("u3")),
            account("u3", Some("u2")),
            account("u2", None),
        ];
        assert_eq!(
            may_decide(&a, "u2", &hands("u1", &line), &none),
            Err(DecisionRefusal::SameLine)
        );
        // …and the other way: the decider made u3, u3 made the requester.
        let line = [
            account("u2", Some("u3")),
            account("u3", Some("u1")),
            account("u1", None),
        ];
        assert!(may_decide(&a, "u2", &none, &hands("u2", &line)).is_err());
    }

    #[test]
    fn who_set_a_persons_password_or_role_is_not_their_second_pair_of_eyes() {
        let days = |d: i64| now() - chrono::Duration::days(d);
        // A reset U's password yesterday, and promoted U: U decides nothing
        // of A's, A nothing of U's.
        let u = AccountHands {
            password_set: Some(("a".into(), days(1))),
            access_set: Some(("a".into(), days(1))),
            ..account("u", None)
        };
        let accounts = [u.clone(), account("a", None)];
        let (hu, ha) = (hands("u", &accounts), hands("a", &accounts));
        assert_eq!(hu.recent, vec!["a"]);
        assert!(hu.creators.is_empty());
        assert_eq!(
            may_decide(&admin("u"), "a", &hu, &ha),
            Err(DecisionRefusal::AccountSet)
        );
        assert_eq!(
            may_decide(&admin("a"), "u", &ha, &hu),
            Err(DecisionRefusal::AccountSet)
        );
        // Only the role, or only the password, is enough.
        for u in [
            AccountHands {
                access_set: Some(("a".into(), days(29))),
                ..account("u", None)
            },
            AccountHands {
                password_set: Some(("a".into(), days(29))),
                ..account("u", None)
            },
        ] {
            let h = hands("u", &[u, account("a", None)]);
            assert!(may_decide(&admin("u"), "a", &h, &Hands::default()).is_err());
        }
        // After the window, and for one's own change, no hand.
        let old = AccountHands {
            password_set: Some(("a".into(), days(31))),
            access_set: Some(("a".into(), days(31))),
            ..account("u", None)
        };
        assert!(hands("u", &[old]).recent.is_empty());
        let own = AccountHands {
            password_set: Some(("u".into(), days(0))),
            ..account("u", None)
        };
        assert!(hands("u", &[own]).recent.is_empty());
        // At any depth: A set V's password, V promoted U.
        let chain = [
            AccountHands {
                access_set: Some(("v".into(), days(2))),
                ..account("u", None)
            },
            AccountHands {
                password_set: Some(("a".into(), days(3))),
                ..account("v", None)
            },
            account("a", None),
        ];
        assert_eq!(
            may_decide(&admin("u"), "a", &hands("u", &chain), &Hands::default()),
            Err(DecisionRefusal::AccountSet)
        );
        // Two people who set each other's passwords: no endless walk.
        let cycle = [
            AccountHands {
                password_set: Some(("b".into(), days(1))),
                ..account("a", None)
            },
            AccountHands {
                password_set: Some(("a".into(), days(1))),
                ..account("b", None)
            },
        ];
        assert_eq!(hands("a", &cycle).recent, vec!["b"]);
    }
}
