//! The replica-local half of the two-level bucket (docs/design.md §4, "Leases").
//!
//! A replica holds a *lease* in Redis: one atomic hold of a chunk of a scope
//! chain's (tenant, app, key) budget, rate-bucket capacity and in-flight
//! slots. It admits requests from that chunk without asking Redis, and tells
//! Redis what they really used in batches. This module is the arithmetic of
//! the local pools and of how large a chunk to ask for; the IO lives in the
//! `quota` crate.
//!
//! Invariant kept by [`Pools`]: a request is admitted only when every pool
//! covers its estimate, so what is admitted from a lease never exceeds what
//! the lease holds in Redis (an actual use above its estimate is the one way
//! past it, and Redis records it as an overrun, as on the per-request path).

/// What one request takes from a lease: its estimate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Need {
    pub input: i64,
    pub output: i64,
    pub cost: i64,
}

impl Need {
    pub fn tokens(&self) -> i64 {
        self.input + self.output
    }
}

/// An amount of every dimension a lease carries, in the order the lease
/// scripts take them: tokens, cost (micro-USD), in-flight slots, requests
/// (RPM bucket), input tokens (input-TPM bucket), output tokens (output-TPM
/// bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Chunk {
    pub tokens: i64,
    pub cost: i64,
    pub slots: i64,
    pub requests: i64,
    pub input: i64,
    pub output: i64,
}

impl Chunk {
    /// What admitting one request takes.
    pub fn of(n: &Need) -> Chunk {
        Chunk {
            tokens: n.tokens(),
            cost: n.cost,
            slots: 1,
            requests: 1,
            input: n.input,
            output: n.output,
        }
    }

    pub fn as_array(&self) -> [i64; 6] {
        [
            self.tokens,
            self.cost,
            self.slots,
            self.requests,
            self.input,
            self.output,
        ]
    }

    pub fn from_array(a: [i64; 6]) -> Chunk {
        Chunk {
            tokens: a[0],
            cost: a[1],
            slots: a[2],
            requests: a[3],
            input: a[4],
            output: a[5],
        }
    }

    fn zip(&self, o: &Chunk, f: impl Fn(i64, i64) -> i64) -> Chunk {
        let (a, b) = (self.as_array(), o.as_array());
        Chunk::from_array(std::array::from_fn(|i| f(a[i], b[i])))
    }

    /// Every dimension at least `o`'s.
    pub fn covers(&self, o: &Chunk) -> bool {
        self.as_array()
            .iter()
            .zip(o.as_array())
            .all(|(a, b)| *a >= b)
    }

    /// Per dimension, how much `self` lacks to cover `need` (0 where it does).
    pub fn shortfall(&self, need: &Chunk) -> Chunk {
        need.zip(self, |n, have| (n - have).max(0))
    }

    pub fn max(&self, o: &Chunk) -> Chunk {
        self.zip(o, i64::max)
    }
}

/// What is left of a lease on this replica. Tokens, cost and the TPM pools
/// can go below zero when a request used more than its estimate; nothing
/// more is admitted until a grant or the overrun bookkeeping covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pools(pub Chunk);

impl Pools {
    /// All or nothing: takes the request's estimate from every pool, or
    /// nothing when one of them cannot cover it.
    pub fn admit(&mut self, n: &Need) -> bool {
        let want = Chunk::of(n);
        if !self.0.covers(&want) {
            return false;
        }
        self.0 = self.0.zip(&want, |a, b| a - b);
        true
    }

    /// The request consumed nothing: everything but its request count comes
    /// back (a refused request still counted against the RPM, as on the
    /// per-request path).
    pub fn release(&mut self, n: &Need) {
        let mut back = Chunk::of(n);
        back.requests = 0;
        self.0 = self.0.zip(&back, |a, b| a + b);
    }

    /// The request finished having used `actual`: its slot and what its
    /// estimate over-took come back; what it used beyond it is taken.
    pub fn settle(&mut self, n: &Need, actual: &Need) {
        let c = &mut self.0;
        c.tokens += n.tokens() - actual.tokens();
        c.cost += n.cost - actual.cost;
        c.slots += 1;
        c.input += n.input - actual.input;
        c.output += n.output - actual.output;
    }

    pub fn grant(&mut self, g: &Chunk) {
        self.0 = self.0.zip(g, |a, b| a + b);
    }

    /// Redis booked this much of a batch as overrun (the lease had run dry):
    /// it was never taken from the lease's hold, so the local view gets it
    /// back and matches Redis again.
    pub fn overrun_booked(&mut self, tokens: i64, cost: i64) {
        self.0.tokens += tokens;
        self.0.cost += cost;
    }

