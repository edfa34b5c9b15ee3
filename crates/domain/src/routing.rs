//! Routing one model's requests over its deployments: the weighted pick
//! among the healthy deployments of the best priority, the health state
//! machine of one deployment (passive ejection, back-off, half-open probe,
//! `Retry-After` parking) and the retry plan before the first byte.
//!
//! Time is a plain millisecond count from any monotonic origin the caller
//! chooses, so every rule here is testable without a clock. Nothing here
//! allocates: the gateway runs it on every request.

use std::time::Duration;

/// What the picker needs to know of one deployment right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Relative share of traffic among its priority; 0 takes none.
    pub weight: u32,
    /// 0 is the best; a higher number is a fallback for the ones above it.
    pub priority: u32,
    /// Healthy (or due for its half-open probe), not parked, enabled and
    /// under its in-flight cap.
    pub usable: bool,
}

/// Most deployments one model may have: a request's tried set is a `u64`.
pub const MAX_DEPLOYMENTS: usize = 64;

/// The deployment to send to: among the usable deployments not in
/// `tried` (a bit per index) of the best priority present, one chosen with
/// probability proportional to its weight, `roll` being a uniform random
/// number. `None` when no deployment is usable.
pub fn pick(
    n: usize,
    candidate: impl Fn(usize) -> Candidate,
    tried: u64,
    roll: u64,
) -> Option<usize> {
    let n = n.min(MAX_DEPLOYMENTS);
    let open = |i: usize| tried & (1u64 << i) == 0;
    let mut best: Option<u32> = None;
    let mut total: u64 = 0;
    for i in (0..n).filter(|&i| open(i)) {
        let c = candidate(i);
        if !c.usable || c.weight == 0 {
            continue;
        }
        match best {
            Some(p) if c.priority > p => {}
            Some(p) if c.priority == p => total += u64::from(c.weight),
            _ => {
                best = Some(c.priority);
                total = u64::from(c.weight);
            }
        }
    }
    let best = best?;
    let mut at = roll % total;
    for i in (0..n).filter(|&i| open(i)) {
        let c = candidate(i);
        if !c.usable || c.weight == 0 || c.priority != best {
            continue;
        }
        let w = u64::from(c.weight);
        if at < w {
            return Some(i);
        }
        at -= w;
    }
    None
}

/// A well-spread 64-bit number from a counter (splitmix64): the roll of
/// `pick`, cheap and good enough for shares of traffic.
pub fn spread(counter: u64) -> u64 {
    let mut z = counter.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// When a deployment is taken out of rotation and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthPolicy {
    /// Consecutive failures that eject a deployment.
    pub eject_after: u32,
    /// The first ejection lasts this long; each ejection that follows a
    /// failed probe lasts twice the one before, up to `max_ejection_ms`.
    pub base_ejection_ms: u64,
    pub max_ejection_ms: u64,
    /// A half-open probe that has not reported within this long (its
    /// request was dropped) lets another request probe.
    pub probe_grace_ms: u64,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            eject_after: 3,
            base_ejection_ms: 5_000,
            max_ejection_ms: 60_000,
            probe_grace_ms: 30_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// In rotation.
    Healthy,
    /// Out of rotation until `until`; then one request probes it.
    Ejected { until: u64 },
    /// One request is probing it; the others stay away until it reports
    /// (or `until`, when another may probe).
    Probing { until: u64 },
}

/// One deployment's health. Failures are connect errors, timeouts to the
/// response headers and 5xx answers; a 429 parks the deployment instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub state: State,
    /// Consecutive failures since the last success.
    pub failures: u32,
    /// Ejections since the last success (the back-off's exponent).
    pub ejections: u32,
    /// A provider's `Retry-After`: no request before this.
    pub parked_until: u64,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            state: State::Healthy,
            failures: 0,
            ejections: 0,
            parked_until: 0,
        }
    }
}

/// Whether a deployment may take a request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Yes, as the half-open probe: call `Health::begin_probe`.
    Probe,
    No,
}

