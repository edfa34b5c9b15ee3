//! Hostile input: SQL-injection, XSS and template payloads, and how the
//! console's templates must show them (askama's HTML escaper).

pub const SCRIPT: &str = "<script>alert(1)</script>";
pub const IMG: &str = "\"><img src=x onerror=alert(1)>";
pub const SQL: &str = "'; DROP TABLE tenants; --";

/// What the injection tests put in every field: markup, SQL that would
/// close a quoted literal, a template expression, quotes among non-ASCII
/// letters, LIKE wildcards with a backslash, and a NUL (which PostgreSQL
/// cannot store in text).
pub const PAYLOADS: [&str; 8] = [
    SCRIPT,
    IMG,
    SQL,
    "' OR '1'='1",
    "{{7*7}}",
    "ünï'cødé\"",
    "100%_off\\",
    "nul\u{0}byte",
];

/// Pieces of the payloads that must never reach a page unescaped.
pub const RAW_MARKERS: [&str; 2] = ["<script>alert(", "<img src=x"];

/// How the templates escape text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&#38;")
        .replace('<', "&#60;")
        .replace('>', "&#62;")
        .replace('"', "&#34;")
        .replace('\'', "&#39;")
}

/// A payload marker that is on the page unescaped, if any.
pub fn raw_marker(page: &str) -> Option<&'static str> {
    RAW_MARKERS.into_iter().find(|m| page.contains(m))
}
