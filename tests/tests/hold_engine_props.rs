//! "No overspend, ever": random sequences of hold, extend, settle (below, at
//! and above the hold), release, replays, limit changes and Redis flushes —
//! and the same on the lease path: admit from a lease (acquiring or topping
//! it up, or falling back to a per-request hold near the limit), settle in
//! batches, release, return the leases, expire them as the reconciler does
//! for a dead replica — against the real engine on a private Redis and the
//! real Postgres ledger.
//! After every step: no admitted hold or extend leaves a scope past its
//! limit (`used + held <= limit + recorded overruns`), and the counters
//! agree with what was settled.

use domain::usage::UsageEvent;
use domain::Limits;
use e2e::*;
use proptest::prelude::*;
use quota::{
    ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest, LeaseAdmit, LeaseBook, QuotaEngine,
    SettleOutcome, SettleRequest,
};
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Debug, Clone)]
enum Op {
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
    Replay {
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
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..60, 1i64..300).prop_map(|(input, output)| Op::Hold { input, output }),
        2 => (0usize..8, 1i64..300).prop_map(|(pick, add)| Op::Extend { pick, add }),
        4 => (0usize..8, 0i64..160, -5i64..15, any::<bool>())
            .prop_map(|(pick, pct, in_delta, store_now)| Op::Settle { pick, pct, in_delta, store_now }),
        1 => (0usize..8).prop_map(|pick| Op::Release { pick }),
        1 => (0usize..8).prop_map(|pick| Op::Replay { pick }),
        1 => (0i64..4000).prop_map(|limit| Op::SetLimit { limit }),
        1 => Just(Op::Flush),
        4 => (1i64..60, 1i64..300).prop_map(|(input, output)| Op::LeaseAdmit { input, output }),
        4 => (0usize..8, 0i64..160, -5i64..15, any::<bool>())
            .prop_map(|(pick, pct, in_delta, store_now)| Op::LeaseSettle { pick, pct, in_delta, store_now }),
        1 => (0usize..8).prop_map(|pick| Op::LeaseRelease { pick }),
        1 => Just(Op::LeaseReturn),
        1 => Just(Op::LeaseExpire),
    ]
}

struct World {
    env: TestEnv,
    _redis: RedisProc,
}

fn rt() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

fn world() -> &'static World {
    static W: OnceLock<World> = OnceLock::new();
    W.get_or_init(|| {
        rt().block_on(async {
            let redis = RedisProc::start();
            let env = TestEnv::with_redis(redis.url(), Default::default()).await;
            World { env, _redis: redis }
        })
    })
}

async fn counters(q: &QuotaEngine, tenant: &str, month: &str) -> quota::MonthCounters {
    q.month_counters(tenant, month).await.unwrap()
}

/// What the test knows: open holds (input, output held) and settled totals.
#[derive(Default)]
struct Model {
    open: Vec<(String, i64, i64)>,
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
}

fn usage_event(
    tenant: &str,
    rid: &str,
    month: &str,
    (input, output): (i64, i64),
    (ai, ao): (i64, i64),
) -> UsageEvent {
    UsageEvent {
        request_id: rid.into(),
        tenant_id: tenant.into(),
        app_id: "a".into(),
        key_id: "k".into(),
        model: "m".into(),
        period: month.into(),
        day: "2026-11-15".into(),
        input_tokens: ai,
        output_tokens: ao,
        cost_micro: 0,
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
    }
}

