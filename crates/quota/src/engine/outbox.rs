//! The settled-events outbox the ledger writer drains, and the open-holds
//! index the abandoned-holds sweep walks.

use super::*;

impl QuotaEngine {
    /// Settled events waiting in a tenant's outbox: the first page of
    /// about `max` (`HSCAN`'s count is a hint; a small outbox comes whole).
    pub async fn outbox_peek(
        &self,
        tenant: &str,
        max: usize,
    ) -> Result<Vec<(String, String)>, QuotaError> {
        Ok(self.outbox_scan(tenant, 0, max).await?.1)
    }

    /// One step of a walk over a tenant's outbox (`HSCAN` from `cursor`,
    /// about `count` entries): the next cursor (0 when the walk is done)
    /// and the (request id, event JSON) pairs. An entry present for the
    /// whole walk is returned at least once; entries may be removed while
    /// walking.
    pub async fn outbox_scan(
        &self,
        tenant: &str,
        cursor: u64,
        count: usize,
    ) -> Result<(u64, Vec<(String, String)>), QuotaError> {
        let mut conn = self.link().await?;
        let (next, flat): (u64, Vec<String>) = self
            .bounded(
                redis::cmd("HSCAN")
                    .arg(self.keys.outbox(tenant))
                    .arg(cursor)
                    .arg("COUNT")
                    .arg(count)
                    .query_async(&mut conn),
            )
            .await?;
        let pairs = flat
            .chunks_exact(2)
            .map(|c| (c[0].clone(), c[1].clone()))
            .collect();
        Ok((next, pairs))
    }

    /// Drops events the ledger has stored, one command per tenant.
    pub async fn outbox_remove(&self, stored: &[(&str, &str)]) -> Result<(), QuotaError> {
        if stored.is_empty() {
            return Ok(());
        }
        let mut by_tenant: HashMap<&str, Vec<&str>> = HashMap::new();
        for (t, r) in stored {
            by_tenant.entry(t).or_default().push(r);
        }
        // One command per tenant: on a cluster each goes to its tenant's node.
        let mut conn = self.link().await?;
        for (t, rids) in by_tenant {
            self.bounded(
                redis::cmd("HDEL")
                    .arg(self.keys.outbox(t))
                    .arg(rids)
                    .query_async::<()>(&mut conn),
            )
            .await?;
        }
        Ok(())
    }

    /// A page of a tenant's holds taken before `before_ms` (Redis time), the
    /// oldest first: those still open, and the ids in the index whose hold
    /// is gone or closed.
    pub async fn open_holds(
        &self,
        tenant: &str,
        before_ms: i64,
        offset: usize,
        page: usize,
    ) -> Result<(Vec<OpenHold>, Vec<String>), QuotaError> {
        let mut conn = self.link().await?;
        let ids: Vec<String> = self
            .bounded(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(self.keys.open_holds(tenant))
                    .arg("-inf")
                    .arg(format!("({before_ms}"))
                    .arg("LIMIT")
                    .arg(offset)
                    .arg(page)
                    .query_async(&mut conn),
            )
            .await?;
        if ids.is_empty() {
            return Ok((vec![], vec![]));
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("HMGET")
                .arg(self.keys.hold(tenant, id))
                .arg(&["st", "a", "k", "p", "ei", "eo", "ec", "m", "r", "at", "u"]);
        }
        let rows: Vec<Vec<Option<String>>> = self.bounded(pipe.query_async(&mut conn)).await?;
        let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse().ok()).unwrap_or(0);
        let txt = |v: &Option<String>| v.clone().unwrap_or_default();
        let (open, gone): (Vec<_>, Vec<_>) = ids
            .into_iter()
            .zip(rows)
            .partition(|(_, f)| f.first().and_then(|s| s.as_deref()) == Some("H"));
        let gone = gone.into_iter().map(|(id, _)| id).collect();
        let open = open
            .into_iter()
            .map(|(request_id, f)| OpenHold {
                request_id,
                app: txt(&f[1]),
                key: txt(&f[2]),
                month: txt(&f[3]),
                est_input: num(&f[4]),
                est_output: num(&f[5]),
                est_cost: num(&f[6]),
                model: txt(&f[7]),
                replica: txt(&f[8]),
                at_ms: num(&f[9]),
                end_user_digest: f[10].clone(),
            })
            .collect();
        Ok((open, gone))
    }

    /// Drops ids from the open-holds index whose hold is no longer open
    /// (the index and the records can disagree after Redis lost data).
    pub async fn forget_open(
        &self,
        tenant: &str,
        request_ids: &[String],
    ) -> Result<(), QuotaError> {
        if request_ids.is_empty() {
            return Ok(());
        }
        let mut conn = self.link().await?;
        self.bounded(
            redis::cmd("ZREM")
                .arg(self.keys.open_holds(tenant))
                .arg(request_ids)
                .query_async::<()>(&mut conn),
        )
        .await
    }
}
