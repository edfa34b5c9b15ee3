//! One case of the state machine: the hold engine and the lease books of a
//! replica, the tenant's budget and the shared pool, with what the test
//! knows (`Model`). The operations on requests and on leases are in the
//! submodules.

mod leases;
mod requests;

use super::budget::{Approvers, Budget};
use super::pool::Pool;
use super::{rt, world, Setup};
use domain::attribution::EndUserLimits;
use domain::limits::LimitKind;
use domain::usage::UsageEvent;
use domain::{Limits, ScopeKind};
use e2e::TestEnv;
use proptest::prelude::*;
use quota::{
    EndUserScope, HoldOutcome, HoldRequest, LeaseBook, LeaseTuning, MonthCounters, QuotaEngine,
    SettleRequest,
};
use settlement::ledger_source::StoreLedger;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub enum Op {
    Hold {
        input: i64,
        output: i64,
    },
    Extend {
        pick: usize,
        add: i64,
    },
    Settle {
        pick: usize,
        pct: i64,
        in_delta: i64,
        store_now: bool,
    },
    Release {
        pick: usize,
    },
    /// The hold of an open request, again.
    Replay {
        pick: usize,
    },
    /// Hold, release and settle of a settled or released request, again.
    ReplayClosed {
        pick: usize,
    },
    SetLimit {
        limit: i64,
    },
    Flush,
    LeaseAdmit {
        input: i64,
        output: i64,
    },
    LeaseSettle {
        pick: usize,
        pct: i64,
        in_delta: i64,
        store_now: bool,
    },
    LeaseRelease {
        pick: usize,
    },
    /// The replica returns its leases (shutdown) and starts afresh.
    LeaseReturn,
    /// The reconciler frees every lease (as for a dead replica).
    LeaseExpire,
    /// A temporary grant is approved.
    GrantStart {
        tokens: i64,
        minutes: i64,
    },
    /// The clock reaches the expiry of one grant.
    GrantExpire {
        pick: usize,
    },
    /// A borrow of one chunk, as the near-limit check takes it.
    Borrow,
    /// A replica dies between the pool's debit and the borrow's activation.
    BorrowAndDie,
    /// The periodic check: stuck borrows driven again, near-limit borrows.
    BorrowCheck,
    /// A finished borrow's id, debited and activated again.
    BorrowReplay {
        pick: usize,
    },
    /// The reclaim job.
    Reclaim,
}

/// What the test knows: open holds (input, output held) and settled totals.
#[derive(Default)]
struct Model {
    open: Vec<(String, i64, i64)>,
    /// Per-request holds settled or released since the last flush (their
    /// records in Redis answer replays).
    closed: Vec<(String, i64, i64)>,
    /// Requests admitted from a lease: (book, request id, input, output).
    leased: Vec<(usize, String, i64, i64)>,
    used: i64,
    next: u32,
    /// Settled events not yet in Postgres: in the outbox and in a ledger
    /// writer's queue.
    pending: Vec<UsageEvent>,
    /// Events whose outbox copy a flush destroyed: the writer stores them
    /// only after the month was rebuilt without them (the worst order).
    late: Vec<UsageEvent>,
    /// The documented bound of a rebuild: what such late events settled.
    undercount: i64,
    /// How far past its limit the engine may leave a scope, computed here
    /// from what each simulated request was told and did — never read back
    /// from the engine's own overrun counters (those would excuse any
    /// overspend the scripts choose to book as "overrun"):
    /// - per settled request, (actual input − estimated input)⁺ +
    ///   (reported output − output held, the cap it was sent)⁺;
    /// - leases add nothing of their own;
    /// - what Redis forgets: a flush loses every open hold and every live
    ///   lease's hold, and a lease the reconciler expires loses its hold,
    ///   while the replica may still spend what it had in hand once (the
    ///   requests admitted under those holds settle later, in full) — at
    ///   most the tokens those holds and leases held at that moment.
    bound: i64,
    /// Per end user: tokens settled, the rebuild's undercount, and the
    /// bound, as above but from that end user's requests only.
    eu_used: HashMap<&'static str, i64>,
    eu_undercount: HashMap<&'static str, i64>,
    eu_bound: HashMap<&'static str, i64>,
}

/// The two end users of per-request holds.
pub(super) const END_USERS: [&str; 2] = ["alice", "bob@example.com"];

