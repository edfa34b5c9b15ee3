//! Request ids and the time in them.
//!
//! A request id is `req_` and a UUIDv7 in lowercase hex, made when the
//! gateway receives the request. A UUIDv7 begins with the milliseconds
//! since the Unix epoch (48 bits, 12 hex digits), so ids compared as bytes
//! ("C" collation) are in the order the requests were received, to the
//! millisecond. The request log is ordered and windowed by the id alone:
//! its time is the receipt time, which the gateway also books as the
//! request's start (`started_at`) and a refusal's time (docs/scale.md,
//! "The request log").

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub const PREFIX: &str = "req_";

/// A new id for a request received now, and that instant (to the
/// millisecond: the time the id carries).
pub fn new() -> (String, DateTime<Utc>) {
    let id = Uuid::now_v7();
    let at = time_of_uuid(&id).unwrap_or_else(Utc::now);
    (format!("{PREFIX}{}", id.simple()), at)
}

/// A new id for a request received now by a replica whose clock is
/// `skew_ms` behind the platform's (`period::clock_skew_ms`): the id
/// carries the platform's time. With no skew, [`new`] (monotonic ids).
pub fn new_skewed(skew_ms: i64) -> (String, DateTime<Utc>) {
    if skew_ms == 0 {
        return new();
    }
    let at = crate::period::skewed(Utc::now(), skew_ms);
    let micros = at.timestamp_micros().max(0);
    let ts = uuid::Timestamp::from_unix(
        uuid::NoContext,
        (micros / 1_000_000) as u64,
        ((micros % 1_000_000) * 1_000) as u32,
    );
    let id = Uuid::new_v7(ts);
    let at = time_of_uuid(&id).unwrap_or(at);
    (format!("{PREFIX}{}", id.simple()), at)
}

/// The id of a request received at `at_ms` whose last 62 bits are those of
/// `seq` (for synthetic ledgers, which need ids that are stable from one
/// run to the next).
pub fn at_millis(at_ms: i64, seq: u64) -> String {
    let mut tail = [0u8; 10];
    tail[2..].copy_from_slice(&seq.to_be_bytes());
    let id = uuid::Builder::from_unix_timestamp_millis(at_ms.max(0) as u64, &tail).into_uuid();
    format!("{PREFIX}{}", id.simple())
}

fn time_of_uuid(id: &Uuid) -> Option<DateTime<Utc>> {
    let (secs, nanos) = id.get_timestamp()?.to_unix();
    DateTime::from_timestamp(i64::try_from(secs).ok()?, nanos)
}

/// When the request with this id was received, if the id is one the
/// gateway makes.
pub fn time_of(id: &str) -> Option<DateTime<Utc>> {
    let hex = id.strip_prefix(PREFIX)?;
    if hex.len() != 32 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let id = Uuid::try_parse(hex).ok()?;
    if id.get_version_num() != 7 {
        return None;
    }
    time_of_uuid(&id)
}

/// The least id of any request received at or after `t`: ids received
/// before `t` compare below it, ids received at or after it compare at or
/// above it (both as bytes). `t` is rounded up to the millisecond, the
/// precision of the time in an id.
pub fn floor_at(t: DateTime<Utc>) -> String {
    let micros = t.timestamp_micros();
    let ms = micros.div_euclid(1000) + i64::from(micros.rem_euclid(1000) != 0);
    // Before the epoch: no id is earlier than the first millisecond.
    format!("{PREFIX}{:012x}", ms.clamp(0, (1 << 48) - 1))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_skewed_id_carries_the_platforms_time() {
        let (id, at) = new_skewed(-3_600_000);
        let ago = Utc::now() - at;
        assert!(ago > chrono::Duration::minutes(59) && ago < chrono::Duration::minutes(61));
        assert_eq!(time_of(&id), Some(at));
        let (a, _) = new_skewed(-3_600_000);
        assert_ne!(a, id);
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_new_id_carries_its_time() {
        let before = Utc::now().timestamp_millis();
        let (id, at) = new();
        let after = Utc::now().timestamp_millis();
        assert!(id.starts_with("req_") && id.len() == 36, "{id}");
        assert_eq!(time_of(&id), Some(at));
        assert!((before..=after).contains(&at.timestamp_millis()));
        assert_eq!(at.timestamp_subsec_micros() % 1000, 0, "milliseconds");
    }

    #[test]
    fn ids_not_of_this_form_have_no_time() {
        for bad in [
            "",
            "req_",
            "load_2026-01_000000000001",
            "req_0192F4C1A0B07C3E9D2A1B4C5D6E7F80",
            "req_0192f4c1a0b07c3e9d2a1b4c5d6e7f8",
            "req_0192f4c1-a0b0-7c3e-9d2a-1b4c5d6e",
            "req_0192f4c1a0b04c3e9d2a1b4c5d6e7f80",
            // Version 1 and 6 UUIDs carry times too, not in this form.
            "req_0192f4c1a0b01c3e9d2a1b4c5d6e7f80",
            "req_0192f4c1a0b06c3e9d2a1b4c5d6e7f80",
        ] {
            assert_eq!(time_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_floor_rounds_up_to_the_millisecond() {
        let t = DateTime::from_timestamp_micros(1_764_770_000_123_000).unwrap();
        assert_eq!(floor_at(t), format!("req_{:012x}", 1_764_770_000_123u64));
        let t = DateTime::from_timestamp_micros(1_764_770_000_123_001).unwrap();
        assert_eq!(floor_at(t), format!("req_{:012x}", 1_764_770_000_124u64));
        let t = DateTime::from_timestamp_micros(-5).unwrap();
        assert_eq!(floor_at(t), "req_000000000000");
    }

    proptest! {
        /// The id order is the receipt order to the millisecond, and the
        /// floor of a time splits ids exactly where their times do —
        /// computed here from the times, not from the ids' text.
        #[test]
        fn ids_sort_by_time_and_the_floor_splits_them(
            a_ms in 0i64..(1 << 47), b_ms in 0i64..(1 << 47),
            ra: u64, rb: u64, t_us in 0i64..((1i64 << 47) * 1000),
        ) {
            let (a, b) = (at_millis(a_ms, ra), at_millis(b_ms, rb));
            prop_assert_eq!(time_of(&a).map(|t| t.timestamp_millis()), Some(a_ms));
            if a_ms < b_ms {
                prop_assert!(a < b);
            }
            let t = DateTime::from_timestamp_micros(t_us).unwrap();
            let received_at_or_after = a_ms * 1000 >= t_us;
            prop_assert_eq!(a >= floor_at(t), received_at_or_after);
        }

        #[test]
        fn synthetic_ids_are_stable_and_distinct(ms in 0i64..(1 << 47), r in 0u64..(1 << 62)) {
            prop_assert_eq!(at_millis(ms, r), at_millis(ms, r));
            prop_assert_ne!(at_millis(ms, r), at_millis(ms, r ^ 1));
        }
    }
}
