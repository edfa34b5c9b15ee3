//! Redis must never evict: open hold records carry no TTL while month
//! hashes do, so under a `volatile-*` policy a month can go while its holds
//! are open (and the rebuild then zeroes `held`), and under `allkeys-*`
//! anything can. The policy is read from `INFO memory`, which managed
//! services answer even where they disable `CONFIG`; on a Cluster every
//! master answers for itself.

use crate::engine::{QuotaEngine, QuotaError};
use redis::Value;

/// The one policy under which the books stay exact.
pub const REQUIRED_POLICY: &str = "noeviction";

/// One node's `maxmemory_policy`, as `INFO memory` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePolicy {
    /// The node's address on a Cluster; empty for a single Redis.
    pub node: String,
    pub policy: String,
}

/// The `maxmemory_policy` line of an `INFO` answer (None: not reported).
fn policy_in(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("maxmemory_policy:"))
        .map(|p| p.trim().to_string())
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s.clone()),
        _ => None,
    }
}

/// Every node's policy from the answer to `INFO memory`: one string from a
/// single Redis, a map of address to string from a Cluster (every master).
fn policies_in(reply: &Value) -> Result<Vec<NodePolicy>, QuotaError> {
    let one = |node: String, v: &Value| -> Result<NodePolicy, QuotaError> {
        let info = text(v).ok_or_else(|| QuotaError::Protocol(format!("INFO memory: {v:?}")))?;
        Ok(NodePolicy {
            policy: policy_in(&info).unwrap_or_else(|| "unknown".into()),
            node,
        })
    };
    match reply {
        Value::Map(nodes) => nodes
            .iter()
            .map(|(addr, v)| one(text(addr).unwrap_or_default(), v))
            .collect(),
        v => Ok(vec![one(String::new(), v)?]),
    }
}

/// The error that names the setting and the fix, or None when every node
/// runs `noeviction`.
pub fn policy_problem(nodes: &[NodePolicy]) -> Option<String> {
    let wrong: Vec<String> = nodes
        .iter()
        .filter(|n| n.policy != REQUIRED_POLICY)
        .map(|n| {
            if n.node.is_empty() {
                n.policy.clone()
            } else {
                format!("{} on {}", n.policy, n.node)
            }
        })
        .collect();
    if wrong.is_empty() {
        return None;
    }
    Some(format!(
        "Redis maxmemory-policy is {} but tollgate needs {REQUIRED_POLICY}: under eviction Redis \
         may drop a month's counters while its holds are open, and the budget would be rebuilt \
         without them. Fix: set maxmemory-policy {REQUIRED_POLICY} (redis.conf, or \
         `CONFIG SET maxmemory-policy {REQUIRED_POLICY}`; on a managed service, its parameter \
         group or eviction setting){}",
        wrong.join(", "),
        if nodes.len() > 1 || nodes.iter().any(|n| !n.node.is_empty()) {
            " — on a Cluster, on every master"
        } else {
            ""
        }
    ))
}

impl QuotaEngine {
    /// Each node's eviction policy, from `INFO memory`.
    pub async fn eviction_policies(&self) -> Result<Vec<NodePolicy>, QuotaError> {
        let mut conn = self.link().await?;
        let reply: Value = self
            .bounded(redis::cmd("INFO").arg("memory").query_async(&mut conn))
            .await?;
        policies_in(&reply)
    }

    /// Fails with `Misconfigured` (naming `maxmemory-policy` and the fix)
    /// unless every node runs `noeviction`.
    pub async fn check_eviction_policy(&self) -> Result<(), QuotaError> {
        let nodes = self.eviction_policies().await?;
        match policy_problem(&nodes) {
            None => Ok(()),
            Some(msg) => Err(QuotaError::Misconfigured(msg)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str =
        "# Memory\r\nused_memory:1\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n";

    #[test]
    fn the_policy_is_read_from_info_memory() {
        assert_eq!(policy_in(INFO).as_deref(), Some("allkeys-lru"));
        assert_eq!(policy_in("# Memory\r\nused_memory:1\r\n"), None);
    }

    #[test]
    fn a_single_redis_and_every_master_of_a_cluster_are_checked() {
        let single = policies_in(&Value::BulkString(INFO.into())).unwrap();
        assert_eq!(single.len(), 1);
        let msg = policy_problem(&single).unwrap();
        assert!(msg.contains("maxmemory-policy is allkeys-lru"), "{msg}");
        assert!(msg.contains("noeviction"), "{msg}");
        assert!(!msg.contains("every master"), "{msg}");

        let ok = "maxmemory_policy:noeviction\r\n";
        let cluster = Value::Map(vec![
            (
                Value::BulkString("10.0.0.1:7000".into()),
                Value::BulkString(ok.into()),
            ),
            (
                Value::BulkString("10.0.0.2:7001".into()),
                Value::BulkString(INFO.into()),
            ),
        ]);
        let nodes = policies_in(&cluster).unwrap();
        let msg = policy_problem(&nodes).unwrap();
        assert!(msg.contains("allkeys-lru on 10.0.0.2:7001"), "{msg}");
        assert!(!msg.contains("10.0.0.1"), "{msg}");
        assert!(msg.contains("on every master"), "{msg}");

        let all_ok = Value::Map(vec![(
            Value::BulkString("10.0.0.1:7000".into()),
            Value::BulkString(ok.into()),
        )]);
        assert_eq!(policy_problem(&policies_in(&all_ok).unwrap()), None);
    }
}
