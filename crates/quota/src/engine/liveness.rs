//! Redis time, replica heartbeats, warm-up and ping.

use super::*;

impl QuotaEngine {
    /// Redis time, ms since the epoch (the clock holds are stamped with).
    pub async fn now_ms(&self) -> Result<i64, QuotaError> {
        let mut conn = self.link().await?;
        let (s, us): (i64, i64) = self
            .bounded(redis::cmd("TIME").query_async(&mut conn))
            .await?;
        Ok(s * 1000 + us / 1000)
    }

    /// Measures how far this replica's clock is from Redis' (one `TIME`,
    /// taken as read half-way through the call) and keeps it for
    /// [`Self::clock_skew_ms`]. Returns the skew kept.
    pub async fn sync_clock(&self) -> Result<i64, QuotaError> {
        let local_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64)
        };
        let before = local_ms();
        let server = self.now_ms().await?;
        let after = local_ms();
        let skew = domain::period::clock_skew_ms(before, server, after);
        self.clock_skew_ms
            .store(skew, std::sync::atomic::Ordering::Relaxed);
        Ok(skew)
    }

    /// Redis time less this replica's clock, as last measured (0 until
    /// then, and while within the measurement's error): add it to the
    /// local clock to read the platform's time.
    pub fn clock_skew_ms(&self) -> i64 {
        self.clock_skew_ms
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Marks this replica alive for `ttl`; holds of a replica without a
    /// heartbeat are orphans.
    pub async fn heartbeat(&self, ttl: Duration) -> Result<(), QuotaError> {
        let mut conn = self.link().await?;
        self.bounded(
            redis::cmd("SET")
                .arg(self.keys.replica(&self.replica))
                .arg(1)
                .arg("PX")
                .arg(ttl.as_millis() as u64)
                .query_async::<()>(&mut conn),
        )
        .await
    }

    pub async fn replica_alive(&self, replica: &str) -> Result<bool, QuotaError> {
        let mut conn = self.link().await?;
        let n: i64 = self
            .bounded(
                redis::cmd("EXISTS")
                    .arg(self.keys.replica(replica))
                    .query_async(&mut conn),
            )
            .await?;
        Ok(n == 1)
    }

    /// Connects now, allowing `patience` rather than the per-call timeout
    /// (a cluster connection first maps the slots). Startup calls this so
    /// the first requests do not pay for it; failure is not fatal.
    pub async fn warm_up(&self, patience: Duration) -> bool {
        let conn = tokio::time::timeout(patience, self.conn.get()).await;
        let Ok(Ok(mut conn)) = conn else { return false };
        let ping = redis::cmd("PING");
        matches!(
            tokio::time::timeout(patience, ping.query_async::<String>(&mut conn)).await,
            Ok(Ok(_))
        )
    }

    pub async fn ping(&self) -> Result<(), QuotaError> {
        let mut conn = self.link().await?;
        self.bounded(redis::cmd("PING").query_async::<String>(&mut conn))
            .await
            .map(|_| ())
    }
}