    /// Takes out everything not promised to a request (the positive part
    /// of every pool): what a lease can give back now.
    pub fn take_free(&mut self) -> Chunk {
        let free = self.0.zip(&Chunk::default(), |a, _| a.max(0));
        self.0 = self.0.zip(&free, |a, b| a - b);
        free
    }

    /// Rate-bucket capacity not used, given back when the lease returns.
    pub fn unused_rates(&self) -> (i64, i64, i64) {
        (
            self.0.requests.max(0),
            self.0.input.max(0),
            self.0.output.max(0),
        )
    }
}

/// A lease takes at most this share of a budget's headroom (what the limit
/// leaves after `used + held`): 1/4. Several replicas can each lease, and
/// what is left for the per-request path near the limit stays large.
pub const BUDGET_SHARE_DIVISOR: i64 = 4;
/// ... and at most half of what a rate bucket or the free in-flight slots
/// hold at the moment.
pub const RATE_SHARE_DIVISOR: i64 = 2;

/// What the lease scripts grant for one dimension: what was asked, capped
/// by a share of the headroom, or nothing when that share cannot cover the
/// minimum (then the scope is near its limit: per-request path). Mirrors
/// `grant()` in `crates/quota/lua/lease_acquire.lua`.
pub fn grant(want: i64, headroom: Option<i64>, divisor: i64, min: i64) -> Option<i64> {
    let cap = match headroom {
        None => want,
        Some(h) => want.min(h.max(0) / divisor.max(1)),
    };
    (cap >= min).then_some(cap.max(0))
}

/// Recent demand of one scope chain on this replica: admission rate, mean
/// request, peak concurrency. Chunks are sized from it.
#[derive(Debug, Clone, Default)]
pub struct Demand {
    /// Requests per second, smoothed.
    rate: f64,
    avg_input: f64,
    avg_output: f64,
    avg_cost: f64,
    window_start_ms: i64,
    count: u32,
    window_peak: i64,
    peak: i64,
}

/// Demand is measured over windows this long.
const WINDOW_MS: i64 = 100;

impl Demand {
    pub fn record(&mut self, n: &Need, inflight: i64, now_ms: i64) {
        self.roll(now_ms);
        self.count += 1;
        self.window_peak = self.window_peak.max(inflight);
        self.peak = self.peak.max(inflight);
        let ew = |avg: &mut f64, v: i64| {
            *avg = if *avg == 0.0 {
                v as f64
            } else {
                0.9 * *avg + 0.1 * v as f64
            }
        };
        ew(&mut self.avg_input, n.input);
        ew(&mut self.avg_output, n.output);
        ew(&mut self.avg_cost, n.cost);
    }

    fn roll(&mut self, now_ms: i64) {
        if self.window_start_ms == 0 {
            self.window_start_ms = now_ms;
            return;
        }
        let elapsed = now_ms - self.window_start_ms;
        if elapsed < WINDOW_MS {
            return;
        }
        let inst = self.count as f64 * 1000.0 / elapsed as f64;
        self.rate = if self.rate == 0.0 {
            inst
        } else {
            0.5 * self.rate + 0.5 * inst
        };
        // Peak concurrency decays by half per idle window.
        self.peak = self.window_peak.max(self.peak / 2);
        self.window_peak = 0;
        self.count = 0;
        self.window_start_ms = now_ms;
    }

