//! "No overspend, ever": random sequences of hold, extend, settle (below, at
//! and above the hold), release, replayed request ids (open and closed),
//! limit changes and Redis flushes — the same on the lease path: admit from
//! a lease (acquiring or topping it up, or falling back to a per-request
//! hold near the limit), settle in batches, release, return the leases,
//! expire them as the reconciler does for a dead replica — while the
//! tenant's budget moves under them: temporary grants approved and expiring
//! on a simulated clock, borrows from the shared pool (also by a replica
//! that dies between the pool's debit and the borrow's activation, and
//! replayed borrow ids), the periodic borrow check and the reclaim job.
//! Against the real engine on a private Redis, the real Postgres ledger,
//! and the gateway's own catalog index and borrower (`hold_props`).
//!
//! The limit is the tenant's effective monthly limit, as the gateway
//! computes it for each request: base + approved grants unexpired at the
//! clock + outstanding borrowed (docs/design.md §3). It falls when the base is
//! lowered, a grant expires or borrowed quota is reclaimed. A lower limit
//! binds new admissions only: holds admitted under the old one stay valid
//! and may leave the scope above the new one (docs/design.md §4: the limit is an
//! argument of each script; nothing re-checks open holds). So:
//!
//! - right after every admitted hold, extend or lease admission,
//!   `used + held <= limit + bound`, for the limit in force at that
//!   admission, where the machine computes `bound` itself from what it told
//!   each request and upstream to do — Σ (actual input − estimate)⁺ +
//!   (reported output − output held)⁺, plus what a flush or a lease expiry
//!   made Redis forget (the holds open at that moment) — never from the
//!   engine's own overrun counters, and leases add nothing;
//! - after every step: the effective limit is base + unexpired grants + the
//!   tenant's outstanding borrows in Postgres; the pool has lent exactly
//!   Σ outstanding borrows (+ what borrows a dead replica left pending
//!   were debited), never more than its size, and the tenant never more
//!   than its borrow cap; `used` equals what was settled whenever Redis
//!   knows the month (short by exactly the documented rebuild bound after a
//!   FLUSHALL), and the pool, rebuilt from Postgres, agrees again;
//! - one borrow lends at most one chunk (5 % of the pool); a replayed
//!   borrow id gets its first answer and lends nothing more;
//! - the reclaim job takes from the tenant at most its headroom: never so
//!   much that the limit falls below what it has used (the ledger's count)
//!   and holds;
//! - a replayed request id (hold, settle or release) changes nothing;
//! - the same for each end user, the fourth scope: every per-request hold
//!   names one of two end users with a monthly token budget of their own,
//!   and right after each admission `used + held <= budget + bound` for
//!   each, the bound computed here from that end user's requests alone;
//!   `used` equals what that end user settled whenever Redis knows its
//!   month (short by the rebuild bound after a FLUSHALL).

mod hold_props;

use hold_props::{run, setup, Op, Setup, ABSURD_REPORTS};
use proptest::prelude::*;

