//! Context windows of the long-context model families, and the request
//! body a window allows (read by the token count and the media estimate).

/// Context windows (tokens) of the long-context families, by upstream model
/// name; others take the global body limit.
const LONG_CONTEXT: [(&str, u64); 6] = [
    ("gpt-4.1", 1_047_576),
    ("minimax-text-01", 1_000_192),
    ("minimax-m1", 1_000_000),
    ("qwen-turbo", 1_000_000),
    ("qwen-plus", 1_000_000),
    ("gemini-", 1_048_576),
];

/// Body bytes allowed per token of context window: a token of text is rarely
/// more than 4–5 bytes, JSON escapes (`\uXXXX`, `\n`) make a few of them
/// longer; 8 leaves a prompt that fills the window room for its envelope.
pub const BODY_BYTES_PER_CONTEXT_TOKEN: u64 = 8;

/// The context window of `upstream_model` when it is one of the long ones.
pub fn context_window(upstream_model: &str) -> Option<u64> {
    let m = upstream_model.to_ascii_lowercase();
    LONG_CONTEXT
        .iter()
        .find(|(p, _)| m.starts_with(p))
        .map(|&(_, w)| w)
}

/// The largest request body for `upstream_model`: the global limit, or more
/// when the model's context window needs it, so a prompt that fits the window
/// is never refused for its size.
pub fn body_limit(global: usize, upstream_model: &str) -> usize {
    context_window(upstream_model).map_or(global, |w| {
        global.max((w * BODY_BYTES_PER_CONTEXT_TOKEN) as usize)
    })
}

/// The most any model may take: what a body is read up to before its model
/// is known.
pub fn largest_body_limit(global: usize) -> usize {
    LONG_CONTEXT.iter().fold(global, |acc, &(_, w)| {
        acc.max((w * BODY_BYTES_PER_CONTEXT_TOKEN) as usize)
    })
}
