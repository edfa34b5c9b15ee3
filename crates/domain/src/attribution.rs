//! Cost attribution below the app: a request's tags (`project=apollo`) and
//! its end user (the customer's own identifier, never trusted for auth).
//! One rule for reading, validating and merging them; the gateway calls
//! [`resolve`], the admin API calls [`Policy::validate`].
//!
//! Sources, lowest precedence first: the app's default tags, the key's
//! default tags, the body's `metadata` object (every string entry but
//! `user_id`), the `x-tollgate-tags` header. A key set twice within one
//! source is refused; across sources the later one wins. The merged set
//! holds at most [`MAX_TAGS`] tags and must name every required key of the
//! app and of the key.

use crate::reason::ReasonCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Most tags a request carries (its own and the defaults, merged).
pub const MAX_TAGS: usize = 10;
/// Longest tag key, in bytes.
pub const MAX_KEY_LEN: usize = 32;
/// Longest tag value, in bytes.
pub const MAX_VALUE_LEN: usize = 64;
/// Longest end-user identifier, in bytes.
pub const MAX_END_USER_LEN: usize = 128;

/// Tags by key, in key order (so equal sets compare and store equal).
pub type Tags = BTreeMap<String, String>;

/// Tags as a flat JSON object, keys in order: `{"env":"prod"}`.
pub fn tags_json(tags: &Tags) -> String {
    serde_json::to_string(tags).expect("a map of strings serialises")
}

/// Tags back from the JSON `tags_json` wrote (an archive's column); a
/// value that is not a flat object of strings reads as no tags.
pub fn tags_from_json(s: &str) -> Tags {
    serde_json::from_str(s).unwrap_or_default()
}

/// What a request is attributed to, beside its tenant, app and key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attribution {
    #[serde(default, skip_serializing_if = "Tags::is_empty")]
    pub tags: Tags,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user: Option<String>,
    /// The agent session the request belongs to, where the client names
    /// one (Claude Code's `metadata.user_id`, Codex's `session_id`
    /// header): a request attribute for the request log, never the end
    /// user (docs/clients.md, "Sessions").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// The model name the client asked for, when another model served it
    /// (an alias, a fallback, a degrade; the ledger's `model` is the
    /// served one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_model: Option<String>,
}

/// The longest session id or asked model name kept (longer ones are cut at
/// a character boundary).
pub const MAX_ATTRIBUTE_LEN: usize = 128;

/// `v` as a request attribute: without control characters, at most
/// [`MAX_ATTRIBUTE_LEN`] bytes (cut at a character boundary); None when
/// empty.
pub fn attribute(v: &str) -> Option<String> {
    let v = v.trim();
    if v.is_empty() || v.chars().any(char::is_control) {
        return None;
    }
    let mut end = v.len().min(MAX_ATTRIBUTE_LEN);
    while !v.is_char_boundary(end) {
        end -= 1;
    }
    Some(v[..end].to_string())
}

/// The agent session a request's body names: Claude Code's, in
/// `metadata.user_id` ([`body_end_user`]).
pub fn body_session(body: &Value) -> Option<String> {
    let raw = body
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)?;
    body_end_user(raw).session.and_then(|s| attribute(&s))
}

/// An app's (or key's) attribution policy, stored as JSON beside it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub default_tags: Tags,
    #[serde(default)]
    pub required_tags: Vec<String>,
    /// Limits every end user of the app has on its own (a fourth scope of
    /// the hold, under the app).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_user_limits: Option<EndUserLimits>,
}

/// Distinct end users an app with end-user limits admits per minute when
/// it names no cap of its own.
pub const DEFAULT_END_USERS_PER_MINUTE: i64 = 10_000;

/// What each end user of an app may use (absent = unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndUserLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly_cost_usd: Option<crate::MicroUsd>,
    /// The most distinct end users the app admits in any minute: end users
    /// are unbounded, their counters in Redis are not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_users_per_minute: Option<i64>,
}

impl EndUserLimits {
    pub fn end_users_per_minute(&self) -> i64 {
        self.end_users_per_minute
            .unwrap_or(DEFAULT_END_USERS_PER_MINUTE)
    }

