//! The pool, model-slot and day-cost scripts against the real Redis, each
//! test under a random key prefix.

use quota::{BorrowOutcome, QuotaEngine, SlotOutcome};
use std::time::Duration;

fn engine() -> QuotaEngine {
    let url = std::env::var("TOLLGATE_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!("tgtest{}", uuid::Uuid::new_v4().simple());
    QuotaEngine::new(&url, &prefix, Duration::from_millis(500), "test").unwrap()
}

const M: &str = "2026-11";

#[tokio::test]
async fn borrows_respect_pool_and_cap_and_answer_a_repeated_id_the_same() {
    let q = engine();
    // The pool month is unknown until rebuilt from Postgres (here: empty).
    assert_eq!(
        q.pool_borrow(M, "b0", "t", 500, 1_000, 800).await.unwrap(),
        BorrowOutcome::Unknown
    );
    assert!(q.pool_rebuild(M, &[], &[]).await.unwrap());
    assert!(!q.pool_rebuild(M, &[], &[]).await.unwrap(), "rebuilds once");
    let g = q.pool_borrow(M, "b1", "t", 500, 1_000, 800).await.unwrap();
    assert_eq!(
        g,
        BorrowOutcome::Granted {
            tokens: 500,
            lent: 500,
            tenant_outstanding: 500
        }
    );
    // Idempotent by borrow id: the first answer, nothing lent twice.
    assert_eq!(
        q.pool_borrow(M, "b1", "t", 500, 1_000, 800).await.unwrap(),
        BorrowOutcome::Seen { tokens: 500 }
    );
    // The tenant's cap clips the next chunk...
    let g = q.pool_borrow(M, "b2", "t", 500, 1_000, 800).await.unwrap();
    assert!(
        matches!(
            g,
            BorrowOutcome::Granted {
                tokens: 300,
                lent: 800,
                ..
            }
        ),
        "{g:?}"
    );
    // ...and the pool's free part clips another tenant's.
    let g = q.pool_borrow(M, "b3", "u", 500, 1_000, 800).await.unwrap();
    assert!(
        matches!(
            g,
            BorrowOutcome::Granted {
                tokens: 200,
                lent: 1_000,
                ..
            }
        ),
        "{g:?}"
    );
    let g = q.pool_borrow(M, "b4", "u", 500, 1_000, 800).await.unwrap();
    assert!(
        matches!(g, BorrowOutcome::Granted { tokens: 0, .. }),
        "{g:?}"
    );
    // Returns are idempotent by reclaim id.
    assert!(q.pool_return(M, "r1", "t", 100).await.unwrap());
    assert!(q.pool_return(M, "r1", "t", 100).await.unwrap());
    let (lent, per) = q.pool_state(M).await.unwrap().unwrap();
    assert_eq!(lent, 900);
    assert_eq!(per, vec![("t".to_string(), 700), ("u".to_string(), 200)]);
}

#[tokio::test]
async fn a_lost_pool_is_rebuilt_from_the_record_with_pending_reclaims_applied() {
    let q = engine();
    let outstanding = vec![("t".to_string(), 400), ("u".to_string(), 100)];
    assert!(q
        .pool_rebuild(M, &outstanding, &["r-pending".to_string()])
        .await
        .unwrap());
    assert_eq!(q.pool_state(M).await.unwrap().unwrap().0, 500);
    // The pending reclaim is already counted in the outstanding amounts.
    q.pool_return(M, "r-pending", "t", 50).await.unwrap();
    assert_eq!(q.pool_state(M).await.unwrap().unwrap().0, 500);
}

#[tokio::test]
async fn model_slots_keep_other_tenants_unused_guarantees_free() {
    let q = engine();
    let g = vec![("core".to_string(), 2)];
    let life = 60_000;
    // Capacity 3 with 2 guaranteed to core: one slot for everyone else.
    assert_eq!(
        q.model_acquire("m", "std", "r1", 3, life, &g)
            .await
            .unwrap(),
        SlotOutcome::Taken
    );
    assert!(matches!(
        q.model_acquire("m", "std", "r2", 3, life, &g)
            .await
            .unwrap(),
        SlotOutcome::Full {
            inflight: 1,
            reserved: 2
        }
    ));
    for r in ["c1", "c2"] {
        assert_eq!(
            q.model_acquire("m", "core", r, 3, life, &g).await.unwrap(),
            SlotOutcome::Taken
        );
    }
    assert!(matches!(
        q.model_acquire("m", "core", "c3", 3, life, &g)
            .await
            .unwrap(),
        SlotOutcome::Full { .. }
    ));
    assert_eq!(q.model_inflight("m", "core").await.unwrap(), 2);
    assert!(q.model_release("m", "std", "r1").await.unwrap());
    assert!(
        !q.model_release("m", "std", "r1").await.unwrap(),
        "idempotent"
    );
    assert_eq!(
        q.model_acquire("m", "std", "r2", 3, life, &g)
            .await
            .unwrap(),
        SlotOutcome::Taken
    );
    // A slot whose replica died expires after its lifetime.
    let q2 = engine();
    assert_eq!(
        q2.model_acquire("m", "std", "x", 1, 50, &[]).await.unwrap(),
        SlotOutcome::Taken
    );
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(
        q2.model_acquire("m", "std", "y", 1, 50, &[]).await.unwrap(),
        SlotOutcome::Taken
    );
    assert_eq!(q2.model_inflight("m", "std").await.unwrap(), 1);
}

#[tokio::test]
async fn the_day_cost_starts_from_the_ledger_once_then_counts() {
    let q = engine();
    assert_eq!(q.day_cost("t", "2026-11-29").await.unwrap(), None);
    assert!(
        q.day_cost_add("t", "2026-11-29", 5)
            .await
            .unwrap()
            .is_none(),
        "no counter yet"
    );
    assert_eq!(
        q.day_cost_rebuild("t", "2026-11-29", 100).await.unwrap(),
        (true, 100)
    );
    assert_eq!(
        q.day_cost_rebuild("t", "2026-11-29", 7).await.unwrap(),
        (false, 100)
    );
    assert_eq!(
        q.day_cost_add("t", "2026-11-29", 5).await.unwrap(),
        Some(105)
    );
    assert_eq!(
        q.day_cost_add("t", "2026-11-29", 0).await.unwrap(),
        Some(105)
    );
    assert_eq!(q.day_cost("t", "2026-11-29").await.unwrap(), Some(105));
}