impl Health {
    pub fn admits(&self, now: u64) -> Admit {
        if now < self.parked_until {
            return Admit::No;
        }
        match self.state {
            State::Healthy => Admit::Yes,
            State::Ejected { until } | State::Probing { until } if now >= until => Admit::Probe,
            _ => Admit::No,
        }
    }

    /// This request is the probe; false when another took it first.
    pub fn begin_probe(&mut self, now: u64, p: &HealthPolicy) -> bool {
        if self.admits(now) != Admit::Probe {
            return false;
        }
        self.state = State::Probing {
            until: now.saturating_add(p.probe_grace_ms),
        };
        true
    }

    /// An answer (headers with a status below 500, 429 aside): back in
    /// rotation, the back-off forgotten.
    pub fn on_success(&mut self) {
        *self = Health {
            parked_until: self.parked_until,
            ..Health::default()
        };
    }

    /// A failure; true when it ejected the deployment (a failed probe
    /// always does, for twice as long as the ejection before).
    pub fn on_failure(&mut self, now: u64, p: &HealthPolicy) -> bool {
        self.failures = self.failures.saturating_add(1);
        let eject = match self.state {
            State::Probing { .. } => true,
            State::Healthy => self.failures >= p.eject_after.max(1),
            // Requests sent before the ejection report late: no new ejection.
            State::Ejected { .. } => false,
        };
        if eject {
            let backoff = p
                .base_ejection_ms
                .saturating_mul(1u64 << self.ejections.min(20))
                .min(p.max_ejection_ms);
            self.ejections = self.ejections.saturating_add(1);
            self.state = State::Ejected {
                until: now.saturating_add(backoff),
            };
        }
        eject
    }

    /// A provider's 429: nothing more to it until `Retry-After` has passed.
    /// A probe that met it is over (the deployment answers; it is busy).
    pub fn park(&mut self, now: u64, retry_after_ms: u64) {
        self.parked_until = self.parked_until.max(now.saturating_add(retry_after_ms));
        if let State::Probing { .. } = self.state {
            self.state = State::Healthy;
            self.failures = 0;
        }
    }
}

/// One deployment's health as operators read it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeploymentHealth {
    pub name: String,
    /// `healthy`, `ejected`, `probing` or `parked` (a 429's `Retry-After`).
    pub state: &'static str,
    pub consecutive_failures: u32,
    pub ejections: u32,
    pub inflight: u32,
    /// Until it may be tried again (0 when it may now).
    pub back_in_ms: u64,
}

impl Health {
    pub fn describe(&self, name: &str, inflight: u32, now: u64) -> DeploymentHealth {
        let parked = self.parked_until.saturating_sub(now);
        let (state, until) = match self.state {
            State::Healthy if parked > 0 => ("parked", self.parked_until),
            State::Healthy => ("healthy", 0),
            State::Ejected { until } => ("ejected", until),
            State::Probing { .. } => ("probing", 0),
        };
        DeploymentHealth {
            name: name.to_string(),
            state,
            consecutive_failures: self.failures,
            ejections: self.ejections,
            inflight,
            back_in_ms: until.max(self.parked_until).saturating_sub(now),
        }
    }
}

/// What the control plane can see of the data plane's deployment health
/// (this replica's view: health is kept per replica).
pub trait HealthView: Send + Sync {
    /// The deployments of `model` this replica knows, in name order.
    fn deployments(&self, model: &str) -> Vec<DeploymentHealth>;
}

/// How one attempt on one deployment ended, before any byte reached the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// Response headers with a 2xx status.
    Answered,
    /// No connection (refused, reset, DNS, TLS).
    ConnectFailed,
    /// No response headers within the per-attempt timeout.
    TimedOut,
    /// 429, with the provider's `Retry-After` in ms when it sent one.
    RateLimited { retry_after_ms: Option<u64> },
    /// Any other status (4xx: the request's fault, 5xx: the deployment's).
    Status(u16),
}

