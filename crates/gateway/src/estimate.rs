//! The request's estimate: input tokens (counted here, bounded, or on the
//! shared tokenize pool for long bodies) and the output cap per choice, and
//! the body-size check against the model's context window.

use crate::catalog::ModelEntry;
use crate::errors::ApiError;
use crate::key_index::KeyEntry;
use crate::Gateway;
use domain::reason::ReasonCode;
use domain::request::{Endpoint, RequestSummary};
use domain::tokens;
use serde_json::Value;
use std::sync::Arc;

use crate::tokenize::LARGE_BODY;

/// 413 when the body is larger than this model takes (its context window
/// decides, `domain::tokens::body_limit`); the body was read up to the
/// largest any model takes.
pub(crate) fn check_body_size(
    gw: &Gateway,
    model: &ModelEntry,
    len: usize,
) -> Result<(), ApiError> {
    let limit = tokens::body_limit(gw.cfg.max_body_bytes, &model.upstream_model);
    if len <= limit {
        return Ok(());
    }
    let msg = format!(
        "request body is larger than {limit} bytes, the most model {} takes",
        model.id
    );
    Err(ApiError::new(ReasonCode::InvalidRequest, msg).status(413))
}

/// The input and output estimate (`estimate`), never tokenising much on the
/// async workers: a long input (`tokens::LONG_INPUT_BYTES`) is bounded from
/// above in constant time (`LongInput::Bound`) and counted exactly only when
/// that bound is above the key's context cap; exact counts of bodies above
/// `LARGE_BODY` run in the tokenize pool the tenants share fairly. Gives the
/// body back.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn estimate_input(
    gw: &Gateway,
    long: crate::LongInput,
    key: &Arc<KeyEntry>,
    model: &Arc<ModelEntry>,
    endpoint: Endpoint,
    summary: &RequestSummary,
    json: Value,
    len: usize,
) -> (Result<(i64, i64), ApiError>, Value) {
    let here = |counting| estimate(key, model, endpoint, summary, &json, counting);
    if long == crate::LongInput::Bound && tokens::counting_for(len) == tokens::Counting::UpperBound
    {
        let bound = here(tokens::Counting::UpperBound);
        if !matches!(&bound, Err(e) if e.reason == ReasonCode::ContextTooLong) {
            return (bound, json);
        }
    }
    if len <= LARGE_BODY {
        let r = here(tokens::Counting::Exact);
        return (r, json);
    }
    let (key2, model2, summary2) = (key.clone(), model.clone(), summary.clone());
    gw.tokenize
        .run(&key.tenant.id, move || {
            let r = estimate(
                &key2,
                &model2,
                endpoint,
                &summary2,
                &json,
                tokens::Counting::Exact,
            );
            (r, json)
        })
        .await
}

/// Input tokens with the family's tokenizer, and the output cap per choice
/// (requested or the model default). Per-request caps of every scope apply.
pub(crate) fn estimate(
    key: &KeyEntry,
    model: &ModelEntry,
    endpoint: Endpoint,
    s: &RequestSummary,
    body: &Value,
    counting: tokens::Counting,
) -> Result<(i64, i64), ApiError> {
    let f = model.tokenizer;
    // Exact counts of texts this tenant sent before are looked up, not
    // counted again (domain::count_cache).
    let counting = match counting {
        tokens::Counting::Exact => {
            tokens::Counting::Remembered(domain::count_cache::scope(&key.tenant.id))
        }
        other => other,
    };
    let input = match endpoint {
        Endpoint::ChatCompletions => {
            let msgs = body["messages"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or(&[]);
            // Images, audio and files by the provider's rules (domain::images,
            // domain::media).
            let mut n = tokens::chat_input_tokens_with_media(f, Some(model.media), msgs, counting);
            for extra in ["tools", "functions", "response_format"] {
                if let Some(v) = body.get(extra) {
                    n += tokens::json_tokens_as(f, v, counting);
                }
            }
            n
        }
        Endpoint::Completions => tokens::prompt_tokens_as(f, &body["prompt"], counting),
        Endpoint::Embeddings => tokens::prompt_tokens_as(f, &body["input"], counting),
    } as i64;
    if let Some(max_ctx) = key.cap(|l| l.max_context_tokens) {
        if input > max_ctx {
            let msg = format!("input is about {input} tokens; this key allows at most {max_ctx}");
            return Err(ApiError::new(ReasonCode::ContextTooLong, msg).param("messages"));
        }
    }
    if endpoint == Endpoint::Embeddings {
        return Ok((input.max(1), 0));
    }
    let cap = key.cap(|l| l.max_output_tokens);
    let per_choice = match (s.max_output, cap) {
        (Some(asked), Some(cap)) if asked > cap => {
            let msg = format!("max_tokens is {asked}; this key allows at most {cap}");
            return Err(ApiError::new(ReasonCode::InvalidRequest, msg).param("max_tokens"));
        }
        (Some(asked), _) => asked,
        (None, Some(cap)) => model.default_max_output.min(cap),
        (None, None) => model.default_max_output,
    };
    Ok((input.max(1), per_choice))
}
