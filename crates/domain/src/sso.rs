//! Single sign-on: which role (and, for a tenant admin, which tenant) a
//! person signed in by the identity provider gets, from their groups or
//! from claims, by the operator's mapping. Pure; the console reads the
//! claims from the verified ID token and asks this.

use crate::roles::Role;

/// What a mapping entry grants: a role, and for a tenant admin either a
/// fixed tenant or the tenant named by the configured tenant claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleGrant {
    pub role: Role,
    /// `Some` only for `tenant_admin:<tenant>`.
    pub tenant: Option<String>,
}

impl RoleGrant {
    /// `platform_admin`, `finance`, `auditor`, `tenant_admin` or
    /// `tenant_admin:<tenant>`.
    pub fn parse(s: &str) -> Option<RoleGrant> {
        let (role, tenant) = match s.split_once(':') {
            Some((r, t)) => (r, Some(t.trim().to_string())),
            None => (s, None),
        };
        let role = Role::parse(role.trim())?;
        match (&role, &tenant) {
            (Role::TenantAdmin, Some(t)) if t.is_empty() => None,
            (Role::TenantAdmin, _) => Some(RoleGrant { role, tenant }),
            (_, Some(_)) => None,
            _ => Some(RoleGrant { role, tenant: None }),
        }
    }
}

/// The strongest grant first: someone in several mapped groups gets the
/// widest role (an operator who maps a person to platform admin means it).
fn rank(r: Role) -> u8 {
    match r {
        Role::PlatformAdmin => 0,
        Role::TenantAdmin => 1,
        Role::Finance => 2,
        Role::Auditor => 3,
    }
}

/// The role and tenant for a person with these `groups`, `role_claim` and
/// `tenant_claim` values under `mapping` (group → grant text). `None`: no
/// role (the person is refused). A tenant admin without a tenant is no role.
pub fn map_role(
    groups: &[String],
    role_claim: Option<&str>,
    tenant_claim: Option<&str>,
    mapping: &[(String, String)],
) -> Option<(Role, Option<String>)> {
    let by_group = mapping
        .iter()
        .filter(|(g, _)| groups.iter().any(|have| have == g))
        .filter_map(|(_, grant)| RoleGrant::parse(grant));
    let by_claim = role_claim.and_then(RoleGrant::parse);
    let with_tenant = |g: RoleGrant| match g.role {
        Role::TenantAdmin => g
            .tenant
            .or_else(|| tenant_claim.map(str::to_string))
            .filter(|t| !t.is_empty())
            .map(|t| (Role::TenantAdmin, Some(t))),
        r => Some((r, None)),
    };
    by_group
        .chain(by_claim)
        .filter_map(with_tenant)
        .min_by_key(|(r, _)| rank(*r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn g(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn grants_parse_strictly() {
        assert_eq!(
            RoleGrant::parse("tenant_admin:sales"),
            Some(RoleGrant {
                role: Role::TenantAdmin,
                tenant: Some("sales".into())
            })
        );
        assert!(RoleGrant::parse("tenant_admin:").is_none());
        assert!(RoleGrant::parse("finance:sales").is_none());
        assert!(RoleGrant::parse("root").is_none());
        assert_eq!(RoleGrant::parse("auditor").unwrap().role, Role::Auditor);
    }

    #[test]
    fn groups_map_to_the_widest_role_with_its_tenant() {
        let map = m(&[
            ("tg-admins", "platform_admin"),
            ("sales-leads", "tenant_admin:sales"),
            ("dept-admins", "tenant_admin"),
            ("money", "finance"),
        ]);
        assert_eq!(
            map_role(&g(&["staff", "sales-leads"]), None, None, &map),
            Some((Role::TenantAdmin, Some("sales".into())))
        );
        assert_eq!(
            map_role(&g(&["money", "tg-admins"]), None, None, &map),
            Some((Role::PlatformAdmin, None))
        );
        // The tenant from the claim when the group names none.
        assert_eq!(
            map_role(&g(&["dept-admins"]), None, Some("research"), &map),
            Some((Role::TenantAdmin, Some("research".into())))
        );
        // ... and no role without one.
        assert_eq!(map_role(&g(&["dept-admins"]), None, None, &map), None);
        assert_eq!(map_role(&g(&["staff"]), None, None, &map), None);
        // A role claim counts too.
        assert_eq!(
            map_role(&g(&[]), Some("auditor"), None, &map),
            Some((Role::Auditor, None))
        );
        assert_eq!(map_role(&g(&[]), Some("superuser"), None, &map), None);
    }
}