    /// The hold scripts' arguments: monthly tokens, monthly cost, rpm, the
    /// per-minute cap (-1 = none).
    pub fn hold_args(&self) -> [i64; 4] {
        let u = |v: Option<i64>| v.unwrap_or(-1);
        [
            u(self.monthly_tokens),
            u(self.monthly_cost_usd.map(|m| m.0)),
            u(self.rpm),
            self.end_users_per_minute(),
        ]
    }
}

/// The end user's name in Redis keys: the first 16 bytes of its SHA-256,
/// hex (a fixed length, whatever the client sent; collisions are
/// negligible at 128 bits).
pub fn end_user_digest(end_user: &str) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write;
    let d = Sha256::digest(end_user.as_bytes());
    let mut hex = String::with_capacity(32);
    for b in &d[..16] {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

impl Policy {
    pub fn is_empty(&self) -> bool {
        self.default_tags.is_empty()
            && self.required_tags.is_empty()
            && self.end_user_limits.is_none()
    }

    /// Every default tag and required key obeys the request rules; end-user
    /// limits are not negative and the cap is at least 1.
    pub fn validate(&self) -> Result<(), TagError> {
        if let Some(e) = &self.end_user_limits {
            let negative = [e.rpm, e.monthly_tokens, e.monthly_cost_usd.map(|m| m.0)]
                .iter()
                .any(|v| v.is_some_and(|v| v < 0));
            if negative || e.end_users_per_minute.is_some_and(|c| c < 1) {
                return Err(TagError::BadEndUserLimits);
            }
        }
        if self.default_tags.len() > MAX_TAGS {
            return Err(TagError::TooMany {
                count: self.default_tags.len(),
            });
        }
        for (k, v) in &self.default_tags {
            check_tag(k, v)?;
        }
        if self.required_tags.len() > MAX_TAGS {
            return Err(TagError::TooMany {
                count: self.required_tags.len(),
            });
        }
        for k in &self.required_tags {
            if !valid_key(k) {
                return Err(TagError::BadKey { key: k.clone() });
            }
        }
        Ok(())
    }
}

/// Why a request's tags or end user were refused (400, naming the tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagError {
    TooMany {
        count: usize,
    },
    /// Not `key=value`.
    Malformed {
        tag: String,
    },
    BadKey {
        key: String,
    },
    BadValue {
        key: String,
    },
    Duplicate {
        key: String,
    },
    MissingRequired {
        key: String,
    },
    /// `metadata` present but not an object of strings.
    BadMetadata {
        key: String,
    },
    BadEndUser,
    /// An app's end-user limits are negative (or the cap below 1).
    BadEndUserLimits,
}

impl TagError {
    pub fn reason(&self) -> ReasonCode {
        match self {
            TagError::MissingRequired { .. } => ReasonCode::MissingRequiredTag,
            TagError::BadEndUser | TagError::BadEndUserLimits => ReasonCode::InvalidEndUser,
            _ => ReasonCode::InvalidTag,
        }
    }

    /// The request field the client should look at.
    pub fn param(&self) -> &'static str {
        match self {
            TagError::BadMetadata { .. } => "metadata",
            TagError::BadEndUser => "x-tollgate-end-user",
            _ => "x-tollgate-tags",
        }
    }

    pub fn message(&self) -> String {
        match self {
            TagError::TooMany { count } => {
                format!("{count} tags (defaults included); at most {MAX_TAGS} are allowed")
            }
            TagError::Malformed { tag } => {
                format!("tag {:?} is not key=value", shorten(tag))
            }
            TagError::BadKey { key } => format!(
                "tag key {:?} is invalid: 1-{MAX_KEY_LEN} characters of a-z, 0-9, '_', '-', '.', starting with a letter",
                shorten(key)
            ),
            TagError::BadValue { key } => format!(
                "the value of tag {:?} is invalid: 1-{MAX_VALUE_LEN} characters of A-Z, a-z, 0-9, '_', '-', '.', ':', '/', '@', '+'",
                shorten(key)
            ),
            TagError::Duplicate { key } => format!("tag {:?} is given twice", shorten(key)),
            TagError::MissingRequired { key } => {
                format!("required tag {:?} is missing (send x-tollgate-tags: {key}=...)", key)
            }
            TagError::BadMetadata { key } => format!(
                "metadata entry {:?} must be a string",
                shorten(key)
            ),
            TagError::BadEndUser => format!(
                "the end user must be 1-{MAX_END_USER_LEN} bytes without control characters"
            ),
            TagError::BadEndUserLimits => {
                "end-user limits must not be negative, and end_users_per_minute at least 1".into()
            }
        }
    }
}

