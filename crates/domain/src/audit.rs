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
}
