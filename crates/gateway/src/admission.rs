//! The one place that decides how a request reserves quota
//! (`gateway.admission`): the hold engine's hold / extend / settle / release,
//! per request or from this replica's leases (docs/design.md §4, "Leases — the fast
//! path", docs/leases.md). Same calls, same outcomes, either way.
//!
//! - `per_request`: one Lua hold and one Lua settle per request.
//! - `lease`: non-stream requests are admitted from a lease held by this
//!   replica and settled against it in batches; a scope near its limit, and
//!   every stream (held slice by slice as it flows, docs/design.md §6), take the
//!   per-request path.
//! - `off`: no enforcement at all, for the benchmark's ablation only; the
//!   server refuses it unless `gateway.bench_unenforced_ok` is also set.

use crate::metrics_names as m;
use quota::{
    EndUserScope, ExtendOutcome, ExtendRequest, HoldOutcome, HoldRequest, LeaseAdmit, LeaseBook,
    LeaseTuning, LedgerSource, QuotaEngine, QuotaError, SettleOutcome, SettleRequest,
};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmissionMode {
    Lease,
    PerRequest,
    /// Benchmark ablation: nothing is held, nothing enforced.
    Off,
}

impl AdmissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AdmissionMode::Lease => "lease",
            AdmissionMode::PerRequest => "per_request",
            AdmissionMode::Off => "off",
        }
    }
}

pub struct Admission {
    mode: AdmissionMode,
    quota: Arc<QuotaEngine>,
    leases: Option<Arc<LeaseBook>>,
}

impl Admission {
    pub fn new(mode: AdmissionMode, quota: Arc<QuotaEngine>, tuning: LeaseTuning) -> Self {
        let leases =
            (mode == AdmissionMode::Lease).then(|| LeaseBook::start(quota.clone(), tuning));
        if mode == AdmissionMode::Off {
            tracing::error!("gateway.admission = \"off\": NO BUDGET, RATE OR CONCURRENCY LIMIT IS ENFORCED (benchmark ablation only)");
        }
        Self {
            mode,
            quota,
            leases,
        }
    }

    pub fn mode(&self) -> AdmissionMode {
        self.mode
    }

    /// The lease book, when leasing.
    pub fn leases(&self) -> Option<&Arc<LeaseBook>> {
        self.leases.as_ref()
    }

    pub async fn hold(
        &self,
        req: &HoldRequest<'_>,
        ledger: &impl LedgerSource,
        stream: bool,
    ) -> Result<HoldOutcome, QuotaError> {
        self.hold_with(req, None, ledger, stream).await
    }

    /// A hold with the end user's scope. A lease carries the tenant, app
    /// and key chain only, so a request whose app limits its end users is
    /// held per request even in `lease` mode (docs/leases.md).
    pub async fn hold_with(
        &self,
        req: &HoldRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
        ledger: &impl LedgerSource,
        stream: bool,
    ) -> Result<HoldOutcome, QuotaError> {
        let leasable = !stream && end_user.is_none();
        match (&self.leases, self.mode) {
            (_, AdmissionMode::Off) => {
                metrics::counter!(m::ADMISSIONS, "path" => "off").increment(1);
                return Ok(HoldOutcome::Admitted {
                    remaining_requests: None,
                    remaining_tokens: None,
                });
            }
            (Some(book), _) if leasable => {
                if let LeaseAdmit::Admitted {
                    remaining_requests,
                    remaining_tokens,
                } = book.admit(req, ledger).await?
                {
                    metrics::counter!(m::ADMISSIONS, "path" => "lease").increment(1);
                    return Ok(HoldOutcome::Admitted {
                        remaining_requests,
                        remaining_tokens,
                    });
                }
            }
            _ => {}
        }
        let out = self.quota.hold_with(req, end_user, ledger).await;
        if let Ok(HoldOutcome::Admitted { .. }) = out {
            metrics::counter!(m::ADMISSIONS, "path" => "per_request").increment(1);
        }
        out
    }

    /// Streams are always held per request, so extends are too.
    pub async fn extend(
        &self,
        req: &ExtendRequest<'_>,
        end_user: Option<EndUserScope<'_>>,
    ) -> Result<ExtendOutcome, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(ExtendOutcome::Extended {
                remaining_tokens: None,
            });
        }
        self.quota.extend_with(req, end_user).await
    }

    /// `end_user`: the request's end user, if any (its scope is booked
    /// when the hold took it).
    pub async fn settle(
        &self,
        req: &SettleRequest<'_>,
        end_user: Option<&str>,
    ) -> Result<SettleOutcome, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(SettleOutcome::Settled {
                overrun_tokens: 0,
                overrun_cost: 0,
            });
        }
        if let Some(book) = &self.leases {
            if let Some(answer) = book.settle_request(req) {
                // The flusher answers once the batch is in Redis; it retries
                // a batch until Redis takes it, so it never fails. If it is
                // gone (runtime shutting down), the event may be in the
                // outbox: the sweeper stores it, never twice.
                return Ok(answer.await.unwrap_or(SettleOutcome::AlreadyClosed {
                    state: "lease_flusher_stopped".into(),
                }));
            }
        }
        self.quota.settle_with(req, end_user).await
    }

    #[allow(clippy::too_many_arguments)]
    pub async fn release(
        &self,
        tenant: &str,
        app: &str,
        key: &str,
        month: &str,
        request_id: &str,
        limits: [&domain::Limits; 3],
        end_user: Option<&str>,
    ) -> Result<bool, QuotaError> {
        if self.mode == AdmissionMode::Off {
            return Ok(true);
        }
        if let Some(book) = &self.leases {
            if book.release(request_id) {
                return Ok(true);
            }
        }
        self.quota
            .release_with(tenant, app, key, month, request_id, limits, end_user)
            .await
    }

    /// Returns this replica's leases (graceful shutdown).
    pub async fn shutdown(&self, patience: Duration) {
        if let Some(book) = &self.leases {
            book.shutdown(patience).await;
        }
    }
}
