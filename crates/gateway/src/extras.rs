//! Service tiers and hosted tools at admission (docs/billing.md, "Service
//! tiers and hosted tools"): what the request asks for is read from the
//! client's own body (`domain::extras`), refused when its tenant, app or key
//! may not have it, else priced for the hold by the model's sheet (the one
//! the settle bills by) and the tools' call cap sent to the provider.

use crate::catalog::ModelEntry;
use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use domain::extras::{self, PolicyRefusal, ToolHold};
use domain::pricing::{Price, PriceSheet};
use domain::provider::Dialect;
use domain::reason::ReasonCode;
use serde_json::Value;

/// What a request asks for beyond its text, once allowed: owned, so the
/// body can move on.
#[derive(Default)]
pub(crate) struct Allowed {
    /// The service tiers it may be served at beyond the default (empty for
    /// most requests: no allocation).
    pub tiers: Vec<String>,
    pub tools: ToolHold,
    /// Extended thinking asked for: hidden reasoning for the hold (its
    /// whole output cap held up front, as for a `hidden_reasoning`
    /// provider).
    pub thinks: bool,
}

/// The extras `body` asks for, refused (403) when a scope does not allow
/// them (Gemini's: its hosted tools only).
pub(crate) fn allowed(key: &KeyEntry, dialect: Dialect, body: &Value) -> Result<Allowed, ApiError> {
    let asked = extras::read(dialect, body).map_err(crate::errors::invalid)?;
    if asked.is_plain() {
        return Ok(Allowed::default());
    }
    let scopes = key.scope_limits();
    match asked.check(scopes) {
        Ok(()) => {}
        Err(PolicyRefusal::Tier { param, tier }) => {
            let msg = format!(
                "service tier {tier:?} is not allowed for this key (a platform or tenant admin allows tiers in the limits of its tenant, app or key)"
            );
            return Err(ApiError::new(ReasonCode::ServiceTierNotAllowed, msg).param(param));
        }
        Err(PolicyRefusal::Tool { param, kind }) => {
            let msg = format!(
                "hosted tool {kind:?} is not allowed for this key (a platform or tenant admin allows hosted tools in the limits of its tenant, app or key)"
            );
            return Err(ApiError::new(ReasonCode::ToolNotAllowed, msg).param(param));
        }
    }
    Ok(Allowed {
        tiers: asked
            .reachable_tiers(scopes)
            .into_iter()
            .map(str::to_string)
            .collect(),
        tools: asked.tool_hold(dialect),
        thinks: asked.thinks,
    })
}

/// The hold's prices and fees: the dearest prices the request can reach at
/// `at_ms` (its tiers, the whole-request tier its input's upper bound
/// crosses) and its tool calls' fees (µUSD).
pub(crate) fn hold_price(
    model: &ModelEntry,
    at_ms: i64,
    allowed: &Allowed,
    est_in: i64,
) -> (Price, i64) {
    let sheet = model.prices.at(at_ms, None);
    hold_price_of(sheet, &allowed.tiers, &allowed.tools, est_in)
}

/// [`hold_price`] on the sheet in force: the prices a request that may be
/// served at `tiers` (beyond the default), with hosted tools held at
/// `tools`, and an input estimated at `est_in` is held at, and its tools'
/// fees (µUSD).
pub fn hold_price_of(
    sheet: &PriceSheet,
    tiers: &[String],
    tools: &ToolHold,
    est_in: i64,
) -> (Price, i64) {
    if sheet.tiers.is_empty() && tiers.is_empty() && tools.calls == 0 {
        // The plain request: the dearest input and output of the sheet in
        // force when it came (not the catalog's price of when the catalog
        // was built: a dated sheet may have taken effect since).
        let no_tier: [&str; 0] = [];
        return (sheet.hold_price(no_tier, 0), 0);
    }
    let upper = domain::usage::input_allowance(est_in);
    let price = sheet.hold_price(tiers.iter().map(String::as_str), upper);
    (price, sheet.fees_micro(tools.web_search_calls))
}

/// The native body with the tool-call cap the hold assumed, where the
/// client set none.
pub(crate) fn inject_caps(dialect: Dialect, allowed: &Allowed, body: &mut Value) {
    if allowed.tools.calls == 0 {
        return;
    }
    // Read again (only requests with hosted tools come here): the cap goes
    // where the client's body has none.
    let Ok((tools, cap)) = extras::read(dialect, body).map(|a| (a.tools, a.max_tool_calls)) else {
        return;
    };
    extras::inject_caps(dialect, &tools, cap, body);
}