/// Output at this many percent of the hold: 0–160 %, and (behind
/// `ABSURD_REPORTS`) now and then a report near 2^63.
fn pct() -> BoxedStrategy<i64> {
    if ABSURD_REPORTS {
        prop_oneof![19 => 0i64..160, 1 => Just(i64::MAX / 2)].boxed()
    } else {
        (0i64..160).boxed()
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1i64..60, 1i64..300).prop_map(|(input, output)| Op::Hold { input, output }),
        2 => (0usize..8, 1i64..300).prop_map(|(pick, add)| Op::Extend { pick, add }),
        4 => (0usize..8, pct(), -5i64..15, any::<bool>())
            .prop_map(|(pick, pct, in_delta, store_now)| Op::Settle { pick, pct, in_delta, store_now }),
        1 => (0usize..8).prop_map(|pick| Op::Release { pick }),
        1 => (0usize..8).prop_map(|pick| Op::Replay { pick }),
        1 => (0usize..8).prop_map(|pick| Op::ReplayClosed { pick }),
        1 => (0i64..4000).prop_map(|limit| Op::SetLimit { limit }),
        1 => Just(Op::Flush),
        4 => (1i64..60, 1i64..300).prop_map(|(input, output)| Op::LeaseAdmit { input, output }),
        4 => (0usize..8, pct(), -5i64..15, any::<bool>())
            .prop_map(|(pick, pct, in_delta, store_now)| Op::LeaseSettle { pick, pct, in_delta, store_now }),
        1 => (0usize..8).prop_map(|pick| Op::LeaseRelease { pick }),
        1 => Just(Op::LeaseReturn),
        1 => Just(Op::LeaseExpire),
        1 => (1i64..1500, 1i64..120).prop_map(|(tokens, minutes)| Op::GrantStart { tokens, minutes }),
        1 => (0usize..8).prop_map(|pick| Op::GrantExpire { pick }),
        2 => Just(Op::Borrow),
        1 => Just(Op::BorrowAndDie),
        1 => Just(Op::BorrowCheck),
        1 => (0usize..8).prop_map(|pick| Op::BorrowReplay { pick }),
        2 => Just(Op::Reclaim),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn no_hold_or_extend_ever_passes_the_limit(
        setup in setup(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        run(setup, ops)?;
    }
}

/// Found while adding borrows, flushes and reclaims to the machine above,
/// and kept as a fixed case because random cases rarely line it up (none of
/// 400 did): after a Redis loss, the reclaim job read the tenant's lost
/// month as unused and took back borrowed quota already spent, leaving its
/// limit below what it had used.
#[test]
fn a_reclaim_after_a_redis_loss_takes_nothing_already_used() {
    let setup = Setup {
        base: 0,
        borrow_cap: 3000,
        pool_tokens: 2000,
        reclaim_below_ppm: 1_000_000,
        lease_life_ms: 50,
        end_user_budget: 1_000_000,
    };
    // Five chunks of 100 borrowed, 350 of them used, Redis flushed.
    let mut ops = vec![Op::Borrow; 5];
    ops.extend([
        Op::Hold {
            input: 50,
            output: 300,
        },
        Op::Settle {
            pick: 0,
            pct: 100,
            in_delta: 0,
            store_now: true,
        },
        Op::Flush,
        Op::Reclaim,
    ]);
    run(setup, ops).unwrap();
}

/// Many lease admissions around a Redis loss, each request settling at its
/// estimate: the machine's own bound allows nothing past the limit here but
/// what the flush made Redis forget. Kept as a fixed case because it fails
/// for a replica that admits past what Redis granted it — made to fail by
/// crediting each grant twice to the local pools, which the earlier bound
/// (taken from the engine's overrun counter) let pass, since every excess
/// request was booked as "overrun". (A top-up re-creating a lost lease is
/// tried in `crates/quota/tests/lease_loss.rs`; random cases here rarely
/// leave a grant in hand at the flush.)
#[test]
fn lease_admissions_around_a_flush_spend_no_more_than_redis_granted() {
    let setup = Setup {
        base: 3000,
        borrow_cap: 0,
        pool_tokens: 500,
        reclaim_below_ppm: 200_000,
        lease_life_ms: 60_000,
        end_user_budget: 1_000_000,
    };
    let admit = Op::LeaseAdmit {
        input: 5,
        output: 25,
    };
    let settle = Op::LeaseSettle {
        pick: 0,
        pct: 100,
        in_delta: 0,
        store_now: true,
    };
    // Enough demand first that the lease holds many requests' worth in hand.
    let mut ops = vec![admit.clone(); 30];
    ops.extend(vec![settle.clone(); 30]);
    ops.push(Op::Flush);
    for _ in 0..10 {
        ops.extend(vec![admit.clone(); 20]);
        ops.extend(vec![settle.clone(); 20]);
    }
    run(setup, ops).unwrap();
}
