//! The audit log's hash chain: `hash = sha256(prev_hash || canonical row)`.
//! Canonical form is JSON with sorted keys (serde_json's default map), so the
//! same row always hashes the same wherever it is recomputed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub at: String,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub before: Value,
    pub after: Value,
    pub reason: String,
}

impl AuditEntry {
    pub fn canonical(&self) -> String {
        // serde_json::Value maps are ordered by key: a stable canonical form.
        let v = serde_json::to_value(self).expect("plain data serialises");
        v.to_string()
    }

    pub fn chain_hash(&self, prev: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(prev);
        h.update(self.canonical().as_bytes());
        h.finalize().into()
    }
}

/// Checks a chain in order; returns the index of the first row whose hash or
/// link does not match.
pub fn first_broken(rows: &[(AuditEntry, Vec<u8>, Vec<u8>)]) -> Option<usize> {
    let mut prev: Vec<u8> = vec![0u8; 32];
    for (i, (entry, prev_hash, hash)) in rows.iter().enumerate() {
        if *prev_hash != prev || entry.chain_hash(&prev).as_slice() != hash.as_slice() {
            return Some(i);
        }
        prev = hash.clone();
    }
    None
}

/// One field an audited change touched: its path (`limits.monthly_tokens`)
/// and the value before and after, as text ("" where there was none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldChange {
    pub field: String,
    pub before: String,
    pub after: String,
}

/// The fields that differ between an entry's `before` and `after`, nested
/// objects flattened to dotted paths, in path order. A creation (no
/// `before`) lists every field it set; a deletion every field it removed.
pub fn field_changes(before: &Value, after: &Value) -> Vec<FieldChange> {
    let (mut b, mut a) = (Vec::new(), Vec::new());
    flatten("", before, &mut b);
    flatten("", after, &mut a);
    let b: std::collections::BTreeMap<String, String> = b.into_iter().collect();
    let a: std::collections::BTreeMap<String, String> = a.into_iter().collect();
    let mut fields: Vec<&String> = b.keys().chain(a.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter_map(|f| {
            let (was, now) = (b.get(f).cloned(), a.get(f).cloned());
            (was != now).then(|| FieldChange {
                field: f.clone(),
                before: was.unwrap_or_default(),
                after: now.unwrap_or_default(),
            })
        })
        .collect()
}

fn flatten(path: &str, v: &Value, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten(&p, v, out);
            }
        }
        // A JSON null is "no value": the field is absent.
        Value::Null => {}
        Value::String(s) => out.push((path_or_value(path), s.clone())),
        Value::Array(items) => {
            let texts: Vec<String> = items
                .iter()
                .map(|i| match i {
                    Value::String(s) => s.clone(),
                    i => i.to_string(),
                })
                .collect();
            out.push((path_or_value(path), texts.join(", ")));
        }
        v => out.push((path_or_value(path), v.to_string())),
    }
}

/// What one audited change did to a scope's limits: each limit it changed
/// (`monthly_tokens`, before → after) and the limits it left in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsChange {
    pub changes: Vec<FieldChange>,
    pub limits: crate::Limits,
}

/// The limits an entry set, when it set any: its `after` carries a `limits`
/// object that differs from the one in `before`. A creation
/// (`<kind>.create`) and a restore (`<kind>.limits_restore`) are versions
/// even when nothing differs: one is the first version, the other an action
/// someone took with a reason. `None` for entries that left the limits
/// alone (a rename) or whose limits do not read as limits.
pub fn limits_change(action: &str, before: &Value, after: &Value) -> Option<LimitsChange> {
    let now = after.get("limits").filter(|v| v.is_object())?;
    let was = before.get("limits").cloned().unwrap_or(Value::Null);
    let always =
        before.is_null() || action.ends_with(".create") || action.ends_with(".limits_restore");
    let changes = field_changes(&was, now);
    if changes.is_empty() && !always {
        return None;
    }
    let limits = serde_json::from_value(now.clone()).ok()?;
    Some(LimitsChange { changes, limits })
}

