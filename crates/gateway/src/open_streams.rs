//! Each tenant's open streamed answers on this replica, and its cap on them
//! (`tenants.max_open_streams`, else `fair.max_open_streams_per_tenant`;
//! docs/fair.md, "Per-tenant caps"). A stream over the cap is refused with
//! 429 `tenant_stream_cap` before it is forwarded. The count is taken by an
//! [`OpenStream`] guard that the stream's body holds: it is given back when
//! the body is dropped, however the stream ended (finished, cut, its
//! client gone, the provider failing) — or when the request fails before
//! its stream began. Counted per replica, in memory: N replicas let a
//! tenant open up to N times its cap.

use crate::errors::ApiError;
use domain::reason::ReasonCode;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct OpenStreams {
    open: Mutex<HashMap<String, usize>>,
}

/// One open stream of a tenant; dropping it closes it.
pub struct OpenStream {
    streams: Arc<OpenStreams>,
    tenant: String,
}

impl OpenStreams {
    /// Opens a stream of `tenant` unless it already has `cap` open (None:
    /// no cap).
    pub fn open(self: &Arc<Self>, tenant: &str, cap: Option<usize>) -> Result<OpenStream, usize> {
        let mut open = self.open.lock().expect("open streams lock");
        let n = open.get(tenant).copied().unwrap_or(0);
        if cap.is_some_and(|c| n >= c) {
            return Err(n);
        }
        open.insert(tenant.to_string(), n + 1);
        Ok(OpenStream {
            streams: self.clone(),
            tenant: tenant.to_string(),
        })
    }

    /// Streams of `tenant` open on this replica now.
    pub fn count(&self, tenant: &str) -> usize {
        let open = self.open.lock().expect("open streams lock");
        open.get(tenant).copied().unwrap_or(0)
    }

    fn close(&self, tenant: &str) {
        let mut open = self.open.lock().expect("open streams lock");
        if let Some(n) = open.get_mut(tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(tenant);
            }
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.streams.close(&self.tenant);
    }
}

/// Each tenant's streams being started on this replica: not yet held,
/// forwarded, or answered by the provider's headers. At most
/// `fair.stream_starts_per_tenant` at a time per tenant (docs/fair.md,
/// "Isolation under long prompts and stream bursts"); the others wait their
/// turn, first come first served, for at most `fair.stream_start_wait_ms`
/// and then start without one: the pacing spreads a burst, it never
/// refuses. A tenant opening a thousand streams at once then starts them a
/// few at a time — the holds, the upstream connections and the provider's
/// first bytes spread out — while other tenants' requests pass between
/// them.
#[derive(Default)]
pub struct StreamStarts {
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Semaphore>>>,
}

/// A stream's turn to start; dropped when its answer has begun.
pub type StartTurn = tokio::sync::OwnedSemaphorePermit;

impl StreamStarts {
    /// Waits for one of `tenant`'s `per_tenant` starts, at most `max_wait`;
    /// `None` when it waited that long (the stream starts without a turn).
    pub async fn start(
        &self,
        tenant: &str,
        per_tenant: usize,
        max_wait: std::time::Duration,
    ) -> Option<StartTurn> {
        let sem = crate::sched::tenant_semaphore(&self.tenants, tenant, per_tenant);
        if let Ok(turn) = sem.clone().try_acquire_owned() {
            return Some(turn);
        }
        match tokio::time::timeout(max_wait, sem.acquire_owned()).await {
            Ok(Ok(turn)) => Some(turn),
            _ => None,
        }
    }
}

/// The refusal of a stream over its tenant's cap.
pub(crate) fn refused(open: usize) -> ApiError {
    let msg = format!(
        "this tenant already has {open} streamed responses open (its max_open_streams); \
         wait for one to finish"
    );
    ApiError::new(ReasonCode::TenantStreamCap, msg).retry_after(Some(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_are_taken_a_few_at_a_time_per_tenant() {
        use std::time::Duration;
        let s = StreamStarts::default();
        let wait = Duration::from_millis(50);
        let a1 = s.start("a", 2, wait).await.unwrap();
        let _a2 = s.start("a", 2, wait).await.unwrap();
        // The third of tenant a waits its whole time, then goes without a
        // turn …
        let t0 = std::time::Instant::now();
        assert!(s.start("a", 2, wait).await.is_none());
        assert!(t0.elapsed() >= wait);
        // … while tenant b starts at once.
        let _b = s.start("b", 2, Duration::ZERO).await.unwrap();
        // A start given back lets the next one of a go.
        drop(a1);
        let _a3 = s.start("a", 2, Duration::ZERO).await.unwrap();
    }

    #[test]
    fn the_cap_counts_open_guards_and_a_dropped_guard_frees_its_place() {
        let s = Arc::new(OpenStreams::default());
        let a = s.open("t", Some(2)).unwrap();
        let b = s.open("t", Some(2)).unwrap();
        assert_eq!(s.open("t", Some(2)).err(), Some(2));
        // Another tenant, and no cap at all, are not affected.
        let _c = s.open("u", Some(2)).unwrap();
        assert!(s.open("t", None).is_ok());
        drop(a);
        let _d = s.open("t", Some(2)).unwrap();
        drop(b);
        assert_eq!(s.count("t"), 1);
    }
}
