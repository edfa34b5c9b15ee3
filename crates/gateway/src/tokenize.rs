//! Long inputs counted off the async workers, in a bounded pool that the
//! tenants share fairly (docs/scale.md, "Long inputs").
//!
//! Exactly counting a megabyte of prompt costs ~60 ms of CPU. On the async
//! workers it would stall every other request behind it; on tokio's blocking
//! pool alone (up to 512 threads) sixteen such requests a second fill a core
//! and crowd out the requests of every other tenant. Here at most `threads`
//! counts run at once, and each tenant has at most one of them running or
//! waiting: the waiters of different tenants take turns (the semaphore is
//! first come first served), so one tenant sending long prompts waits behind
//! its own, not the others behind it.
//!
//! Parsing a long body into JSON and writing it back for the provider cost
//! ~5–10 ms per megabyte each; bodies above [`LARGE_BODY`] take the same
//! turns ([`TokenizePool::parse`], [`TokenizePool::serialise`]).
//!
//! The pool's threads are its own, and run at a lower CPU priority than
//! the async workers (`gateway.tokenize_nice`, 10 by default): when the
//! cores are busy, a short request's parse, hold and forward go first, and
//! the long prompt's count takes what is left — on two cores a long prompt
//! no longer adds its count's time to every short request that arrives
//! meanwhile (docs/fair.md, "Isolation").

use crate::errors::ApiError;
use crate::sched::{lower_priority, tenant_semaphore};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex};
use tokio::sync::{oneshot, Semaphore};

/// Bodies above this are parsed, tokenized and serialised in the pool.
pub(crate) const LARGE_BODY: usize = 64 * 1024;

type Job = Box<dyn FnOnce() + Send>;

pub struct TokenizePool {
    slots: Arc<Semaphore>,
    tenants: Mutex<HashMap<String, Arc<Semaphore>>>,
    jobs: Mutex<mpsc::Sender<Job>>,
}

impl TokenizePool {
    /// `threads` counting threads (at least 1), each at `nice` (0: the
    /// process's own priority; Linux only, elsewhere ignored).
    pub fn new(threads: usize, nice: i32) -> Self {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("tollgate-count-{i}"))
                .spawn(move || {
                    lower_priority(nice);
                    // Ends when the pool (the sender) is dropped.
                    loop {
                        let job = match rx.lock().expect("tokenize queue lock").recv() {
                            Ok(job) => job,
                            Err(_) => return,
                        };
                        // A panicking job loses its answer (its caller
                        // sees it), not the thread.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .expect("tokenize thread starts");
        }
        Self {
            slots: Arc::new(Semaphore::new(threads)),
            tenants: Mutex::new(HashMap::new()),
            jobs: Mutex::new(tx),
        }
    }

    fn tenant(&self, id: &str) -> Arc<Semaphore> {
        tenant_semaphore(&self.tenants, id, 1)
    }

    /// Runs `f` on a blocking thread once this tenant's turn and a slot come.
    pub async fn run<T: Send + 'static>(
        &self,
        tenant: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let mine = self.tenant(tenant);
        let turn = mine.acquire_owned().await.expect("never closed");
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        let (tx, rx) = oneshot::channel();
        // The turn and the slot go with the job: given back when it has
        // run, or skipped because its caller is gone (a client that hung
        // up) — a cancelled request's job neither runs nor frees its
        // tenant's turn early.
        let job: Job = Box::new(move || {
            let _held = (turn, slot);
            if !tx.is_closed() {
                let _ = tx.send(f());
            }
        });
        self.jobs
            .lock()
            .expect("tokenize queue lock")
            .send(job)
            .expect("tokenize threads run while the pool lives");
        rx.await.expect("tokenize task does not panic")
    }

    /// The request body as JSON: here when small, else on the tenant's turn.
    pub(crate) async fn parse(
        &self,
        tenant: &str,
        bytes: &bytes::Bytes,
    ) -> Result<Value, ApiError> {
        if bytes.len() <= LARGE_BODY {
            return crate::errors::parse_json(bytes);
        }
        let bytes = bytes.clone();
        self.run(tenant, move || crate::errors::parse_json(&bytes))
            .await
    }

    /// `body` written for the provider: here unless `large_of` names the
    /// tenant of a body above [`LARGE_BODY`], which waits for its turn.
    pub(crate) async fn serialise(&self, large_of: Option<&str>, body: &mut Value) -> Vec<u8> {
        let Some(tenant) = large_of else {
            return serde_json::to_vec(body).expect("json serialises");
        };
        let v = std::mem::take(body);
        let (v, bytes) = self
            .run(tenant, move || {
                let b = serde_json::to_vec(&v).expect("json serialises");
                (v, b)
            })
            .await;
        *body = v;
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn at_most_threads_run_and_one_per_tenant() {
        let pool = Arc::new(TokenizePool::new(2, 10));
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

    /// The counting runs on the pool's own threads, at the lower priority
    /// asked for, and a job that panics does not take its thread along.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn counts_run_at_the_lower_priority() {
        let nice_here = || unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        };
        let before = nice_here();
        let pool = TokenizePool::new(1, 7);
        let there = pool.run("a", nice_here).await;
        assert_eq!(there, (before + 7).min(19));
        let name = pool
            .run("a", || std::thread::current().name().map(str::to_string))
            .await;
        assert_eq!(name.as_deref(), Some("tollgate-count-0"));
        let p = std::sync::Arc::new(pool);
        let q = p.clone();
        let panicked = tokio::spawn(async move { q.run("a", || panic!("boom")).await }).await;
        assert!(panicked.is_err());
        assert_eq!(p.run("b", || 5).await, 5, "the thread survived the panic");
        assert_eq!(nice_here(), before, "the caller's priority is untouched");
    }

    /// A body above `LARGE_BODY` is parsed on its tenant's turn (so it
    /// waits while that tenant's turn is taken, and another tenant's does
    /// not); a small one is parsed at once. Parsing a large body on the
    /// async worker would make the first wait fail.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_large_body_is_parsed_on_its_tenants_turn_a_small_one_at_once() {
        let pool = Arc::new(TokenizePool::new(2, 10));
        let big = bytes::Bytes::from(format!("{{\"x\":\"{}\"}}", "a".repeat(LARGE_BODY)));
        let small = bytes::Bytes::from_static(b"{\"x\":\"small\"}");
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let p = pool.clone();
        let busy = tokio::spawn(async move {
            p.run("a", move || {
                wait.recv().ok();
            })
            .await
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (p, b) = (pool.clone(), big.clone());
        let waiting = tokio::spawn(async move { p.parse("a", &b).await });
        // Another tenant's large body and a's small one do not wait.
        assert!(pool.parse("b", &big).await.unwrap()["x"].is_string());
        assert_eq!(pool.parse("a", &small).await.unwrap()["x"], "small");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a's large body skipped a's turn");
        release.send(()).unwrap();
        busy.await.unwrap();
        assert!(waiting.await.unwrap().unwrap()["x"].is_string());
        // Written back the same way: on the tenant's turn, the value kept.
        let mut v = serde_json::json!({"x": "y"});
        assert_eq!(pool.serialise(Some("a"), &mut v).await, br#"{"x":"y"}"#);
        assert_eq!(v["x"], "y");
    }
}
