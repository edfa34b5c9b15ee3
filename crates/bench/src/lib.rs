//! What the bench binaries share.

use std::time::Duration;

/// The `p` quantile (0–1) of `v` in microseconds, nearest rank; 0 when empty.
/// Sorts `v`.
pub fn pct(v: &mut [Duration], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort();
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1;
    v[i].as_secs_f64() * 1e6
}