impl std::fmt::Display for TagError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

/// A client's text echoed in an error, cut to a readable length.
fn shorten(s: &str) -> String {
    s.chars().take(MAX_VALUE_LEN + 8).collect()
}

/// A tag key as the gateway accepts it (a lowercase letter, then a-z, 0-9,
/// `_`, `-`, `.`; at most `MAX_KEY_LEN` bytes).
pub fn valid_key(k: &str) -> bool {
    let b = k.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_KEY_LEN
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.".contains(c))
}

/// A tag filter as a person types it: `key=value`, the syntax of the
/// `x-tollgate-tags` header (`project=apollo`); `key:value` is read too,
/// for links and scripts written before the two were one. A key holds
/// neither `=` nor `:`, so the first of them ends it (a value may hold
/// `:`, as in `url=http://x`). `None`: no separator, or an empty side.
pub fn parse_tag_filter(s: &str) -> Option<(String, String)> {
    let at = s.find(['=', ':'])?;
    let (k, v) = (s[..at].trim(), s[at + 1..].trim());
    (!k.is_empty() && !v.is_empty()).then(|| (k.to_string(), v.to_string()))
}

fn valid_value(v: &str) -> bool {
    let b = v.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_VALUE_LEN
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_-.:/@+".contains(c))
}

fn check_tag(k: &str, v: &str) -> Result<(), TagError> {
    if !valid_key(k) {
        return Err(TagError::BadKey { key: k.to_string() });
    }
    if !valid_value(v) {
        return Err(TagError::BadValue { key: k.to_string() });
    }
    Ok(())
}

/// Most entries a header may list before it is refused unread (a header of
/// thousands of commas costs nothing to refuse).
const MAX_HEADER_ENTRIES: usize = 4 * MAX_TAGS;

/// `project=apollo, env=prod` → tags; empty entries are skipped.
pub fn parse_header(h: &str) -> Result<Tags, TagError> {
    let mut tags = Tags::new();
    for (i, part) in h.split(',').enumerate() {
        if i >= MAX_HEADER_ENTRIES {
            return Err(TagError::TooMany { count: i + 1 });
        }
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (k, v) = part.split_once('=').ok_or_else(|| TagError::Malformed {
            tag: part.to_string(),
        })?;
        let (k, v) = (k.trim(), v.trim());
        check_tag(k, v)?;
        if tags.insert(k.to_string(), v.to_string()).is_some() {
            return Err(TagError::Duplicate { key: k.to_string() });
        }
        if tags.len() > MAX_TAGS {
            return Err(TagError::TooMany { count: tags.len() });
        }
    }
    Ok(tags)
}

/// The tags of a body's `metadata` object: every entry but `user_id` (the
/// end user in Anthropic's dialect). Absent or null: none.
pub fn metadata_tags(body: &Value) -> Result<Tags, TagError> {
    let mut tags = Tags::new();
    let Some(m) = body.get("metadata").filter(|m| !m.is_null()) else {
        return Ok(tags);
    };
    let obj = m.as_object().ok_or_else(|| TagError::BadMetadata {
        key: "metadata".into(),
    })?;
    for (k, v) in obj {
        if k == "user_id" {
            continue;
        }
        let v = v
            .as_str()
            .ok_or_else(|| TagError::BadMetadata { key: k.clone() })?;
        check_tag(k, v)?;
        tags.insert(k.clone(), v.to_string());
        if tags.len() > MAX_TAGS {
            return Err(TagError::TooMany { count: tags.len() });
        }
    }
    Ok(tags)
}

