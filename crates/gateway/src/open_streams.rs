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
