//! Long inputs counted off the async workers, in a bounded pool that the
//! tenants share fairly (docs/benchmarks.md, "Long context").
//!
//! Exactly counting a megabyte of prompt costs ~60 ms of CPU. On the async
//! workers it would stall every other request behind it; on tokio's blocking
//! pool alone (up to 512 threads) sixteen such requests a second fill a core
//! and crowd out the requests of every other tenant. Here at most `threads`
//! counts run at once, and each tenant has at most one of them running or
//! waiting: the waiters of different tenants take turns (the semaphore is
//! first come first served), so one tenant sending long prompts waits behind
//! its own, not the others behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

pub struct TokenizePool {
    slots: Semaphore,
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl TokenizePool {
    pub fn new(threads: usize) -> Self {
        Self {
            slots: Semaphore::new(threads.max(1)),
            tenants: Mutex::new(HashMap::new()),
        }
    }

    fn tenant(&self, id: &str) -> Arc<Semaphore> {
        let mut t = self.tenants.lock().expect("tokenize pool lock");
        t.entry(id.to_string())
            .or_insert_with(|| Arc::new(Semaphore::new(1)))
            .clone()
    }

    /// Runs `f` on a blocking thread once this tenant's turn and a slot come.
    pub async fn run<T: Send + 'static>(
        &self,
        tenant: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let mine = self.tenant(tenant);
        let _turn = mine.acquire().await.expect("never closed");
        let _slot = self.slots.acquire().await.expect("never closed");
        tokio::task::spawn_blocking(f)
            .await
            .expect("tokenize task does not panic")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn at_most_threads_run_and_one_per_tenant() {
        let pool = Arc::new(TokenizePool::new(2));
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let per_a = Arc::new(AtomicUsize::new(0));
        let peak_a = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..12 {
            let (pool, running, peak) = (pool.clone(), running.clone(), peak.clone());
            let (per_a, peak_a) = (per_a.clone(), peak_a.clone());
            let tenant = if i % 3 == 0 { "b" } else { "a" };
            tasks.push(tokio::spawn(async move {
                pool.run(tenant, move || {
                    let n = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(n, Ordering::SeqCst);
                    if tenant == "a" {
                        let k = per_a.fetch_add(1, Ordering::SeqCst) + 1;
                        peak_a.fetch_max(k, Ordering::SeqCst);
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    if tenant == "a" {
                        per_a.fetch_sub(1, Ordering::SeqCst);
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                })
                .await
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 2);
        assert_eq!(
            peak_a.load(Ordering::SeqCst),
            1,
            "one count per tenant at a time"
        );
    }
}