impl Attempt {
    /// Another deployment may well answer where this one did not.
    pub fn retryable(self) -> bool {
        match self {
            Attempt::ConnectFailed | Attempt::TimedOut | Attempt::RateLimited { .. } => true,
            Attempt::Status(s) => s >= 500,
            Attempt::Answered => false,
        }
    }

    /// Counts against the deployment's health (a 429 parks instead; a 4xx
    /// is the request's fault, not the deployment's).
    pub fn is_failure(self) -> bool {
        matches!(self, Attempt::ConnectFailed | Attempt::TimedOut)
            || matches!(self, Attempt::Status(s) if s >= 500)
    }
}

/// Bounds on retrying one request before its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_tries: u32,
    /// No new attempt starts after this much time since the first.
    pub total: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_tries: 3,
            total: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Whether to try another deployment after attempt number `tries`
    /// (1-based) ended in `last`, `elapsed` after the first began.
    pub fn again(&self, tries: u32, elapsed: Duration, last: Attempt) -> bool {
        last.retryable() && tries < self.max_tries && elapsed < self.total
    }

    /// The per-attempt timeout to response headers: `per_attempt`, cut to
    /// what is left of the total deadline (never below `floor`, so a last
    /// attempt is not doomed from the start).
    pub fn attempt_timeout(
        &self,
        per_attempt: Duration,
        elapsed: Duration,
        floor: Duration,
    ) -> Duration {
        per_attempt
            .min(self.total.saturating_sub(elapsed))
            .max(floor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(weight: u32, priority: u32, usable: bool) -> Candidate {
        Candidate {
            weight,
            priority,
            usable,
        }
    }

    fn shares(cands: &[Candidate], tried: u64, rolls: u64) -> Vec<u64> {
        let mut n = vec![0u64; cands.len()];
        for r in 0..rolls {
            if let Some(i) = pick(cands.len(), |i| cands[i], tried, spread(r)) {
                n[i] += 1;
            }
        }
        n
    }

    #[test]
    fn weights_share_the_traffic_of_the_best_priority() {
        let cands = [c(3, 0, true), c(1, 0, true), c(5, 1, true)];
        let n = shares(&cands, 0, 40_000);
        assert_eq!(n[2], 0, "a lower priority is only a fallback");
        let share = n[0] as f64 / 40_000.0;
        assert!((share - 0.75).abs() < 0.01, "{n:?}");
    }

    #[test]
    fn a_lower_priority_serves_when_the_best_is_unusable_or_tried() {
        let cands = [c(3, 0, false), c(1, 0, false), c(5, 1, true)];
        assert_eq!(pick(3, |i| cands[i], 0, 7), Some(2));
        let cands = [c(3, 0, true), c(1, 1, true)];
        assert_eq!(pick(2, |i| cands[i], 0b01, 7), Some(1));
        assert_eq!(pick(2, |i| cands[i], 0b11, 7), None);
    }

    #[test]
    fn nothing_usable_picks_nothing_and_zero_weight_takes_nothing() {
        let cands = [c(3, 0, false), c(0, 0, true)];
        assert_eq!(pick(2, |i| cands[i], 0, 1), None);
        assert_eq!(pick(0, |_| unreachable!(), 0, 1), None);
        let cands = [c(0, 0, true), c(2, 0, true)];
        assert_eq!(shares(&cands, 0, 100), vec![0, 100]);
    }

    #[test]
    fn consecutive_failures_eject_and_the_back_off_doubles_after_a_failed_probe() {
        let p = HealthPolicy {
            eject_after: 3,
            base_ejection_ms: 1_000,
            max_ejection_ms: 3_000,
            probe_grace_ms: 500,
        };
        let mut h = Health::default();
        assert!(!h.on_failure(0, &p));
        assert!(!h.on_failure(1, &p));
        assert_eq!(h.admits(1), Admit::Yes);
        assert!(h.on_failure(2, &p), "the third failure ejects");
        assert_eq!(h.admits(1_001), Admit::No);
        assert_eq!(h.admits(1_002), Admit::Probe);
        assert!(h.begin_probe(1_002, &p));
        assert!(!h.begin_probe(1_002, &p), "one probe at a time");
        assert_eq!(h.admits(1_100), Admit::No);
        assert!(h.on_failure(1_100, &p), "a failed probe ejects again");
        assert_eq!(h.state, State::Ejected { until: 3_100 });
        h.begin_probe(3_100, &p);
        h.on_failure(3_100, &p);
        assert_eq!(h.state, State::Ejected { until: 6_100 }, "capped at max");
        h.begin_probe(6_100, &p);
        h.on_success();
        assert_eq!(h, Health::default());
    }

    #[test]
    fn a_success_resets_the_count_and_late_failures_do_not_re_eject() {
        let p = HealthPolicy::default();
        let mut h = Health::default();
        h.on_failure(0, &p);
        h.on_failure(0, &p);
        h.on_success();
        assert!(!h.on_failure(0, &p), "the count restarted");
        let mut h = Health::default();
        for _ in 0..3 {
            h.on_failure(0, &p);
        }
        let ejected = h.state;
        assert!(
            !h.on_failure(10, &p),
            "a late report of a request sent before"
        );
        assert_eq!(h.state, ejected);
    }

    #[test]
    fn a_lost_probe_lets_another_request_probe_after_its_grace() {
        let p = HealthPolicy {
            probe_grace_ms: 100,
            ..HealthPolicy::default()
        };
        let mut h = Health {
            state: State::Ejected { until: 10 },
            ..Health::default()
        };
        assert!(h.begin_probe(10, &p));
        assert_eq!(h.admits(109), Admit::No);
        assert_eq!(h.admits(110), Admit::Probe);
    }

    #[test]
    fn retry_after_parks_the_deployment_until_then() {
        let mut h = Health::default();
        h.park(1_000, 2_000);
        assert_eq!(h.admits(2_999), Admit::No);
        assert_eq!(h.admits(3_000), Admit::Yes);
        h.park(1_000, 10);
        assert_eq!(h.parked_until, 3_000, "a shorter park never shortens one");
        assert_eq!(h.failures, 0, "a 429 is no failure");
    }

    #[test]
    fn what_is_retried_and_what_counts_as_a_failure() {
        let rl = Attempt::RateLimited {
            retry_after_ms: None,
        };
        for a in [
            Attempt::ConnectFailed,
            Attempt::TimedOut,
            Attempt::Status(500),
            Attempt::Status(503),
            rl,
        ] {
            assert!(a.retryable(), "{a:?}");
        }
        for a in [
            Attempt::Answered,
            Attempt::Status(400),
            Attempt::Status(401),
            Attempt::Status(404),
        ] {
            assert!(!a.retryable(), "{a:?}");
        }
        assert!(!rl.is_failure());
        assert!(Attempt::Status(502).is_failure() && !Attempt::Status(422).is_failure());
    }

    #[test]
    fn retries_are_bounded_by_tries_and_the_total_deadline() {
        let p = RetryPolicy {
            max_tries: 3,
            total: Duration::from_secs(10),
        };
        let s = Duration::from_secs;
        assert!(p.again(1, s(0), Attempt::ConnectFailed));
        assert!(p.again(2, s(9), Attempt::Status(502)));
        assert!(!p.again(3, s(0), Attempt::ConnectFailed), "tries");
        assert!(!p.again(1, s(10), Attempt::ConnectFailed), "deadline");
        assert!(
            !p.again(1, s(0), Attempt::Status(400)),
            "the request's fault"
        );
        assert_eq!(
            p.attempt_timeout(s(5), s(8), Duration::from_millis(100)),
            s(2)
        );
        assert_eq!(
            p.attempt_timeout(s(5), s(12), Duration::from_millis(100)),
            Duration::from_millis(100)
        );
    }
}