    /// Requests per second, smoothed.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// The chunk to ask for: `horizon_ms` of the recent admission rate (at
    /// least one request, at most `max_requests`), of requests like the
    /// recent ones and never smaller than `floor`; slots for the recent peak
    /// concurrency and half again.
    pub fn chunk(&self, horizon_ms: i64, max_requests: i64, floor: &Need) -> Chunk {
        let reqs =
            ((self.rate * horizon_ms as f64 / 1000.0).ceil() as i64).clamp(1, max_requests.max(1));
        let per = |avg: f64, floor: i64| (avg.ceil() as i64).max(floor);
        let input = reqs * per(self.avg_input, floor.input);
        let output = reqs * per(self.avg_output, floor.output);
        Chunk {
            tokens: input + output,
            cost: reqs * per(self.avg_cost, floor.cost),
            slots: (self.peak + self.peak / 2 + 1).clamp(1, 4096),
            requests: reqs,
            input,
            output,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(i: i64, o: i64, c: i64) -> Need {
        Need {
            input: i,
            output: o,
            cost: c,
        }
    }

    #[test]
    fn admission_is_all_or_nothing_and_never_past_the_pools() {
        let mut p = Pools(Chunk {
            tokens: 100,
            cost: 50,
            slots: 2,
            requests: 10,
            input: 60,
            output: 60,
        });
        assert!(p.admit(&need(20, 30, 10)));
        assert!(p.admit(&need(20, 30, 10)));
        let before = p;
        // Tokens would cover it, the slots do not.
        assert!(!p.admit(&need(1, 1, 1)));
        assert_eq!(p, before, "a refusal changes nothing");
        p.release(&need(20, 30, 10));
        assert_eq!(p.0.slots, 1);
        assert_eq!(p.0.requests, 8, "a released request still counted");
        assert_eq!(p.0.tokens, 50);
    }

    #[test]
    fn a_settle_returns_the_slot_and_the_over_estimate() {
        let mut p = Pools(Chunk {
            tokens: 100,
            cost: 100,
            slots: 1,
            requests: 1,
            input: 50,
            output: 50,
        });
        let n = need(10, 40, 20);
        assert!(p.admit(&n));
        p.settle(&n, &need(8, 20, 11));
        assert_eq!(
            p.0,
            Chunk {
                tokens: 72,
                cost: 89,
                slots: 1,
                requests: 0,
                input: 42,
                output: 30
            }
        );
        // Above the estimate: the pools go below zero and admit nothing.
        let mut q = Pools(Chunk::of(&n));
        assert!(q.admit(&n));
        q.settle(&n, &need(10, 60, 30));
        assert_eq!(q.0.tokens, -20);
        assert!(!q.admit(&need(1, 0, 0)));
        q.overrun_booked(20, 10);
        assert_eq!((q.0.tokens, q.0.cost), (0, 0));
    }

    #[test]
    fn a_shrink_gives_back_only_what_no_request_holds() {
        let mut p = Pools(Chunk {
            tokens: 100,
            cost: 10,
            slots: 3,
            requests: 5,
            input: 40,
            output: 60,
        });
        assert!(p.admit(&need(10, 20, 4)));
        p.0.output = -5; // an overrun elsewhere
        let free = p.take_free();
        assert_eq!(
            free,
            Chunk {
                tokens: 70,
                cost: 6,
                slots: 2,
                requests: 4,
                input: 30,
                output: 0
            }
        );
        assert_eq!(p.0.output, -5);
        assert_eq!(p.0.tokens, 0);
        // The request in flight settles against what is left.
        p.settle(&need(10, 20, 4), &need(10, 10, 3));
        assert_eq!((p.0.tokens, p.0.slots), (10, 1));
    }

    #[test]
    fn grants_shrink_near_the_limit_down_to_the_per_request_path() {
        // Far from the limit: what was asked.
        assert_eq!(grant(1000, Some(1_000_000), 4, 30), Some(1000));
        // Unlimited: what was asked.
        assert_eq!(grant(1000, None, 4, 30), Some(1000));
        // Nearer: a quarter of the headroom.
        assert_eq!(grant(1000, Some(2000), 4, 30), Some(500));
        // A quarter cannot cover one request: per-request path.
        assert_eq!(grant(1000, Some(100), 4, 30), None);
        assert_eq!(grant(1000, Some(-5), 4, 0), Some(0));
        // Nothing needed in this dimension, nothing left: a zero grant is fine.
        assert_eq!(grant(10, Some(1), 2, 0), Some(0));
    }

    #[test]
    fn chunks_follow_the_admission_rate() {
        let mut d = Demand::default();
        let n = need(10, 20, 5);
        // 1000 requests/s for half a second, 8 in flight.
        for i in 0..500 {
            d.record(&n, 8, 1_000 + i);
        }
        assert!((d.rate() - 1000.0).abs() < 50.0, "{}", d.rate());
        let c = d.chunk(250, 10_000, &n);
        assert!((240..=260).contains(&c.requests), "{c:?}");
        assert_eq!(c.tokens, c.requests * 30);
        assert_eq!(c.cost, c.requests * 5);
        assert_eq!(c.slots, 13);
        // Capped, and never below the request that asks.
        assert_eq!(d.chunk(250, 10, &n).requests, 10);
        let big = need(1000, 1000, 1000);
        let c = d.chunk(250, 1, &big);
        assert_eq!((c.requests, c.tokens, c.cost), (1, 2000, 1000));
        // No history: one request's worth.
        let c = Demand::default().chunk(250, 100, &n);
        assert_eq!((c.requests, c.tokens, c.slots), (1, 30, 1));
    }
}
