//! How a request gets its quota, as a plan with no IO: after each hold the
//! gateway asks the plan what to do next — clamp the output and hold again,
//! wait in the tenant's queue, borrow from the shared pool and try again,
//! or refuse. The gateway (`crates/gateway/src/admission.rs`) runs the
//! holds, the queue and the borrow; every choice between them is here.

use crate::limits::{LimitKind, ScopeKind};
use crate::pricing::Price;
use crate::reason::Refusal;

/// What the plan needs to know of the request and its tenant's policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    /// Estimated input tokens.
    pub est_in: i64,
    /// Output cap per choice the request would be sent with.
    pub per_choice: i64,
    pub choices: i64,
    /// The tenant lets a refused non-stream request go through clamped
    /// (`clamp_max_tokens`), and this request is neither a stream nor an
    /// embedding.
    pub may_clamp: bool,
    /// The tenant may borrow from the shared pool.
    pub may_borrow: bool,
    /// The least output per choice a clamped request is worth sending with.
    pub min_clamped_per_choice: i64,
}

/// What to do after a hold was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// An in-flight limit (of any scope) is full: wait for a turn in the
    /// tenant's queue, then try again. (A full model pool waits too; the
    /// gateway knows that before any hold.)
    Wait,
    /// Borrow from the shared pool, and try again if it lent something.
    Borrow,
    /// Refuse with the hold's refusal.
    Refuse,
}

/// A request's way to its quota: which retries it has used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    ask: Ask,
    borrowed: bool,
}

/// A monthly budget (tokens or cost) of any scope.
fn is_budget(r: &Refusal) -> bool {
    matches!(r.limit, LimitKind::MonthlyTokens | LimitKind::MonthlyCost)
}

impl Plan {
    pub fn new(ask: Ask) -> Self {
        Plan {
            ask,
            borrowed: false,
        }
    }

    pub fn ask(&self) -> &Ask {
        &self.ask
    }

    /// A budget refused the hold: the output per choice the budget still
    /// covers, when the request may go through clamped and that is less
    /// than it asked for (hold again with it, same request id). None: the
    /// refusal stands.
    pub fn clamp(&self, r: &Refusal, price: &Price) -> Option<i64> {
        if !(self.ask.may_clamp && is_budget(r)) {
            return None;
        }
        crate::pricing::clamped_output_per_choice(
            r.headroom_tokens,
            r.headroom_cost,
            self.ask.est_in,
            price,
            self.ask.choices,
            self.ask.min_clamped_per_choice,
        )
        .filter(|c| *c < self.ask.per_choice)
    }

    /// The hold was refused (after the clamped retry, when there was one):
    /// a full in-flight limit waits for a turn; the tenant's own budget
    /// borrows once, when the tenant may; anything else is refused.
    pub fn after_refusal(&mut self, r: &Refusal) -> Next {
        if r.limit == LimitKind::MaxInflight {
            return Next::Wait;
        }
        if !self.borrowed && self.ask.may_borrow && r.scope == ScopeKind::Tenant && is_budget(r) {
            self.borrowed = true;
            return Next::Borrow;
        }
        Next::Refuse
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask() -> Ask {
        Ask {
            est_in: 100,
            per_choice: 1_000,
            choices: 1,
            may_clamp: true,
            may_borrow: true,
            min_clamped_per_choice: 16,
        }
    }

    fn refusal(scope: ScopeKind, limit: LimitKind, tokens: Option<i64>) -> Refusal {
        Refusal {
            budget: None,
            scope,
            limit,
            retry_after_ms: None,
            headroom_tokens: tokens,
            headroom_cost: None,
        }
    }

    const PRICE: Price = Price {
        input_micro_per_mtok: 0,
        output_micro_per_mtok: 0,
    };

    #[test]
    fn a_budget_refusal_clamps_to_what_is_left_when_the_tenant_allows_it() {
        let r = refusal(ScopeKind::App, LimitKind::MonthlyTokens, Some(600));
        assert_eq!(Plan::new(ask()).clamp(&r, &PRICE), Some(500));
        let no = Ask {
            may_clamp: false,
            ..ask()
        };
        assert_eq!(Plan::new(no).clamp(&r, &PRICE), None);
        // Not less than asked: nothing to clamp.
        let wide = refusal(ScopeKind::App, LimitKind::MonthlyTokens, Some(5_000));
        assert_eq!(Plan::new(ask()).clamp(&wide, &PRICE), None);
        // Too little left to be useful.
        let tight = refusal(ScopeKind::App, LimitKind::MonthlyTokens, Some(110));
        assert_eq!(Plan::new(ask()).clamp(&tight, &PRICE), None);
        // Only budgets clamp.
        let rate = refusal(ScopeKind::Key, LimitKind::InputTpm, Some(600));
        assert_eq!(Plan::new(ask()).clamp(&rate, &PRICE), None);
    }

    #[test]
    fn a_full_inflight_limit_of_any_scope_waits() {
        for scope in [ScopeKind::Tenant, ScopeKind::App, ScopeKind::Key] {
            let r = refusal(scope, LimitKind::MaxInflight, None);
            assert_eq!(Plan::new(ask()).after_refusal(&r), Next::Wait);
        }
    }

    #[test]
    fn the_tenants_budget_borrows_once_then_refuses() {
        let r = refusal(ScopeKind::Tenant, LimitKind::MonthlyCost, None);
        let mut p = Plan::new(ask());
        assert_eq!(p.after_refusal(&r), Next::Borrow);
        assert_eq!(p.after_refusal(&r), Next::Refuse);
        let mut no = Plan::new(Ask {
            may_borrow: false,
            ..ask()
        });
        assert_eq!(no.after_refusal(&r), Next::Refuse);
    }

    #[test]
    fn other_refusals_are_final() {
        for (scope, limit) in [
            (ScopeKind::App, LimitKind::MonthlyTokens),
            (ScopeKind::Key, LimitKind::MonthlyCost),
            (ScopeKind::Tenant, LimitKind::Rpm),
            (ScopeKind::Tenant, LimitKind::InputTpm),
        ] {
            let mut p = Plan::new(ask());
            assert_eq!(
                p.after_refusal(&refusal(scope, limit, None)),
                Next::Refuse,
                "{scope:?} {limit:?}"
            );
        }
    }
}
