//! A request that holds quota. Whatever happens to it — finished, failed
//! upstream, client gone — it is settled or released exactly once: explicitly
//! on the normal paths, and by `Drop` when the handler or stream is dropped
//! (the client disconnected), charging what is known to have been generated.

use crate::catalog::ModelEntry;
use crate::key_index::KeyEntry;
use crate::metrics_names as m;
use crate::Gateway;
use domain::pricing::sheet::{micro_of_pico, PICO_PER_MICRO};
use domain::pricing::PriceSheet;
use domain::usage::{AnomalyKind, Billed, Bound, Breakdown, Reported, UsageAnomaly, UsageEvent};
use quota::{SettleOutcome, SettleRequest};
use std::sync::Arc;
use std::time::Duration;

pub struct HeldRequest {
    pub gw: Arc<Gateway>,
    pub request_id: String,
    pub key: Arc<KeyEntry>,
    pub model: Arc<ModelEntry>,
    pub month: String,
    pub est_input: i64,
    pub est_output: i64,
    pub est_cost: i64,
    /// What its output is held at per million tokens (a stream's
    /// extensions): the dearest price the request can reach.
    pub hold_price: domain::pricing::Price,
    /// The most output the request may produce (its cap times its choices):
    /// a stream's hold is never extended past it.
    pub max_output: i64,
    pub stream: bool,
    pub started_at_ms: i64,
    /// Output tokens counted from stream deltas so far.
    pub counted_output: i64,
    /// Of which audio (chat's `delta.audio.data`): billed at the audio
    /// price when the stream ends without the provider's report.
    pub counted_audio: i64,
    /// The provider's own usage, as reported, once seen.
    pub provider_usage: Option<Reported>,
    /// The model-pool slot this request holds (given back on drop).
    pub slot: Option<crate::sharing::ModelSlot>,
    /// A stream's place among its tenant's open streams: the stream's body
    /// takes it and gives it back when dropped, however it ended.
    pub open_stream: Option<crate::open_streams::OpenStream>,
    /// The deployment that answered, its in-flight slot held until the
    /// request is done (given back on drop).
    pub route: Option<crate::routing::Taken>,
    /// Tags and end user, booked with the usage event.
    pub attribution: domain::attribution::Attribution,
    /// A stream whose last event (chat `[DONE]`, Responses
    /// `response.completed`, Messages `message_stop`) went to the client:
    /// dropped after that, it was delivered whole, not left by its client.
    pub reached_end: bool,
    closed: bool,
}

/// The amounts and outcome a request is settled with.
#[derive(Debug, Clone, Copy)]
pub struct Actual {
    pub input: i64,
    pub output: i64,
    pub status: &'static str,
    /// `provider`, `counted` or `estimated` (recorded on the usage event).
    pub source: &'static str,
    /// Set when the provider's report was overruled by the sanity bound.
    pub anomaly: Option<AnomalyKind>,
    /// Of `output`, the audio the meter counted (a `counted` source only;
    /// 0 otherwise): priced at the audio price.
    pub audio_output: i64,
}

impl HeldRequest {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        gw: Arc<Gateway>,
        request_id: String,
        key: Arc<KeyEntry>,
        model: Arc<ModelEntry>,
        month: String,
        est: (i64, i64, i64),
        stream: bool,
        started_at_ms: i64,
    ) -> Self {
        let hold_price = model.price;
        Self {
            gw,
            request_id,
            key,
            model,
            month,
            est_input: est.0,
            est_output: est.1,
            est_cost: est.2,
            hold_price,
            max_output: est.1,
            stream,
            started_at_ms,
            counted_output: 0,
            counted_audio: 0,
            provider_usage: None,
            slot: None,
            open_stream: None,
            route: None,
            attribution: Default::default(),
            reached_end: false,
            closed: false,
        }
    }

    /// What is known to have been consumed: the provider's count when it
    /// came, else the input estimate and the output counted so far.
    pub fn best_known(&self, status: &'static str) -> Actual {
        self.known().best_known(status)
    }

    /// The most this request may be billed: the input estimate plus its
    /// documented error, and the output cap the provider was sent.
    pub fn bound(&self) -> Bound {
        bound_of(self.price_sheet(), self.est_input, self.max_output)
    }

    /// The price sheet this request is billed by: the one in force when it
    /// was received, its deployment's own where that has one.
    pub fn price_sheet(&self) -> &domain::pricing::PriceSheet {
        let deployment = self.route.as_ref().map(|r| &*r.name);
        self.model.prices.at(self.started_at_ms, deployment)
    }

    /// The provider's report, once seen, as the sanity bound bills it.
    pub fn billed_report(&self) -> Option<Billed> {
        self.known().billed_report()
    }

    /// What a stream the budget cut after `counted` output tokens
    /// delivered is settled at.
    pub fn cut_actual(&self, counted: i64) -> Actual {
        self.known().cut(counted)
    }

    fn known(&self) -> Known<'_> {
        Known {
            stream: self.stream,
            est_input: self.est_input,
            est_output: self.est_output,
            counted_output: self.counted_output,
            counted_audio: self.counted_audio,
            usage: self.provider_usage.as_ref(),
            bound: self.bound(),
        }
    }

    /// Settles in a task of its own: if the caller is cancelled (the client
    /// hung up while we were settling), the settle still completes.
    pub async fn settle(mut self, actual: Actual) {
        self.closed = true;
        let job = SettleJob::from(&mut self, actual);
        let _ = tokio::spawn(job.run()).await;
    }

    /// Settles without anybody waiting (the answer goes out beside it): a
    /// lease-admitted request is finished by its lease's flusher, any other
    /// in a task of its own.
    pub fn settle_in_background(mut self, actual: Actual) {
        self.closed = true;
        let job = SettleJob::from(&mut self, actual);
        if self.gw.admission.leased(&self.request_id) {
            job.settle_leased();
        } else {
            tokio::spawn(job.run());
        }
    }

    pub async fn release(mut self) {
        self.closed = true;
        let release = release_hold(
            self.gw.clone(),
            self.key.clone(),
            self.month.clone(),
            self.request_id.clone(),
            self.attribution.end_user.clone(),
        );
        let _ = tokio::spawn(release).await;
    }
}