/// The end user a per-request hold names: by its request number.
pub(super) fn end_user_of(rid: &str) -> &'static str {
    let n: u32 = rid
        .rsplit('r')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    END_USERS[(n % 2) as usize]
}

/// Reports far beyond any cap (near 2^63, as a broken provider sends) are
/// generated only while this is on. It goes on once the gateway's sanity
/// bound (billed output ≤ the cap sent, billed input ≤ the estimate plus its
/// documented error) is applied in the quota crate's settle entry points;
/// `Model::overrun_of` then caps each request's term by that bound.
pub const ABSURD_REPORTS: bool = false;

impl Model {
    /// What one request may legitimately add past the limit.
    fn overrun_of(&mut self, (input, output): (i64, i64), (ai, ao): (i64, i64)) {
        let over = (ai - input).max(0).saturating_add((ao - output).max(0));
        self.bound = self.bound.saturating_add(over);
    }

    /// The same for a per-request hold's end user.
    fn eu_overrun_of(&mut self, rid: &str, (input, output): (i64, i64), (ai, ao): (i64, i64)) {
        let over = (ai - input).max(0).saturating_add((ao - output).max(0));
        let b = self.eu_bound.entry(end_user_of(rid)).or_default();
        *b = b.saturating_add(over);
    }
}

/// Refused for the tenant's monthly token budget: what borrowing can cure.
fn budget_refusal(outcome: &HoldOutcome) -> bool {
    matches!(outcome, HoldOutcome::Refused(r)
        if r.scope == ScopeKind::Tenant && r.limit == LimitKind::MonthlyTokens)
}

/// An index into a non-empty list, from a random pick.
fn pick_in<T>(list: &[T], pick: usize) -> Option<usize> {
    (!list.is_empty()).then(|| pick % list.len())
}

fn usage_event(
    tenant: &str,
    rid: &str,
    month: &str,
    (input, output): (i64, i64),
    (ai, ao): (i64, i64),
    end_user: Option<&str>,
) -> UsageEvent {
    UsageEvent {
        request_id: rid.into(),
        tenant_id: tenant.into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "m".into(),
        period: month.into(),
        day: format!("{month}-15"),
        input_tokens: ai,
        output_tokens: ao,
        cost_micro: 0,
        cost_pico: 0,
        est_tokens: input + output,
        est_cost_micro: 0,
        overrun_tokens: (ai + ao - input - output).max(0),
        overrun_cost_micro: 0,
        status: "ok".into(),
        stream: false,
        usage_source: "provider".into(),
        replica: "prop".into(),
        started_at_ms: 0,
        settled_at_ms: 0,
        deployment: None,
        breakdown: None,
        charges: None,
        raw_usage: None,
        attribution: domain::attribution::Attribution {
            tags: Default::default(),
            end_user: end_user.map(str::to_string),
            ..Default::default()
        },
        anomaly: None,
    }
}

/// The actual use of a request held at (input, output): output at `pct` %
/// of the hold, input off the estimate by `in_delta`.
fn actual((input, output): (i64, i64), pct: i64, in_delta: i64) -> (i64, i64) {
    ((input + in_delta).max(0), output.saturating_mul(pct) / 100)
}

/// One case: the engine, the lease books and the tenant's budget and pool.
struct Machine {
    env: &'static TestEnv,
    approvers: Approvers,
    q: Arc<QuotaEngine>,
    engine: Arc<QuotaEngine>,
    tuning: LeaseTuning,
    books: Vec<Arc<LeaseBook>>,
    m: Model,
    budget: Budget,
    pool: Pool,
    none: Limits,
    eu_limits: EndUserLimits,
}

