//! The state machine of `hold_engine_props`. A case (`machine`) drives the
//! hold engine and the lease books of a replica while the tenant's budget
//! moves (`budget`: the catalog index the hot path reads its effective
//! limit from, grants on a simulated clock) and the shared pool lends and
//! takes back (`pool`: the gateway's borrower and reclaim job) — the code
//! the gateway and its jobs run, on a private Redis and a test database.

mod budget;
mod machine;
mod pool;

pub use machine::{run, Op, ABSURD_REPORTS};

use budget::Approvers;
use e2e::{user, RedisProc, TestEnv};
use proptest::prelude::*;
use std::sync::OnceLock;

/// What a case starts from.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The tenant's base monthly token budget: small, so that cases soon
    /// run on grants and borrowed quota.
    pub base: i64,
    /// Most borrowed tokens the tenant may have outstanding.
    pub borrow_cap: i64,
    /// The pool's monthly tokens (one borrow: at most 5 % of it).
    pub pool_tokens: i64,
    /// The reclaim job runs while the pool's free share is below this.
    pub reclaim_below_ppm: i64,
    /// A lease idle (or old) this long goes back: short in random cases,
    /// so leases come and go; long where a case needs one to live.
    pub lease_life_ms: u64,
    /// Each end user's monthly token budget (per-request holds name one of
    /// two end users; requests admitted from a lease name none).
    pub end_user_budget: i64,
}

pub fn setup() -> impl Strategy<Value = Setup> {
    (
        0i64..500,
        0i64..3000,
        500i64..20_000,
        // The default threshold, and two under which almost every run has
        // something to take back.
        prop_oneof![Just(200_000), Just(900_000), Just(1_000_000)],
        0i64..2000,
    )
        .prop_map(
            |(base, borrow_cap, pool_tokens, reclaim_below_ppm, end_user_budget)| Setup {
                base,
                borrow_cap,
                pool_tokens,
                reclaim_below_ppm,
                lease_life_ms: 50,
                end_user_budget,
            },
        )
}

/// An infrastructure error (Postgres, Redis) as a failed case.
pub fn fail(e: impl std::fmt::Display) -> TestCaseError {
    TestCaseError::fail(e.to_string())
}

struct World {
    env: TestEnv,
    approvers: Approvers,
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
            let admin = |email| user(&env, email, "platform_admin", None);
            let approvers = Approvers {
                requester: admin("asks@prop.test").await.parse().unwrap(),
                approver: admin("approves@prop.test").await.parse().unwrap(),
            };
            World {
                env,
                approvers,
                _redis: redis,
            }
        })
    })
}