/// The most a request may be billed under `sheet`: its input estimate
/// plus the documented error, and the output cap the provider was sent.
fn bound_of(sheet: &PriceSheet, est_input: i64, max_output: i64) -> Bound {
    Bound::for_request(est_input, max_output, |i, o| sheet.worst_cost_micro(i, o))
}

/// What the gateway knows of a request when it settles it.
struct Known<'a> {
    stream: bool,
    est_input: i64,
    est_output: i64,
    counted_output: i64,
    counted_audio: i64,
    usage: Option<&'a Reported>,
    bound: Bound,
}

impl Known<'_> {
    /// The provider's report, once seen, as the sanity bound bills it.
    fn billed_report(&self) -> Option<Billed> {
        let fallback = if self.stream {
            (self.est_input, self.counted_output)
        } else {
            (self.est_input, self.est_output)
        };
        let r = self.usage?;
        Some(domain::usage::bill(r, &self.bound, fallback))
    }

    /// A stream the budget cut: the input reported, else estimated, and
    /// the output `counted` and delivered.
    fn cut(&self, counted: i64) -> Actual {
        Actual {
            input: self.billed_report().map_or(self.est_input, |b| b.input),
            output: counted,
            status: "cut_off",
            source: "counted",
            anomaly: None,
            audio_output: self.counted_audio.min(counted),
        }
    }

    /// What is known to have been consumed: the provider's count when it
    /// came, else the input estimate and the output counted so far.
    fn best_known(&self, status: &'static str) -> Actual {
        if !self.stream && self.usage.is_none() {
            // A non-stream answer is generated whole even when the client
            // leaves: the provider bills it, so does the gateway.
            return Actual {
                input: self.est_input,
                output: self.est_output,
                status,
                source: "estimated",
                anomaly: None,
                audio_output: 0,
            };
        }
        match self.billed_report() {
            Some(b) => Actual {
                input: b.input,
                output: b.output,
                status,
                source: "provider",
                anomaly: b.anomaly,
                audio_output: 0,
            },
            None => Actual {
                input: self.est_input,
                output: self.counted_output,
                status,
                source: "counted",
                anomaly: None,
                audio_output: self.counted_audio.min(self.counted_output),
            },
        }
    }
}

/// A settle's amounts and price: what `actual` books within `bound`, the
/// breakdown it is priced by (the provider's when its totals are billed as
/// reported, else plain input and output — the estimate, the counted
/// output, the sanity bound), its charges and its cost in whole µUSD.
struct Priced {
    input: i64,
    output: i64,
    breakdown: Breakdown,
    plain: Breakdown,
    charges: domain::pricing::Charges,
    cost: i64,
}

fn priced(sheet: &PriceSheet, bound: &Bound, a: &Actual, usage: Option<&Reported>) -> Priced {
    // Every amount within the request's bound, whatever its source.
    let (input, output, _) = bound.clamp(a.input, a.output, 0);
    let plain = Breakdown::plain(input, output);
    // Without the provider's report, what the meter counted: its audio at
    // the audio price (the hold was extended at the dearest output price).
    let counted = (a.audio_output > 0).then(|| Breakdown {
        audio_output: a.audio_output.clamp(0, output),
        ..plain.clone()
    });
    let breakdown = usage
        .filter(|_| a.source == "provider" && a.anomaly.is_none())
        .map(|r| Breakdown::read(&r.raw))
        .filter(|b| b.fits(input, output))
        .or(counted)
        .unwrap_or_else(|| plain.clone());
    let charges = sheet.charges(&breakdown);
    let exact = charges.total_pico();
    let (_, _, cost) = bound.clamp(0, 0, micro_of_pico(exact));
    // Above the bound: billed at the bound, exactly, its components
    // scaled down to it.
    let charges = if cost < micro_of_pico(exact) {
        charges.capped_at(i128::from(cost) * PICO_PER_MICRO)
    } else {
        charges
    };
    Priced {
        input,
        output,
        breakdown,
        plain,
        charges,
        cost,
    }
}