/// The end user: the `x-tollgate-end-user` header, else OpenAI's `user`,
/// else Anthropic's `metadata.user_id`; an empty one is none.
///
/// The header is sent for tollgate and is strict: 1-128 bytes without
/// control characters, else refused. The body fields are the client's own
/// (Claude Code always sends `metadata.user_id`), so they never refuse a
/// request: [`body_end_user`] reduces them to a stable end user or drops
/// them.
pub fn end_user(header: Option<&str>, body: &Value) -> Result<Option<String>, TagError> {
    if let Some(h) = header {
        return match h {
            "" => Ok(None),
            u if !valid_end_user(u) => Err(TagError::BadEndUser),
            u => Ok(Some(u.to_string())),
        };
    }
    let given = body
        .get("user")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .or_else(|| {
            body.get("metadata")
                .and_then(|m| m.get("user_id"))
                .and_then(Value::as_str)
        });
    Ok(given.and_then(|u| body_end_user(u).end_user))
}

fn valid_end_user(u: &str) -> bool {
    !u.is_empty() && u.len() <= MAX_END_USER_LEN && !u.chars().any(char::is_control)
}

/// An end user read from a body field, and the agent session it named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyUser {
    pub end_user: Option<String>,
    /// Claude Code's session id: an attribute of the request, never the
    /// end user (each session would be a new end user).
    pub session: Option<String>,
}

/// A body's end-user field, reduced to a stable end user (docs/clients.md):
///
/// - Claude Code's JSON string `{"device_id","account_uuid","session_id"}`:
///   `account:<account_uuid>`, else `device:<device_id>`; the session id is
///   kept apart. Its older form `user_<device>_account_<uuid>_session_<uuid>`
///   reads the same way.
/// - Any other JSON object or array: none (no id of a known agent in it).
/// - A plain value of 1-128 bytes without control characters: as is.
/// - A longer one: `sha256:` and the first 16 bytes of its SHA-256, hex —
///   the same value is the same end user.
/// - Control characters: none.
pub fn body_end_user(raw: &str) -> BodyUser {
    let raw = raw.trim();
    if raw.starts_with('{') || raw.starts_with('[') {
        if let Ok(v) = serde_json::from_str::<Value>(raw) {
            let id = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .filter(|s| valid_end_user(s) && s.len() <= MAX_END_USER_LEN - 8)
                    .map(str::to_string)
            };
            let end_user = id("account_uuid")
                .map(|a| format!("account:{a}"))
                .or_else(|| id("device_id").map(|d| format!("device:{d}")));
            return BodyUser {
                end_user,
                session: id("session_id"),
            };
        }
    }
    if let Some(u) = claude_code_legacy(raw) {
        return u;
    }
    let end_user = if raw.is_empty() || raw.chars().any(char::is_control) {
        None
    } else if raw.len() > MAX_END_USER_LEN {
        Some(format!("sha256:{}", end_user_digest(raw)))
    } else {
        Some(raw.to_string())
    };
    BodyUser {
        end_user,
        session: None,
    }
}

