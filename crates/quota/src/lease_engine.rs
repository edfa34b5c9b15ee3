//! The Redis side of leases (docs/design.md §4, "Leases — the fast path"): take or
//! add to a lease, settle a batch of its requests (and optionally return
//! it), expire a dead replica's lease, list leases for the reconciler.
//! One Lua call each; every key carries the tenant's hash tag.

use crate::engine::{check_amounts, int_at, str_at, LedgerSource, QuotaEngine, QuotaError};

const CHUNK_FIELDS: [&str; 6] = ["tokens", "cost", "slots", "requests", "input", "output"];
use domain::lease::{Chunk, BUDGET_SHARE_DIVISOR, RATE_SHARE_DIVISOR};
use domain::limits::{LimitKind, ScopeKind};
use domain::Limits;

/// Taking (or adding to) a lease on one scope chain.
#[derive(Debug, Clone)]
pub struct LeaseAcquire<'a> {
    pub lease_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    pub month: &'a str,
    /// What the replica would like to hold.
    pub want: Chunk,
    /// Less than this in any dimension is no use (the request that asks
    /// would still not fit): then the per-request path.
    pub min: Chunk,
    pub limits: [&'a Limits; 3],
    /// Nothing was ever granted on this lease here: Redis may make its
    /// record. A top-up (false) of a lease Redis does not know is refused
    /// (`Closed { state: "none" }`), never re-created.
    pub fresh: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseGrant {
    Granted {
        chunk: Chunk,
        /// Left in the tightest RPM bucket / token budget after the grant
        /// (None: unlimited).
        remaining_requests: Option<i64>,
        remaining_tokens: Option<i64>,
    },
    /// The lease was closed (returned, or expired by the reconciler), or
    /// Redis does not know it (`state` "none": lost with Redis). The
    /// replica drops what it holds of it.
    Closed { state: String },
    /// A scope is too near this limit to lease from: per-request path.
    NearLimit { scope: ScopeKind, limit: LimitKind },
}

/// One request settled against its lease.
#[derive(Debug, Clone)]
pub struct LeaseItem {
    pub request_id: String,
    pub tokens: i64,
    pub cost: i64,
    /// The usage event, parked verbatim in the outbox.
    pub event_json: String,
}

/// A batch of settles against one lease, and optionally its return.
#[derive(Debug, Clone)]
pub struct LeaseBatch<'a> {
    pub lease_id: &'a str,
    pub tenant: &'a str,
    pub app: &'a str,
    pub key: &'a str,
    pub month: &'a str,
    /// Strictly increasing per lease; a batch is applied at most once.
    pub seq: u64,
    pub items: &'a [LeaseItem],
    /// Return the lease after the items: what it still holds goes back.
    pub close: bool,
    /// Given back after the items (the lease shrinks): tokens, cost and
    /// slots (all that is left, with `close`), and unused rate capacity.
    pub give: Chunk,
    pub limits: [&'a Limits; 3],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseBatchOutcome {
    Applied {
        /// The lease is still live in Redis (false: closed now, or it was
        /// expired or lost — the replica must stop admitting from it).
        live: bool,
        /// What the lease still holds: tokens, cost, slots.
        held: (i64, i64, i64),
        /// Booked beyond the lease's hold (tokens, cost), in total and by
        /// item index.
        overrun: (i64, i64),
        per_item_overrun: Vec<(usize, i64, i64)>,
    },
    /// Applied before (a retry after a lost reply): nothing changed.
    Duplicate { state: String },
}

/// A live lease, as the reconciler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenLease {
    pub lease_id: String,
    pub app: String,
    pub key: String,
    pub month: String,
    pub replica: String,
    /// Redis time it was last touched, ms.
    pub touched_ms: i64,
    pub tokens: i64,
    pub slots: i64,
}

impl QuotaEngine {
    /// Takes or adds to a lease, rebuilding the tenant's month from the
    /// ledger first when Redis has lost it (as `hold` does).
    pub async fn lease_acquire(
        &self,
        req: &LeaseAcquire<'_>,
        ledger: &impl LedgerSource,
    ) -> Result<LeaseGrant, QuotaError> {
        for (i, v) in req.want.as_array().into_iter().enumerate() {
            check_amounts(&[(CHUNK_FIELDS[i], v)])?;
        }
        for _ in 0..50 {
            let k = &self.keys;
            let mut inv = self.scripts.lease_acquire.prepare_invoke();
            inv.key(k.month(req.tenant, req.month))
                .key(k.rates(req.tenant))
                .key(k.lease(req.tenant, req.lease_id))
                .key(k.leases(req.tenant))
                .arg(req.lease_id)
                .arg(req.app)
                .arg(req.key)
                .arg(&self.replica)
                .arg(req.month);
            for v in req.want.as_array().into_iter().chain(req.min.as_array()) {
                inv.arg(v);
            }
            inv.arg(BUDGET_SHARE_DIVISOR).arg(RATE_SHARE_DIVISOR);
            for l in crate::engine::limit_args(req.limits) {
                inv.arg(l);
            }
            inv.arg(if req.fresh { 1 } else { 0 });
            let mut conn = self.link().await?;
            let reply: Vec<redis::Value> = self.bounded(inv.invoke_async(&mut conn)).await?;
            match int_at(&reply, 0)? {
                1 => {
                    let mut a = [0i64; 6];
                    for (i, v) in a.iter_mut().enumerate() {
                        *v = int_at(&reply, 1 + i)?;
                    }
                    let opt = |v: i64| (v >= 0).then_some(v);
                    return Ok(LeaseGrant::Granted {
                        chunk: Chunk::from_array(a),
                        remaining_requests: opt(int_at(&reply, 7)?),
                        remaining_tokens: opt(int_at(&reply, 8)?),
                    });
                }
                2 => {
                    return Ok(LeaseGrant::Closed {
                        state: str_at(&reply, 1),
                    })
                }
                3 => {
                    let scope = ScopeKind::from_index(int_at(&reply, 1)? as usize - 1);
                    let limit = LimitKind::from_index(int_at(&reply, 2)? as usize - 1);
                    let (Some(scope), Some(limit)) = (scope, limit) else {
                        return Err(QuotaError::Protocol(format!("{reply:?}")));
                    };
                    return Ok(LeaseGrant::NearLimit { scope, limit });
                }
                -1 => self.rebuild_month(req.tenant, req.month, ledger).await?,
                _ => return Err(QuotaError::Protocol(format!("{reply:?}"))),
            }
        }
        Err(QuotaError::Unavailable(
            "month rebuild did not complete".into(),
        ))
    }