/// What the settle books for a request held under `sheet` — (input,
/// output, cost µUSD) — by the same steps as a [`HeldRequest`]'s settle:
/// the sanity bound, the provider's report (`usage`) or what was counted,
/// its breakdown priced. `counted`: a stream's output counted by its
/// meter, and of it the audio. `cut`: a stream the budget cut, settled at
/// the output counted. For the hold engine's property test
/// (`crate::steps`).
pub fn settle_amounts(
    sheet: &PriceSheet,
    (est_input, est_output, max_output): (i64, i64, i64),
    stream: bool,
    (counted_output, counted_audio): (i64, i64),
    usage: Option<&Reported>,
    cut: bool,
) -> (i64, i64, i64) {
    let known = Known {
        stream,
        est_input,
        est_output,
        counted_output,
        counted_audio,
        usage,
        bound: bound_of(sheet, est_input, max_output),
    };
    let actual = if cut {
        known.cut(counted_output)
    } else {
        known.best_known("ok")
    };
    let p = priced(sheet, &known.bound, &actual, usage);
    (p.input, p.output, p.cost)
}

/// Gives back a hold; harmless when there is none (already closed, or the
/// hold never landed).
pub async fn release_hold(
    gw: Arc<Gateway>,
    key: Arc<KeyEntry>,
    month: String,
    request_id: String,
    end_user: Option<String>,
) {
    let k = &key;
    for attempt in 0..RETRIES {
        let r = gw
            .admission
            .release(
                &k.tenant.id,
                &k.app.id,
                &k.id,
                &month,
                &request_id,
                k.scope_limits(),
                end_user.as_deref(),
            )
            .await;
        match r {
            Ok(_) => {
                gw.queue.slot_freed();
                return;
            }
            Err(e) => {
                metrics::counter!(m::QUOTA_STORE_ERRORS, "op" => "release").increment(1);
                tracing::warn!(request_id = %request_id, attempt, error = %e, "release failed; retrying");
                tokio::time::sleep(backoff(attempt)).await;
            }
        }
    }
    tracing::error!(request_id = %request_id, "release gave up; hold left to the reconciler");
}

/// Retries of a settle or release: 25 ms doubling to 5 s, ~30 minutes in all.
const RETRIES: u32 = 370;

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((25u64 << attempt.min(8)).min(5_000))
}

/// Armed while a hold call is under way: if the call times out or the client
/// goes away before the outcome is known, the hold (if it landed) is released.
pub struct PendingHold {
    pub gw: Arc<Gateway>,
    pub key: Arc<KeyEntry>,
    pub month: String,
    pub request_id: String,
    /// The request's end user (its scope is given back too).
    pub end_user: Option<String>,
    pub armed: bool,
}

impl Drop for PendingHold {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(release_hold(
                self.gw.clone(),
                self.key.clone(),
                std::mem::take(&mut self.month),
                std::mem::take(&mut self.request_id),
                self.end_user.take(),
            ));
        }
    }
}

impl Drop for HeldRequest {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        let status = if self.reached_end {
            "ok"
        } else {
            "client_closed"
        };
        let known = self.best_known(status);
        let job = SettleJob::from(self, known);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(job.run());
        }
    }
}

/// Everything a settle needs, detached from the request so it can outlive it.
struct SettleJob {
    gw: Arc<Gateway>,
    key: Arc<KeyEntry>,
    month: String,
    event: UsageEvent,
    bound: Bound,
}