/// Claude Code's older `user_<device>_account_<uuid>_session_<uuid>` (the
/// account may be empty).
fn claude_code_legacy(raw: &str) -> Option<BodyUser> {
    let rest = raw.strip_prefix("user_")?;
    let (device, rest) = rest.split_once("_account_")?;
    let (account, session) = rest.split_once("_session_")?;
    let ok = |s: &str| {
        !s.is_empty()
            && s.len() <= MAX_END_USER_LEN - 8
            && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let end_user = if ok(account) {
        format!("account:{account}")
    } else if ok(device) {
        format!("device:{device}")
    } else {
        return None;
    };
    Some(BodyUser {
        end_user: Some(end_user),
        session: ok(session).then(|| session.to_string()),
    })
}

/// A request's attribution: its header and body read, merged over the
/// app's and key's defaults, checked against their required keys.
pub fn resolve(
    app: &Policy,
    key: &Policy,
    tags_header: Option<&str>,
    end_user_header: Option<&str>,
    body: &Value,
) -> Result<Attribution, TagError> {
    let header = match tags_header {
        Some(h) => parse_header(h)?,
        None => Tags::new(),
    };
    let from_body = metadata_tags(body)?;
    let end_user = end_user(end_user_header, body)?;
    let mut tags = app.default_tags.clone();
    tags.extend(key.default_tags.iter().map(|(k, v)| (k.clone(), v.clone())));
    tags.extend(from_body);
    tags.extend(header);
    if tags.len() > MAX_TAGS {
        return Err(TagError::TooMany { count: tags.len() });
    }
    if let Some(k) = app
        .required_tags
        .iter()
        .chain(&key.required_tags)
        .find(|k| !tags.contains_key(*k))
    {
        return Err(TagError::MissingRequired { key: k.clone() });
    }
    Ok(Attribution {
        tags,
        end_user,
        session: body_session(body),
        asked_model: None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_tag_filter_reads_the_header_syntax_and_the_old_one() {
        let kv = |k: &str, v: &str| Some((k.to_string(), v.to_string()));
        assert_eq!(parse_tag_filter("project=apollo"), kv("project", "apollo"));
        assert_eq!(parse_tag_filter("project:apollo"), kv("project", "apollo"));
        assert_eq!(parse_tag_filter(" env = prod "), kv("env", "prod"));
        // The first separator ends the key; the value keeps the rest.
        assert_eq!(parse_tag_filter("url=http://x"), kv("url", "http://x"));
        assert_eq!(parse_tag_filter("url:http://x"), kv("url", "http://x"));
        for bad in ["", "project", "=apollo", "project=", ":", "project: "] {
            assert_eq!(parse_tag_filter(bad), None, "{bad:?}");
        }
    }

    use super::*;
    use serde_json::json;

    fn tags(pairs: &[(&str, &str)]) -> Tags {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_header_reads_as_sorted_tags() {
        assert_eq!(
            parse_header("project=apollo, env=prod,,").unwrap(),
            tags(&[("env", "prod"), ("project", "apollo")])
        );
        assert_eq!(parse_header("").unwrap(), Tags::new());
    }

    #[test]
    fn bad_tags_are_refused_by_name() {
        assert_eq!(
            parse_header("project").unwrap_err(),
            TagError::Malformed {
                tag: "project".into()
            }
        );
        assert_eq!(
            parse_header("Project=x").unwrap_err(),
            TagError::BadKey {
                key: "Project".into()
            }
        );
        assert_eq!(
            parse_header("env=pro d").unwrap_err(),
            TagError::BadValue { key: "env".into() }
        );
        assert_eq!(
            parse_header("env=").unwrap_err(),
            TagError::BadValue { key: "env".into() }
        );
        assert_eq!(
            parse_header("env=a,env=b").unwrap_err(),
            TagError::Duplicate { key: "env".into() }
        );
        let long_key = "k".repeat(MAX_KEY_LEN + 1);
        assert!(matches!(
            parse_header(&format!("{long_key}=v")),
            Err(TagError::BadKey { .. })
        ));
        let long_value = "v".repeat(MAX_VALUE_LEN + 1);
        assert!(parse_header(&format!("k={long_value}")).is_err());
        assert!(parse_header(&format!("k={}", "v".repeat(MAX_VALUE_LEN))).is_ok());
        assert!(TagError::BadKey {
            key: "Project".into()
        }
        .message()
        .contains("\"Project\""));
    }

    #[test]
    fn ten_tags_pass_and_eleven_do_not() {
        let ten: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
        assert_eq!(parse_header(&ten.join(",")).unwrap().len(), 10);
        let eleven: Vec<String> = (0..11).map(|i| format!("k{i}=v")).collect();
        assert_eq!(
            parse_header(&eleven.join(",")).unwrap_err(),
            TagError::TooMany { count: 11 }
        );
        // Defaults count: 6 defaults + 5 of the request's own is 11.
        let app = Policy {
            default_tags: (0..6).map(|i| (format!("d{i}"), "v".into())).collect(),
            required_tags: vec![],
            end_user_limits: None,
        };
        let own: Vec<String> = (0..5).map(|i| format!("k{i}=v")).collect();
        let err = resolve(
            &app,
            &Policy::default(),
            Some(&own.join(",")),
            None,
            &json!({}),
        );
        assert_eq!(err.unwrap_err(), TagError::TooMany { count: 11 });
        assert_eq!(
            TagError::TooMany { count: 11 }.reason().as_str(),
            "invalid_tag"
        );
    }

    #[test]
    fn sources_merge_header_over_body_over_key_over_app() {
        let app = Policy {
            default_tags: tags(&[("env", "dev"), ("team", "search"), ("cc", "a")]),
            required_tags: vec!["project".into()],
            end_user_limits: None,
        };
        let key = Policy {
            default_tags: tags(&[("cc", "b")]),
            required_tags: vec![],
            end_user_limits: None,
        };
        let body = json!({"metadata": {"env": "staging", "user_id": "u-9", "project": "gemini"}});
        let a = resolve(&app, &key, Some("project=apollo"), None, &body).unwrap();
        assert_eq!(
            a.tags,
            tags(&[
                ("cc", "b"),
                ("env", "staging"),
                ("project", "apollo"),
                ("team", "search")
            ])
        );
        assert_eq!(a.end_user.as_deref(), Some("u-9"));
    }

    #[test]
    fn a_missing_required_tag_is_named() {
        let key = Policy {
            default_tags: Tags::new(),
            required_tags: vec!["env".into(), "project".into()],
            end_user_limits: None,
        };
        let err =
            resolve(&Policy::default(), &key, Some("env=prod"), None, &json!({})).unwrap_err();
        assert_eq!(
            err,
            TagError::MissingRequired {
                key: "project".into()
            }
        );
        assert_eq!(err.reason().as_str(), "missing_required_tag");
        assert!(err.message().contains("\"project\""));
        // A default satisfies a requirement.
        let app = Policy {
            default_tags: tags(&[("project", "house")]),
            required_tags: vec![],
            end_user_limits: None,
        };
        assert!(resolve(&app, &key, Some("env=prod"), None, &json!({})).is_ok());
    }

    #[test]
    fn metadata_must_be_an_object_of_strings() {
        assert_eq!(
            metadata_tags(&json!({"metadata": {"n": 3}})).unwrap_err(),
            TagError::BadMetadata { key: "n".into() }
        );
        assert!(metadata_tags(&json!({"metadata": "x"})).is_err());
        assert_eq!(
            metadata_tags(&json!({"metadata": null})).unwrap(),
            Tags::new()
        );
    }

    #[test]
    fn the_end_user_comes_from_the_header_then_user_then_metadata() {
        let body = json!({"user": "openai-user", "metadata": {"user_id": "anthropic-user"}});
        assert_eq!(end_user(Some("h"), &body).unwrap().as_deref(), Some("h"));
        assert_eq!(
            end_user(None, &body).unwrap().as_deref(),
            Some("openai-user")
        );
        let body = json!({"metadata": {"user_id": "anthropic-user"}});
        assert_eq!(
            end_user(None, &body).unwrap().as_deref(),
            Some("anthropic-user")
        );
        assert_eq!(end_user(None, &json!({"user": ""})).unwrap(), None);
        // Stored as given: any printable text, bounded.
        let odd = "用户 #7 <x@y>";
        assert_eq!(
            end_user(Some(odd), &json!({})).unwrap().as_deref(),
            Some(odd)
        );
        let long = "u".repeat(MAX_END_USER_LEN + 1);
        assert_eq!(end_user(Some(&long), &json!({})), Err(TagError::BadEndUser));
        assert_eq!(
            end_user(Some("a\nb"), &json!({})),
            Err(TagError::BadEndUser)
        );
    }

    /// Claude Code 2.x's `metadata.user_id` (~150 bytes of JSON).
    fn claude_code(session: &str) -> String {
        json!({
            "device_id": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
            "account_uuid": "5e1c3f0a-7b1d-4c2e-9a8f-0d3b6e2f4a11",
            "session_id": session,
        })
        .to_string()
    }

    #[test]
    fn body_fields_never_refuse_and_reduce_to_a_stable_end_user() {
        let s1 = "c0a8012e-0000-4000-8000-000000000001";
        let s2 = "c0a8012e-0000-4000-8000-000000000002";
        let raw = claude_code(s1);
        assert!(raw.len() > MAX_END_USER_LEN, "{}", raw.len());
        let a = body_end_user(&raw);
        assert_eq!(
            a.end_user.as_deref(),
            Some("account:5e1c3f0a-7b1d-4c2e-9a8f-0d3b6e2f4a11")
        );
        assert_eq!(a.session.as_deref(), Some(s1));
        // Another session of the same account: the same end user.
        assert_eq!(body_end_user(&claude_code(s2)).end_user, a.end_user);
        let body = json!({"metadata": {"user_id": raw}});
        assert_eq!(end_user(None, &body).unwrap(), a.end_user);
        // Signed out: the device.
        let d = json!({"device_id": "dev1", "account_uuid": "", "session_id": s1}).to_string();
        assert_eq!(body_end_user(&d).end_user.as_deref(), Some("device:dev1"));
        // The older form.
        let old = format!("user_abc123_account_5e1c3f0a-7b1d_session_{s1}");
        let o = body_end_user(&old);
        assert_eq!(o.end_user.as_deref(), Some("account:5e1c3f0a-7b1d"));
        assert_eq!(o.session.as_deref(), Some(s1));
        let no_account = format!("user_abc123_account__session_{s1}");
        assert_eq!(
            body_end_user(&no_account).end_user.as_deref(),
            Some("device:abc123")
        );
        // Other structures name nobody; control characters nobody.
        assert_eq!(body_end_user("{\"team\": \"x\"}").end_user, None);
        assert_eq!(body_end_user("[1, 2]").end_user, None);
        assert_eq!(body_end_user("a\nb").end_user, None);
        assert_eq!(end_user(None, &json!({"user": "a\nb"})).unwrap(), None);
        // Over-long plain text: a fixed-length digest, the same each time.
        let long = "u".repeat(300);
        let h = body_end_user(&long).end_user.unwrap();
        assert_eq!(h, format!("sha256:{}", end_user_digest(&long)));
        assert_eq!(end_user(None, &json!({"user": long})).unwrap(), Some(h));
        // The header stays strict, and wins.
        assert_eq!(
            end_user(Some(&"h".repeat(200)), &body),
            Err(TagError::BadEndUser)
        );
        assert_eq!(end_user(Some("h"), &body).unwrap().as_deref(), Some("h"));
    }

    #[test]
    fn end_user_digests_are_fixed_length_and_distinct() {
        let a = end_user_digest("customer-1");
        assert_eq!(a.len(), 32);
        assert_ne!(a, end_user_digest("customer-2"));
        assert_eq!(end_user_digest(&"x".repeat(128)).len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_policy_obeys_the_request_rules() {
        let ok = Policy {
            default_tags: tags(&[("env", "prod")]),
            required_tags: vec!["project".into()],
            end_user_limits: None,
        };
        assert!(ok.validate().is_ok());
        let bad = Policy {
            default_tags: Tags::new(),
            required_tags: vec!["Project".into()],
            end_user_limits: None,
        };
        assert!(bad.validate().is_err());
        let e = Policy {
            end_user_limits: Some(EndUserLimits {
                rpm: Some(-1),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(e.validate(), Err(TagError::BadEndUserLimits));
        let p: Policy = serde_json::from_value(
            json!({"end_user_limits": {"rpm": 5, "monthly_cost_usd": "1.5"}}),
        )
        .unwrap();
        let e = p.end_user_limits.unwrap();
        assert_eq!(
            e.hold_args(),
            [-1, 1_500_000, 5, DEFAULT_END_USERS_PER_MINUTE]
        );
        let p: Policy = serde_json::from_value(json!({"required_tags": ["env"]})).unwrap();
        assert_eq!(p.required_tags, vec!["env".to_string()]);
        assert!(serde_json::from_value::<Policy>(json!({"other": 1})).is_err());
    }

    #[test]
    fn sessions_and_asked_names_are_bounded_attributes() {
        let body = json!({"metadata": {"user_id":
            r#"{"device_id":"d1","account_uuid":"","session_id":"s-42"}"#}});
        assert_eq!(body_session(&body).as_deref(), Some("s-42"));
        assert_eq!(body_session(&json!({"user": "x"})), None);
        assert_eq!(attribute(&"é".repeat(100)).unwrap().len(), 128);
        assert_eq!(attribute("a\nb"), None);
        assert_eq!(attribute("  "), None);
        let a = resolve(&Policy::default(), &Policy::default(), None, None, &body).unwrap();
        assert_eq!(a.session.as_deref(), Some("s-42"));
        assert_eq!(a.end_user.as_deref(), Some("device:d1"));
    }
}