async fn run(tenant: String, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let w = world();
    let env = &w.env;
    let q = QuotaEngine::new(&env.redis_url, &env.prefix, Duration::from_secs(2), "prop").unwrap();
    let ledger = gateway::ledger_source::StoreLedger {
        store: &env.store,
        quota: &q,
    };
    let month = "2026-11";
    let mut limit = 2000i64;
    let mut m = Model::default();
    let none = Limits::default();
    let tuning = quota::LeaseTuning {
        idle: Duration::from_millis(50),
        flush_linger: Duration::ZERO,
        ..Default::default()
    };
    let engine = std::sync::Arc::new(
        QuotaEngine::new(
            &env.redis_url,
            &env.prefix,
            Duration::from_secs(2),
            "prop-lease",
        )
        .unwrap(),
    );
    let mut books = vec![LeaseBook::start(engine.clone(), tuning.clone())];
    for op in ops {
        let was_rebuilt = counters(&q, &tenant, month).await.is_rebuilt();
        let lim = Limits {
            monthly_tokens: Some(limit),
            ..Default::default()
        };
        match op {
            Op::Hold { input, output } => {
                m.next += 1;
                let rid = format!("{tenant}-r{}", m.next);
                let req = HoldRequest {
                    request_id: &rid,
                    tenant: &tenant,
                    app: "a",
                    key: "k",
                    month,
                    est_input: input,
                    est_output: output,
                    est_cost: 0,
                    model: "m",
                    limits: [&lim, &none, &none],
                };
                if let HoldOutcome::Admitted { .. } = q.hold(&req, &ledger).await.unwrap() {
                    m.open.push((rid, input, output));
                    let c = counters(&q, &tenant, month).await;
                    prop_assert!(
                        c.used_tokens("t") + c.held_tokens("t") <= limit + c.overrun_tokens("t"),
                        "hold pushed past the limit: {c:?} limit {limit}"
                    );
                }
            }
            Op::Extend { pick, add } if !m.open.is_empty() => {
                let i = pick % m.open.len();
                let rid = m.open[i].0.clone();
                let req = ExtendRequest {
                    request_id: &rid,
                    tenant: &tenant,
                    app: "a",
                    key: "k",
                    month,
                    add_output: add,
                    add_cost: 0,
                    limits: [&lim, &none, &none],
                };
                match q.extend(&req).await.unwrap() {
                    ExtendOutcome::Extended { .. } => {
                        m.open[i].2 += add;
                        let c = counters(&q, &tenant, month).await;
                        prop_assert!(
                            c.used_tokens("t") + c.held_tokens("t")
                                <= limit + c.overrun_tokens("t"),
                            "extend pushed past the limit: {c:?} limit {limit}"
                        );
                    }
                    ExtendOutcome::Refused(_) => {}
                    // The hold record was flushed away with Redis.
                    ExtendOutcome::NotHeld { .. } => {}
                }
            }
            Op::Settle {
                pick,
                pct,
                in_delta,
                store_now,
            } if !m.open.is_empty() => {
                let (rid, input, output) = m.open.remove(pick % m.open.len());
                let (ai, ao) = ((input + in_delta).max(0), output * pct / 100);
                let event = UsageEvent {
                    request_id: rid.clone(),
                    tenant_id: tenant.clone(),
                    app_id: "a".into(),
                    key_id: "k".into(),
                    model: "m".into(),
                    period: month.into(),
                    day: "2026-11-15".into(),
                    input_tokens: ai,
                    output_tokens: ao,
                    cost_micro: 0,
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
                };
                let json = serde_json::to_string(&event).unwrap();
                let req = SettleRequest {
                    request_id: &rid,
                    tenant: &tenant,
                    app: "a",
                    key: "k",
                    month,
                    input_tokens: ai,
                    output_tokens: ao,
                    cost: 0,
                    event_json: &json,
                    status: "ok",
                    limits: [&lim, &none, &none],
                };
                let first = q.settle(&req).await.unwrap();
                prop_assert!(matches!(first, SettleOutcome::Settled { .. }), "{first:?}");
                m.used += ai + ao;
                // A replayed settle charges nothing more.
                let again = q.settle(&req).await.unwrap();
                prop_assert!(
                    matches!(again, SettleOutcome::AlreadyClosed { .. }),
                    "{again:?}"
                );
                if store_now {
                    // The ledger writer's path; otherwise the event waits in the outbox.
                    env.store.insert_usage_events(&[event]).await.unwrap();
                    q.outbox_remove(&[(&tenant, &rid)]).await.unwrap();
                } else {
                    m.pending.push(event);
                }
            }
            Op::Release { pick } if !m.open.is_empty() => {
                let (rid, _, _) = m.open.remove(pick % m.open.len());
                q.release(&tenant, "a", "k", month, &rid, [&lim, &none, &none])
                    .await
                    .unwrap();
            }
            Op::Replay { pick } if !m.open.is_empty() => {
                let (rid, input, output) = m.open[pick % m.open.len()].clone();
                let req = HoldRequest {
                    request_id: &rid,
                    tenant: &tenant,
                    app: "a",
                    key: "k",
                    month,
                    est_input: input,
                    est_output: output,
                    est_cost: 0,
                    model: "m",
                    limits: [&lim, &none, &none],
                };
                let before = counters(&q, &tenant, month).await;
                let r = q.hold(&req, &ledger).await.unwrap();
                // A replay is a no-op (or a fresh hold, if Redis lost the record).
                if matches!(r, HoldOutcome::Duplicate { .. }) {
                    prop_assert_eq!(counters(&q, &tenant, month).await, before);
                }
                if let HoldOutcome::Admitted { .. } = r {
                    let c = counters(&q, &tenant, month).await;
                    prop_assert!(
                        c.used_tokens("t") + c.held_tokens("t") <= limit + c.overrun_tokens("t")
                    );
                }
            }
            Op::LeaseAdmit { input, output } => {
                m.next += 1;
                let rid = format!("{tenant}-r{}", m.next);
                let req = HoldRequest {
                    request_id: &rid,
                    tenant: &tenant,
                    app: "a",
                    key: "k",
                    month,
                    est_input: input,
                    est_output: output,
                    est_cost: 0,
                    model: "m",
                    limits: [&lim, &none, &none],
                };
                let book = books.len() - 1;
                let admitted = match books[book].admit(&req, &ledger).await.unwrap() {
                    LeaseAdmit::Admitted { .. } => {
                        m.leased.push((book, rid, input, output));
                        true
                    }
                    // Near the limit: the gateway's per-request hold.
                    LeaseAdmit::PerRequest => {
                        let admitted = matches!(
                            q.hold(&req, &ledger).await.unwrap(),
                            HoldOutcome::Admitted { .. }
                        );
                        if admitted {
                            m.open.push((rid, input, output));
                        }
                        admitted
                    }
                };
                if admitted {
                    let c = counters(&q, &tenant, month).await;
                    prop_assert!(
                        c.used_tokens("t") + c.held_tokens("t") <= limit + c.overrun_tokens("t"),
                        "lease admission pushed past the limit: {c:?} limit {limit}"
                    );
                }
            }
            Op::LeaseSettle {
                pick,
                pct,
                in_delta,
                store_now,
            } if !m.leased.is_empty() => {
                let (book, rid, input, output) = m.leased.remove(pick % m.leased.len());
                let (ai, ao) = ((input + in_delta).max(0), output * pct / 100);
                let event = usage_event(&tenant, &rid, month, (input, output), (ai, ao));
                let json = serde_json::to_string(&event).unwrap();
                let actual = domain::lease::Need {
                    input: ai,
                    output: ao,
                    cost: 0,
                };
                let answer = books[book]
                    .settle(&rid, actual, json)
                    .expect("admitted from a lease")
                    .await
                    .unwrap();
                prop_assert!(
                    matches!(answer, SettleOutcome::Settled { .. }),
                    "{answer:?}"
                );
                prop_assert!(
                    books[book].settle(&rid, actual, String::new()).is_none(),
                    "settled twice"
                );
                m.used += ai + ao;
                if store_now {
                    env.store.insert_usage_events(&[event]).await.unwrap();
                    q.outbox_remove(&[(&tenant, &rid)]).await.unwrap();
                } else {
                    m.pending.push(event);
                }
            }
            Op::LeaseRelease { pick } if !m.leased.is_empty() => {
                let (book, rid, _, _) = m.leased.remove(pick % m.leased.len());
                prop_assert!(books[book].release(&rid));
            }
            Op::LeaseReturn => {
                let last = books.len() - 1;
                books[last].shutdown(Duration::from_millis(50)).await;
                books.push(LeaseBook::start(engine.clone(), tuning.clone()));
            }
            Op::LeaseExpire => {
                for l in q.open_leases(&tenant, i64::MAX).await.unwrap() {
                    q.lease_expire(&tenant, &l).await.unwrap();
                }
            }
            Op::SetLimit { limit: l } => limit = l,
            Op::Flush => {
                let mut c = env.redis().await;
                let _: () = redis::cmd("FLUSHALL").query_async(&mut c).await.unwrap();
                // The next rebuild reads every stored event; the pending ones
                // lost their outbox copy and reach Postgres after it.
                m.late.append(&mut m.pending);
                m.undercount = m.late.iter().map(|e| e.total_tokens()).sum();
            }
            _ => {}
        }
        // The counters agree with what was settled, whenever the month is
        // known, short by exactly the documented bound of a rebuild.
        let c = counters(&q, &tenant, month).await;
        if c.is_rebuilt() {
            if !was_rebuilt {
                // This step rebuilt the month; the rebuild stored what the
                // outbox still held (the pending events) first.
                m.pending.clear();
            }
            if !m.late.is_empty() {
                env.store.insert_usage_events(&m.late).await.unwrap();
                m.late.clear();
            }
            prop_assert_eq!(
                c.used_tokens("t"),
                m.used - m.undercount,
                "redis used vs settled: {:?}",
                c
            );
            prop_assert!(c.held_tokens("t") >= 0);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn no_hold_or_extend_ever_passes_the_limit(ops in proptest::collection::vec(op(), 1..60)) {
        let tenant = format!("p{}", uuid::Uuid::new_v4().simple());
        world(); // set up outside the runtime: it blocks on its own setup
        rt().block_on(run(tenant, ops))?;
    }
}
