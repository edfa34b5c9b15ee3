//! Scheduling helpers shared by the tokenize pool, the stream starts and
//! the bulk upstream runtime: a semaphore per tenant, and a thread's CPU
//! priority.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// `tenant`'s semaphore in `map`, made with `permits` on first use (the
/// tokenize pool's turns, the stream starts).
pub(crate) fn tenant_semaphore(
    map: &Mutex<HashMap<String, Arc<Semaphore>>>,
    tenant: &str,
    permits: usize,
) -> Arc<Semaphore> {
    let mut m = map.lock().expect("per-tenant semaphores lock");
    if let Some(s) = m.get(tenant) {
        return s.clone();
    }
    let s = Arc::new(Semaphore::new(permits.max(1)));
    m.insert(tenant.to_string(), s.clone());
    s
}

/// This thread's CPU priority lowered by `nice` from where it is (Linux
/// keeps a nice value per thread; 19 at most). A failure leaves it as it
/// was.
pub(crate) fn lower_priority(nice: i32) {
    #[cfg(target_os = "linux")]
    if nice > 0 {
        // SAFETY: gettid, getpriority and setpriority only read their
        // arguments; errno is this thread's.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            *libc::__errno_location() = 0;
            let now = libc::getpriority(libc::PRIO_PROCESS, tid);
            // -1 is a valid nice value: an error only with errno set.
            if now == -1 && *libc::__errno_location() != 0 {
                return;
            }
            let _ = libc::setpriority(libc::PRIO_PROCESS, tid, (now + nice).min(19));
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = nice;
}