impl Machine {
    async fn start(tenant: &str, setup: &Setup) -> Self {
        static CASES: AtomicU32 = AtomicU32::new(0);
        let w = world();
        let env = &w.env;
        let replica = |name| {
            QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(2), name).unwrap()
        };
        let (q, engine) = (Arc::new(replica("prop")), Arc::new(replica("prop-lease")));
        let tuning = LeaseTuning {
            idle: Duration::from_millis(setup.lease_life_ms),
            max_age: Duration::from_millis(setup.lease_life_ms.max(10_000)),
            flush_linger: Duration::ZERO,
            ..Default::default()
        };
        let case = CASES.fetch_add(1, Ordering::Relaxed);
        let budget = Budget::start(&env.store, tenant, setup, case).await;
        let pool = Pool::start(&env.store, q.clone(), &budget, setup).await;
        Self {
            env,
            approvers: w.approvers,
            books: vec![LeaseBook::start(engine.clone(), tuning.clone())],
            q,
            engine,
            tuning,
            m: Model::default(),
            budget,
            pool,
            none: Limits::default(),
            eu_limits: EndUserLimits {
                monthly_tokens: Some(setup.end_user_budget),
                ..Default::default()
            },
        }
    }

    /// The end-user scope of a per-request hold.
    pub(super) fn eu(&self, rid: &str) -> Option<EndUserScope<'_>> {
        Some(EndUserScope {
            id: end_user_of(rid),
            limits: &self.eu_limits,
        })
    }

    /// An end user's month counters (fields `ut`, `ht`, `_rb`, …).
    async fn eu_counters(&self, end_user: &str) -> HashMap<String, i64> {
        let key = self.q.keys().end_user_month(
            self.tenant(),
            "a",
            &domain::attribution::end_user_digest(end_user),
            self.month(),
        );
        let mut c = self.env.redis().await;
        let raw: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(key)
            .query_async(&mut c)
            .await
            .unwrap();
        raw.into_iter()
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
            .collect()
    }

    /// Which end users' months Redis knows.
    pub(super) async fn eu_known(&self) -> [bool; 2] {
        let mut k = [false; 2];
        for (i, u) in END_USERS.iter().enumerate() {
            k[i] = self.eu_counters(u).await.contains_key("_rb");
        }
        k
    }

    fn tenant(&self) -> &str {
        &self.budget.tenant.id
    }

    fn month(&self) -> &str {
        &self.budget.month
    }

    fn ledger(&self) -> StoreLedger<'_> {
        StoreLedger {
            store: &self.env.store,
            quota: &self.q,
            writer: None,
        }
    }

    async fn counters(&self) -> MonthCounters {
        self.q
            .month_counters(self.tenant(), self.month())
            .await
            .unwrap()
    }

    fn scopes<'a>(&'a self, lim: &'a Limits) -> [&'a Limits; 3] {
        [lim, &self.none, &self.none]
    }

    fn hold_request<'a>(
        &'a self,
        rid: &'a str,
        (input, output): (i64, i64),
        lim: &'a Limits,
    ) -> HoldRequest<'a> {
        HoldRequest {
            budgets: &[],
            request_id: rid,
            tenant: self.tenant(),
            app: "a",
            key: "k",
            month: self.month(),
            est_input: input,
            est_output: output,
            est_cost: 0,
            model: "m",
            limits: self.scopes(lim),
        }
    }

    /// One per-request hold (with its end user's scope), rebuilding a lost
    /// month first.
    async fn hold_once(&self, rid: &str, est: (i64, i64), lim: &Limits) -> HoldOutcome {
        let req = self.hold_request(rid, est, lim);
        self.q
            .hold_with(&req, self.eu(rid), &self.ledger())
            .await
            .unwrap()
    }

    fn settle_request<'a>(
        &'a self,
        rid: &'a str,
        (ai, ao): (i64, i64),
        event_json: &'a str,
        lim: &'a Limits,
    ) -> SettleRequest<'a> {
        SettleRequest {
            request_id: rid,
            tenant: self.tenant(),
            app: "a",
            key: "k",
            month: self.month(),
            input_tokens: ai,
            output_tokens: ao,
            cost: 0,
            event_json,
            status: "ok",
            limits: self.scopes(lim),
            bound: domain::usage::Bound::SAFE,
        }
    }

    fn next_rid(&mut self) -> String {
        self.m.next += 1;
        format!("{}-r{}", self.tenant(), self.m.next)
    }

    /// The no-overspend invariant, right after an admission under `lim`:
    /// against the bound this model computed, not the engine's counters.
    async fn assert_within(&self, lim: &Limits, what: &str) -> Result<(), TestCaseError> {
        let limit = lim.monthly_tokens.expect("a token budget");
        let c = self.counters().await;
        prop_assert!(
            c.used_tokens("t") + c.held_tokens("t") <= limit + self.m.bound,
            "{} pushed past the limit: {:?} limit {} bound {}",
            what,
            c,
            limit,
            self.m.bound
        );
        let eu_limit = self.eu_limits.monthly_tokens.expect("an end-user budget");
        for u in END_USERS {
            let c = self.eu_counters(u).await;
            let bound = self.m.eu_bound.get(u).copied().unwrap_or(0);
            let (used, held) = (
                c.get("ut").copied().unwrap_or(0),
                c.get("ht").copied().unwrap_or(0),
            );
            prop_assert!(
                used + held <= eu_limit + bound,
                "{} pushed end user {} past its limit: {:?} limit {} bound {}",
                what,
                u,
                c,
                eu_limit,
                bound
            );
        }
        Ok(())
    }

    /// What Redis is about to forget of this tenant's holds: open
    /// per-request holds and live leases (all of them on a flush, or the
    /// leases the reconciler expires).
    pub(super) async fn forgotten(&self, holds_too: bool) -> i64 {
        let leases: i64 = self
            .q
            .open_leases(self.tenant(), i64::MAX)
            .await
            .unwrap()
            .iter()
            .filter(|l| l.month == self.month())
            .map(|l| l.tokens)
            .sum();
        let holds: i64 = self.m.open.iter().map(|(_, i, o)| i + o).sum();
        leases + if holds_too { holds } else { 0 }
    }

    /// Settled tokens of one end user, for the model.
    fn eu_book(&mut self, event: &UsageEvent) {
        if let Some(u) = event.attribution.end_user.as_deref() {
            let u = END_USERS
                .into_iter()
                .find(|x| *x == u)
                .expect("a known end user");
            *self.m.eu_used.entry(u).or_default() += event.total_tokens();
        }
    }

    /// A settled event: stored by the ledger writer now, or left waiting in
    /// the outbox.
    async fn book(&mut self, event: UsageEvent, store_now: bool) {
        self.m.used += event.total_tokens();
        self.eu_book(&event);
        if store_now {
            let events = std::slice::from_ref(&event);
            self.env.store.insert_usage_events(events).await.unwrap();
            let stored = [(self.tenant(), event.request_id.as_str())];
            self.q.outbox_remove(&stored).await.unwrap();
        } else {
            self.m.pending.push(event);
        }
    }

    async fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
        // What the gateway passes for a request arriving now.
        let lim = self.budget.limits();
        let env = self.env;
        let store = &env.store;
        match op {
            Op::Hold { input, output } => self.hold((input, output), &lim).await,
            Op::Extend { pick, add } => self.extend(pick, add, &lim).await,
            Op::Settle {
                pick,
                pct,
                in_delta,
                store_now,
            } => self.settle(pick, (pct, in_delta), store_now, &lim).await,
            Op::Release { pick } => self.release(pick, &lim).await,
            Op::Replay { pick } => self.replay(pick, &lim).await,
            Op::ReplayClosed { pick } => self.replay_closed(pick, &lim).await,
            Op::SetLimit { limit } => {
                self.budget.set_base(store, limit).await;
                Ok(())
            }
            Op::Flush => self.flush().await,
            Op::LeaseAdmit { input, output } => self.lease_admit((input, output), &lim).await,
            Op::LeaseSettle {
                pick,
                pct,
                in_delta,
                store_now,
            } => self.lease_settle(pick, (pct, in_delta), store_now).await,
            Op::LeaseRelease { pick } => self.lease_release(pick),
            Op::LeaseReturn => self.lease_return().await,
            Op::LeaseExpire => self.lease_expire().await,
            Op::GrantStart { tokens, minutes } => {
                let who = self.approvers;
                self.budget.grant(store, who, tokens, minutes).await;
                Ok(())
            }
            Op::GrantExpire { pick } => {
                self.budget.expire_grant(store, pick).await;
                Ok(())
            }
            Op::Borrow => self.pool.borrow(&self.budget).await,
            Op::BorrowAndDie => self.pool.borrow_and_die(&self.budget).await,
            Op::BorrowCheck => self.pool.borrow_check(&self.budget).await,
            Op::BorrowReplay { pick } => self.pool.replay(&self.budget, pick).await,
            Op::Reclaim => self.reclaim().await,
        }
    }

    async fn reclaim(&mut self) -> Result<(), TestCaseError> {
        // What the job must leave covered: used, as the ledger (which a
        // rebuild reads) has it, and held. The lease book's janitor may
        // return an idle lease (idle after `lease_life_ms`) while the job
        // runs, which only lowers what is held (no step runs meanwhile),
        // so the job is held to the lower of the readings before and after
        // it: with the reading before it alone, a lease returned during a
        // slow job read as an over-reclaim (CI, on a loaded machine).
        let limit = self.budget.limit();
        let before = self.counters().await.held_tokens("t");
        let taken = self.pool.reclaim(&self.budget).await?;
        let after = self.counters().await.held_tokens("t");
        let busy = self.m.used - self.m.undercount + before.min(after);
        Pool::check_reclaim(taken, limit, busy)
    }

    async fn flush(&mut self) -> Result<(), TestCaseError> {
        let lost = self.forgotten(true).await;
        self.m.bound = self.m.bound.saturating_add(lost);
        // Each end user's open holds are forgotten with the rest.
        for (rid, i, o) in &self.m.open {
            let b = self.m.eu_bound.entry(end_user_of(rid)).or_default();
            *b = b.saturating_add(i + o);
        }
        let mut c = self.env.redis().await;
        let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
        // The next rebuild reads every stored event; the pending ones lost
        // their outbox copy and reach Postgres after it.
        self.m.late.append(&mut self.m.pending);
        self.m.undercount = self.m.late.iter().map(|e| e.total_tokens()).sum();
        // The records that answered replays are gone with the rest.
        self.m.closed.clear();
        self.pool.flushed(&self.budget).await;
        Ok(())
    }

    /// After every step: the counters agree with what was settled whenever
    /// the month is known (short by exactly the documented bound of a
    /// rebuild), and the pool and the effective limit with Postgres.
    async fn check(&mut self, was_rebuilt: bool, eu_was: [bool; 2]) -> Result<(), TestCaseError> {
        // An end user's month rebuilt in this step read the ledger after
        // storing the outbox (pending events), and before this check stores
        // the late ones: those are its undercount.
        let eu_now = self.eu_known().await;
        for (i, u) in END_USERS.into_iter().enumerate() {
            if eu_now[i] && !eu_was[i] {
                self.m.pending.clear();
                let late: i64 = self
                    .m
                    .late
                    .iter()
                    .filter(|e| e.attribution.end_user.as_deref() == Some(u))
                    .map(|e| e.total_tokens())
                    .sum();
                self.m.eu_undercount.insert(u, late);
            }
        }
        let c = self.counters().await;
        if c.is_rebuilt() {
            if !was_rebuilt {
                // This step rebuilt the month; the rebuild stored what the
                // outbox still held (the pending events) first.
                self.m.pending.clear();
            }
            if !self.m.late.is_empty() {
                self.env
                    .store
                    .insert_usage_events(&self.m.late)
                    .await
                    .unwrap();
                self.m.late.clear();
            }
            prop_assert_eq!(
                c.used_tokens("t"),
                self.m.used - self.m.undercount,
                "redis used vs settled: {:?}",
                c
            );
            prop_assert!(c.held_tokens("t") >= 0);
        }
        for (i, u) in END_USERS.into_iter().enumerate() {
            if !eu_now[i] {
                continue;
            }
            let c = self.eu_counters(u).await;
            let settled = self.m.eu_used.get(u).copied().unwrap_or(0);
            let under = self.m.eu_undercount.get(u).copied().unwrap_or(0);
            prop_assert_eq!(
                c.get("ut").copied().unwrap_or(0),
                settled - under,
                "redis used vs settled of end user {}: {:?}",
                u,
                c
            );
            prop_assert!(c.get("ht").copied().unwrap_or(0) >= 0);
        }
        let borrowed = self.pool.check(&self.budget).await?;
        self.budget.check(borrowed)
    }
}

/// Runs one case, one at a time: cases flush the shared Redis and set the
/// platform's one pool.
pub fn run(setup: Setup, ops: Vec<Op>) -> Result<(), TestCaseError> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let tenant = format!("p{}", uuid::Uuid::new_v4().simple());
    world(); // set up outside the runtime: it blocks on its own setup
    rt().block_on(run_case(&tenant, setup, ops))
}

async fn run_case(tenant: &str, setup: Setup, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut machine = Machine::start(tenant, &setup).await;
    for op in ops {
        let was_rebuilt = machine.counters().await.is_rebuilt();
        let eu_was = machine.eu_known().await;
        machine.step(op).await?;
        machine.check(was_rebuilt, eu_was).await?;
    }
    Ok(())
}