impl SettleJob {
    fn from(h: &mut HeldRequest, a: Actual) -> Self {
        let bound = h.bound();
        let Priced {
            input,
            output,
            breakdown,
            plain,
            charges,
            cost,
        } = priced(h.price_sheet(), &bound, &a, h.provider_usage.as_ref());
        let cost_pico = i64::try_from(charges.total_pico()).unwrap_or(i64::MAX);
        let anomaly = a.anomaly.map(|k| UsageAnomaly {
            kind: k.as_str().to_string(),
            reported: h
                .provider_usage
                .as_ref()
                .map(|r| r.raw.clone())
                .unwrap_or_default(),
        });
        // The provider's usage object as sent, on every row (not only an
        // anomaly's): moved out of the request, which settles once.
        let raw_usage = h.provider_usage.as_mut().map(Reported::take_sent);
        let est_tokens = h.est_input.saturating_add(h.est_output);
        let now = h.gw.now();
        let event = UsageEvent {
            request_id: h.request_id.clone(),
            tenant_id: h.key.tenant.id.clone(),
            app_id: h.key.app.id.clone(),
            key_id: h.key.id.clone(),
            model: h.model.id.clone(),
            period: h.month.clone(),
            day: h.gw.cfg.clock.day(now),
            input_tokens: input,
            output_tokens: output,
            cost_micro: cost,
            cost_pico,
            est_tokens,
            est_cost_micro: h.est_cost,
            overrun_tokens: (input + output).saturating_sub(est_tokens).max(0),
            overrun_cost_micro: cost.saturating_sub(h.est_cost).max(0),
            status: a.status.to_string(),
            stream: h.stream,
            usage_source: a.source.to_string(),
            replica: h.gw.cfg.replica.clone(),
            started_at_ms: h.started_at_ms,
            settled_at_ms: now.timestamp_millis(),
            deployment: h.route.as_ref().map(|r| r.name.to_string()),
            anomaly,
            breakdown: (breakdown != plain).then_some(breakdown),
            charges: Some(charges),
            raw_usage,
            attribution: h.attribution.clone(),
        };
        Self {
            gw: h.gw.clone(),
            key: h.key.clone(),
            month: h.month.clone(),
            event,
            bound,
        }
    }

    fn request<'a>(&'a self, event_json: &'a str) -> SettleRequest<'a> {
        let e = &self.event;
        SettleRequest {
            request_id: &e.request_id,
            tenant: &e.tenant_id,
            app: &e.app_id,
            key: &e.key_id,
            month: &self.month,
            input_tokens: e.input_tokens,
            output_tokens: e.output_tokens,
            cost: e.cost_micro,
            event_json,
            status: &e.status,
            limits: self.key.scope_limits(),
            bound: self.bound,
        }
    }

    /// A lease-admitted request: queued for its lease's next batch, and
    /// finished in the flusher when the batch is in Redis (the flusher
    /// retries a batch until Redis takes it).
    fn settle_leased(self) {
        let json = self.event.to_json();
        let billable = self.request(&json).billable();
        let rid = self.event.request_id.clone();
        let gw = self.gw.clone();
        let done: quota::SettleDone = Box::new(move |outcome| {
            if let SettleOutcome::Settled { overrun_tokens, .. } = outcome {
                self.settled(overrun_tokens);
            }
        });
        let queued = gw.admission.settle_leased(&rid, billable, json, done);
        debug_assert!(queued, "asked leased() first; one owner settles");
    }

    async fn run(self) {
        let json = self.event.to_json();
        let req = self.request(&json);
        let e = &self.event;
        // Redis may be down for a while: keep retrying (backoff capped at
        // 5 s, for up to half an hour) so the hold does not wait for the
        // stale-hold reconciler's day; then leave it to that reconciler.
        for attempt in 0..RETRIES {
            let end_user = e.attribution.end_user.as_deref();
            match self.gw.admission.settle(&req, end_user).await {
                Ok(SettleOutcome::Settled { overrun_tokens, .. }) => {
                    self.settled(overrun_tokens);
                    return;
                }
                Ok(SettleOutcome::AlreadyClosed { .. }) => return,
                Err(err) => {
                    metrics::counter!(m::QUOTA_STORE_ERRORS, "op" => "settle").increment(1);
                    tracing::warn!(request_id = %e.request_id, attempt, error = %err, "settle failed");
                    tokio::time::sleep(backoff(attempt)).await;
                }
            }
        }
        tracing::error!(request_id = %e.request_id, "settle gave up; hold left to the reconciler");
    }

    /// The usage is in Redis: metrics, the day's cost, and the event to the
    /// ledger writer (moved, not copied: this runs once per request).
    fn settled(self, overrun_tokens: i64) {
        let e = &self.event;
        let meters = self.gw.meters.of(&e.tenant_id, &e.model);
        meters.input_tokens.increment(e.input_tokens as u64);
        meters.output_tokens.increment(e.output_tokens as u64);
        meters.cost.increment(e.cost_micro as u64);
        if overrun_tokens > 0 {
            let labels = [("tenant", e.tenant_id.clone()), ("model", e.model.clone())];
            metrics::counter!(m::OVERRUN_TOKENS, &labels).increment(overrun_tokens as u64);
        }
        if let Some(a) = &e.anomaly {
            crate::anomaly::report(&self.gw, e, a);
        }
        self.gw.queue.slot_freed();
        crate::sharing::count_day_cost(&self.gw, &self.key, &e.day, e.cost_micro);
        self.gw.ledger.submit(self.event);
    }
}