    /// Settles a batch against its lease (and returns the lease with
    /// `close`), writing each request's usage event to the outbox.
    pub async fn lease_settle(&self, b: &LeaseBatch<'_>) -> Result<LeaseBatchOutcome, QuotaError> {
        for it in b.items {
            check_amounts(&[("tokens", it.tokens), ("cost", it.cost)])?;
        }
        let k = &self.keys;
        let script = &self.scripts.lease_settle;
        let mut cmd = crate::engine::script_call(script, 5);
        cmd.arg(k.month(b.tenant, b.month))
            .arg(k.rates(b.tenant))
            .arg(k.lease(b.tenant, b.lease_id))
            .arg(k.leases(b.tenant))
            .arg(k.outbox(b.tenant))
            .arg(b.lease_id)
            .arg(b.app)
            .arg(b.key)
            .arg(b.seq)
            .arg(if b.close { 1 } else { 0 });
        for v in b.give.as_array() {
            cmd.arg(v);
        }
        for l in crate::engine::limit_args(b.limits) {
            cmd.arg(l);
        }
        cmd.arg(b.items.len());
        for it in b.items {
            cmd.arg(&it.request_id)
                .arg(it.tokens)
                .arg(it.cost)
                .arg(&it.event_json);
        }
        let mut conn = self.link().await?;
        let run = crate::engine::run_script(&mut conn, script, &cmd);
        let reply: Vec<redis::Value> = self.bounded(run).await?;
        match int_at(&reply, 0)? {
            1 => {
                let mut per = Vec::new();
                let mut i = 7;
                while i + 2 < reply.len() {
                    per.push((
                        int_at(&reply, i)? as usize - 1,
                        int_at(&reply, i + 1)?,
                        int_at(&reply, i + 2)?,
                    ));
                    i += 3;
                }
                Ok(LeaseBatchOutcome::Applied {
                    live: int_at(&reply, 1)? == 1,
                    held: (int_at(&reply, 2)?, int_at(&reply, 3)?, int_at(&reply, 4)?),
                    overrun: (int_at(&reply, 5)?, int_at(&reply, 6)?),
                    per_item_overrun: per,
                })
            }
            2 => Ok(LeaseBatchOutcome::Duplicate {
                state: str_at(&reply, 1),
            }),
            _ => Err(QuotaError::Protocol(format!("{reply:?}"))),
        }
    }

    /// Frees a lease whose replica is gone. Returns false when it was not
    /// live (returned, expired already, or unknown).
    pub async fn lease_expire(&self, tenant: &str, l: &OpenLease) -> Result<bool, QuotaError> {
        let k = &self.keys;
        let mut inv = self.scripts.lease_expire.prepare_invoke();
        inv.key(k.month(tenant, &l.month))
            .key(k.rates(tenant))
            .key(k.lease(tenant, &l.lease_id))
            .key(k.leases(tenant))
            .arg(&l.lease_id);
        let mut conn = self.link().await?;
        let reply: Vec<redis::Value> = self.bounded(inv.invoke_async(&mut conn)).await?;
        Ok(int_at(&reply, 0)? == 1)
    }

    /// A tenant's live leases last touched before `before_ms` (Redis time).
    pub async fn open_leases(
        &self,
        tenant: &str,
        before_ms: i64,
    ) -> Result<Vec<OpenLease>, QuotaError> {
        let mut conn = self.link().await?;
        let ids: Vec<String> = self
            .bounded(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(self.keys.leases(tenant))
                    .arg("-inf")
                    .arg(format!("({before_ms}"))
                    .arg("LIMIT")
                    .arg(0)
                    .arg(1000)
                    .query_async(&mut conn),
            )
            .await?;
        if ids.is_empty() {
            return Ok(vec![]);
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.keys.lease(tenant, id))
                .arg(&["st", "a", "k", "p", "r", "ts", "lt", "ls"]);
        }
        let rows: Vec<Vec<Option<String>>> = self.bounded(pipe.query_async(&mut conn)).await?;
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
        let txt = |v: &Option<String>| v.clone().unwrap_or_default();
        Ok(ids
            .into_iter()
            .zip(rows)
            .map(|(lease_id, f)| OpenLease {
                lease_id,
                app: txt(&f[1]),
                key: txt(&f[2]),
                month: txt(&f[3]),
                replica: txt(&f[4]),
                touched_ms: num(&f[5]),
                tokens: num(&f[6]),
                slots: num(&f[7]),
            })
            .collect())
    }
}