/// A bare value (not an object) is the field "value".
fn path_or_value(path: &str) -> String {
    if path.is_empty() {
        "value".into()
    } else {
        path.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry(action: &str) -> AuditEntry {
        AuditEntry {
            at: "2026-11-29T00:00:00Z".into(),
            actor: "admin@example.com".into(),
            action: action.into(),
            target: "tenant:sales".into(),
            before: json!(null),
            after: json!({"b":1,"a":2}),
            reason: String::new(),
        }
    }

    fn chain(entries: &[AuditEntry]) -> Vec<(AuditEntry, Vec<u8>, Vec<u8>)> {
        let mut prev = vec![0u8; 32];
        entries
            .iter()
            .map(|e| {
                let h = e.chain_hash(&prev).to_vec();
                let row = (e.clone(), prev.clone(), h.clone());
                prev = h;
                row
            })
            .collect()
    }

    #[test]
    fn an_intact_chain_verifies() {
        let rows = chain(&[entry("create"), entry("update"), entry("delete")]);
        assert_eq!(first_broken(&rows), None);
    }

    #[test]
    fn an_edited_row_is_named() {
        let mut rows = chain(&[entry("create"), entry("update"), entry("delete")]);
        rows[1].0.after = json!({"a":999});
        assert_eq!(first_broken(&rows), Some(1));
    }

    #[test]
    fn canonical_form_sorts_keys() {
        assert!(entry("x").canonical().contains(r#"{"a":2,"b":1}"#));
    }

    #[test]
    fn field_changes_name_each_changed_field_once() {
        use serde_json::json;
        let before = json!({"name": "Acme", "limits": {"rpm": 60, "monthly_tokens": 1000},
            "allowed_models": ["a", "b"], "may_borrow": false, "note": null});
        let after = json!({"name": "Acme", "limits": {"rpm": 120, "monthly_tokens": 1000},
            "allowed_models": ["a"], "may_borrow": true, "cost_center": "CC-9"});
        let ch = field_changes(&before, &after);
        let c = |f: &str, b: &str, a: &str| FieldChange {
            field: f.into(),
            before: b.into(),
            after: a.into(),
        };
        assert_eq!(
            ch,
            vec![
                c("allowed_models", "a, b", "a"),
                c("cost_center", "", "CC-9"),
                c("limits.rpm", "60", "120"),
                c("may_borrow", "false", "true"),
            ]
        );
        // A creation lists what it set; nothing to nothing is no change.
        assert_eq!(
            field_changes(&Value::Null, &json!({"state": "pending"})),
            vec![c("state", "", "pending")]
        );
        assert!(field_changes(&Value::Null, &Value::Null).is_empty());
        assert_eq!(
            field_changes(&json!("x"), &json!("y")),
            vec![c("value", "x", "y")]
        );
    }

    #[test]
    fn limits_changes_name_the_limits_and_what_they_became() {
        let c = |f: &str, b: &str, a: &str| FieldChange {
            field: f.into(),
            before: b.into(),
            after: a.into(),
        };
        // An update of the whole row that raised one limit.
        let before = json!({"name": "A", "limits": {"monthly_tokens": 1000, "rpm": 5}});
        let after = json!({"name": "A", "limits": {"monthly_tokens": 50000, "rpm": 5}});
        let ch = limits_change("tenant.update", &before, &after).unwrap();
        assert_eq!(ch.changes, vec![c("monthly_tokens", "1000", "50000")]);
        assert_eq!(ch.limits.monthly_tokens, Some(50_000));
        assert_eq!(ch.limits.rpm, Some(5));
        // A rename leaves the limits alone: no limits change.
        let renamed = json!({"name": "B", "limits": {"monthly_tokens": 1000, "rpm": 5}});
        assert_eq!(limits_change("tenant.update", &before, &renamed), None);
        // A creation sets them, even when they are all unlimited.
        let created = limits_change("app.create", &Value::Null, &json!({"limits": {}})).unwrap();
        assert!(created.changes.is_empty());
        assert_eq!(created.limits, crate::Limits::default());
        // A restore is a version even when it put back what was there.
        let same = json!({"limits": {"rpm": 5}});
        let restored = limits_change("key.limits_restore", &same, &same).unwrap();
        assert!(restored.changes.is_empty());
        assert_eq!(restored.limits.rpm, Some(5));
        // A limit removed reads as "" after; entries without limits are none.
        let lifted =
            limits_change("tenant.limits", &before, &json!({"limits": {"rpm": 5}})).unwrap();
        assert_eq!(lifted.changes, vec![c("monthly_tokens", "1000", "")]);
        assert_eq!(lifted.limits.monthly_tokens, None);
        assert_eq!(
            limits_change("x.create", &Value::Null, &json!({"state": "x"})),
            None
        );
        let bad = json!({"limits": {"rpm": "x"}});
        assert_eq!(limits_change("x.create", &Value::Null, &bad), None);
    }
}
