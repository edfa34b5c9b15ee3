//! Model aliases: the names clients ask for (Claude Code's `claude-opus-4-8`,
//! its background model's haiku name …) mapped to catalog models by a
//! platform admin, exactly (`gpt-4`) or by a pattern with `*` standing for
//! any text (`claude-opus-*`, `claude-*haiku*`), for every tenant or for one.
//!
//! Which alias serves a name (docs/clients.md, "Model aliases"): a catalog
//! model of that id first (an alias never hides a model); then the
//! tenant's aliases over the global ones; within each, an exact alias over
//! a pattern, and of the patterns the longest first (ties: in name order,
//! so the choice never depends on load order).

use serde::{Deserialize, Serialize};

/// Longest alias name or pattern, in bytes.
pub const MAX_ALIAS_LEN: usize = 128;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelAlias {
    /// The name or pattern clients ask for.
    pub alias: String,
    /// The catalog model that serves it.
    pub model: String,
    /// None: every tenant's.
    pub tenant_id: Option<String>,
}

impl ModelAlias {
    pub fn is_pattern(&self) -> bool {
        self.alias.contains('*')
    }
}

/// Why an alias cannot be stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AliasError {
    /// Empty, too long, or not printable ASCII without spaces.
    BadName,
    /// Only `*`: it would take every name.
    MatchesEverything,
}

impl AliasError {
    pub fn message(&self) -> String {
        match self {
            AliasError::BadName => format!(
                "an alias is 1-{MAX_ALIAS_LEN} printable ASCII characters without spaces; `*` stands for any text"
            ),
            AliasError::MatchesEverything => {
                "an alias must name something besides `*`".to_string()
            }
        }
    }
}

/// Checks an alias name or pattern before it is stored.
pub fn validate(alias: &str) -> Result<(), AliasError> {
    let ok = !alias.is_empty()
        && alias.len() <= MAX_ALIAS_LEN
        && alias.bytes().all(|b| b.is_ascii_graphic());
    if !ok {
        return Err(AliasError::BadName);
    }
    if alias.bytes().all(|b| b == b'*') {
        return Err(AliasError::MatchesEverything);
    }
    Ok(())
}

/// Whether `pattern` (`*` = any text, possibly none) matches all of `name`.
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for p in middle {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The aliases in the order they are tried for `tenant`: its own, then the
/// global ones; exact before patterns; longer patterns first.
fn rank(a: &ModelAlias) -> (bool, bool, std::cmp::Reverse<usize>, &str) {
    (
        a.tenant_id.is_none(),
        a.is_pattern(),
        std::cmp::Reverse(a.alias.len()),
        a.alias.as_str(),
    )
}

/// Sorts aliases into the order [`resolve`] tries them.
pub fn sort(aliases: &mut [ModelAlias]) {
    aliases.sort_by(|a, b| rank(a).cmp(&rank(b)));
}

/// The alias serving `asked` for `tenant`, from aliases sorted by [`sort`].
pub fn resolve<'a>(sorted: &'a [ModelAlias], tenant: &str, asked: &str) -> Option<&'a ModelAlias> {
    sorted.iter().find(|a| {
        a.tenant_id.as_deref().is_none_or(|t| t == tenant)
            && if a.is_pattern() {
                matches(&a.alias, asked)
            } else {
                a.alias == asked
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(alias: &str, model: &str, tenant: Option<&str>) -> ModelAlias {
        ModelAlias {
            alias: alias.into(),
            model: model.into(),
            tenant_id: tenant.map(String::from),
        }
    }

    #[test]
    fn patterns_match_any_text_where_the_star_is() {
        assert!(matches("claude-opus-*", "claude-opus-4-8"));
        assert!(matches("claude-*haiku*", "claude-3-5-haiku-latest"));
        assert!(matches("claude-*haiku*", "claude-haiku"));
        assert!(!matches("claude-*haiku*", "claude-sonnet-4"));
        assert!(matches("*-mini", "gpt-4o-mini"));
        assert!(!matches("a*a", "a"));
        assert!(matches("a*a", "aa"));
        assert!(!matches("gpt-4", "gpt-4o"));
        assert!(matches("gpt-4", "gpt-4"));
    }

    #[test]
    fn tenant_over_global_exact_over_pattern_longest_pattern_first() {
        let mut all = vec![
            a("claude-*", "any-claude", None),
            a("claude-opus-*", "opus", None),
            a("claude-opus-4-8", "exact-opus", None),
            a("claude-*", "t-claude", Some("t")),
        ];
        sort(&mut all);
        let served =
            |tenant: &str, asked: &str| resolve(&all, tenant, asked).map(|a| a.model.as_str());
        // The tenant's own pattern wins over any global alias.
        assert_eq!(served("t", "claude-opus-4-8"), Some("t-claude"));
        // Elsewhere the exact alias, then the longest pattern.
        assert_eq!(served("u", "claude-opus-4-8"), Some("exact-opus"));
        assert_eq!(served("u", "claude-opus-5"), Some("opus"));
        assert_eq!(served("u", "claude-haiku"), Some("any-claude"));
        assert_eq!(served("u", "gpt-4o"), None);
    }

    #[test]
    fn names_are_checked_before_they_are_stored() {
        assert!(validate("claude-opus-*").is_ok());
        assert_eq!(validate(""), Err(AliasError::BadName));
        assert_eq!(validate("a b"), Err(AliasError::BadName));
        assert_eq!(
            validate(&"x".repeat(MAX_ALIAS_LEN + 1)),
            Err(AliasError::BadName)
        );
        assert_eq!(validate("**"), Err(AliasError::MatchesEverything));
    }
}
