//! Input tokens of the images of a request, by the provider's own rule
//! (docs/providers.md, "Images in the input estimate"): the text estimate
//! does not see them, and a provider bills an image as hundreds to
//! thousands of input tokens.
//!
//! - OpenAI (tiles): `detail: "low"` 85; otherwise the image is scaled to
//!   fit 2048 × 2048, then its short side to 768, and costs 85 + 170 per
//!   512-pixel tile.
//! - Anthropic: width × height / 750, after scaling the long side to at
//!   most 1,568 pixels.
//! - Gemini: 258 per 768 × 768 tile (an image of at most 384 × 384 is one).
//!
//! Dimensions are read from a PNG, GIF or WebP data URL's header (no
//! decoding); an image whose size is not known (a URL, a JPEG, a file id)
//! is held at [`UNKNOWN_IMAGE_TOKENS`], above what any of the three rules
//! bills one image.

use serde_json::Value;

/// Tokens an image of unknown size is held at: above OpenAI's most for one
/// image (85 + 170 × 8 = 1,445), Anthropic's (1,568 × 1,568 scaled to
/// ~1.2 megapixels: 1,600) and Gemini's for a common photo.
pub const UNKNOWN_IMAGE_TOKENS: u64 = 1_600;

/// Whose rule prices the images of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageRule {
    OpenAiTiles,
    AnthropicArea,
    GeminiTiles,
}

impl ImageRule {
    /// By the upstream model's name: Claude and Gemini by their own rules,
    /// every other model by OpenAI's.
    pub fn for_model(upstream_model: &str) -> ImageRule {
        // Without lowercasing a copy: this runs on every chat request.
        let has = |p: &str| {
            upstream_model
                .as_bytes()
                .windows(p.len())
                .any(|w| w.eq_ignore_ascii_case(p.as_bytes()))
        };
        if has("claude") {
            ImageRule::AnthropicArea
        } else if has("gemini") {
            ImageRule::GeminiTiles
        } else {
            ImageRule::OpenAiTiles
        }
    }

    /// Input tokens of one image of `dims` (None: unknown), `low` detail
    /// asked (OpenAI's `detail: "low"`).
    pub fn tokens(self, dims: Option<(u32, u32)>, low: bool) -> u64 {
        if self == ImageRule::OpenAiTiles && low {
            return 85;
        }
        let Some((w, h)) = dims.filter(|&(w, h)| w > 0 && h > 0) else {
            return UNKNOWN_IMAGE_TOKENS;
        };
        let (w, h) = (w as f64, h as f64);
        match self {
            ImageRule::OpenAiTiles => {
                let fit = (2048.0 / w.max(h)).min(1.0);
                let (w, h) = (w * fit, h * fit);
                let short = (768.0 / w.min(h)).min(1.0);
                let (w, h) = (w * short, h * short);
                let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
                85 + 170 * tiles as u64
            }
            ImageRule::AnthropicArea => {
                // Long side at most 1,568, area at most ~1.2 megapixels (1092 × 1092).
                let fit = (1568.0 / w.max(h)).min(1.0);
                let area = (w * fit) * (h * fit);
                (area.min(1_200_000.0) / 750.0).ceil() as u64
            }
            ImageRule::GeminiTiles => {
                if w <= 384.0 && h <= 384.0 {
                    258
                } else {
                    258 * ((w / 768.0).ceil() * (h / 768.0).ceil()) as u64
                }
            }
        }
    }
}

/// Width and height from the first bytes of a base64 data URL's image: PNG
/// (IHDR), GIF (logical screen) or WebP (VP8X / VP8 / VP8L); None for any
/// other (JPEG's size sits after its metadata: not read).
pub fn data_url_dimensions(url: &str) -> Option<(u32, u32)> {
    let b64 = url.strip_prefix("data:")?.split_once(";base64,")?.1;
    // 40 base64 characters are 30 bytes: every header read here.
    let head = decode_b64_prefix(b64.get(..b64.len().min(40))?)?;
    let be = |i: usize| -> Option<u32> {
        Some(u32::from_be_bytes(head.get(i..i + 4)?.try_into().ok()?))
    };
    let le16 = |i: usize| -> Option<u32> {
        Some(u16::from_le_bytes(head.get(i..i + 2)?.try_into().ok()?) as u32)
    };
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some((be(16)?, be(20)?));
    }
    if head.starts_with(b"GIF8") {
        return Some((le16(6)?, le16(8)?));
    }
    if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        let le24 = |i: usize| -> Option<u32> {
            let b = head.get(i..i + 3)?;
            Some(b[0] as u32 | ((b[1] as u32) << 8) | ((b[2] as u32) << 16))
        };
        return match head.get(12..16)? {
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            b"VP8 " => Some((le16(26)? & 0x3fff, le16(28)? & 0x3fff)),
            b"VP8L" => {
                let b = head.get(21..25)?;
                let bits = u32::from_le_bytes(b.try_into().ok()?);
                Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
            }
            _ => None,
        };
    }
    None
}

pub(crate) fn decode_b64_prefix(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    // Whole groups before any padding.
    let bytes = s.as_bytes();
    let bytes = &bytes[..bytes.iter().position(|&c| c == b'=').unwrap_or(bytes.len())];
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for chunk in bytes.chunks_exact(4) {
        let mut n = 0u32;
        for &c in chunk {
            n = (n << 6) | val(c)?;
        }
        out.extend_from_slice(&[(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    Some(out)
}

/// Input tokens of one chat content part when it is an image
/// (`{"type": "image_url", "image_url": {"url", "detail"}}` or
/// `"image_url": "<url>"`), by `rule`.
pub fn part_tokens(rule: ImageRule, image_url: &Value) -> u64 {
    let (url, detail) = match image_url {
        Value::String(u) => (u.as_str(), None),
        Value::Object(o) => (
            o.get("url").and_then(Value::as_str).unwrap_or(""),
            o.get("detail").and_then(Value::as_str),
        ),
        _ => ("", None),
    };
    rule.tokens(data_url_dimensions(url), detail == Some("low"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A PNG data URL of `w` × `h` (its header only: all that is read).
    fn png(w: u32, h: u32) -> String {
        let mut b = b"\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 6, 0, 0, 0]);
        format!("data:image/png;base64,{}", encode(&b))
    }

    /// Base64 of `b` (standard alphabet, padded): the tests' encoder, for
    /// this module's and `crate::media`'s data.
    pub(crate) fn encode(b: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in b.chunks(3) {
            let n = ((c[0] as u32) << 16)
                | ((*c.get(1).unwrap_or(&0) as u32) << 8)
                | (*c.get(2).unwrap_or(&0) as u32);
            for i in 0..4 {
                if i <= c.len() {
                    s.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    s.push('=');
                }
            }
        }
        s
    }

    #[test]
    fn each_provider_by_its_rule() {
        // OpenAI's documented examples: 1024 × 1024 high detail is 765;
        // 2048 × 4096 is 1,105; low detail 85.
        assert_eq!(
            ImageRule::OpenAiTiles.tokens(Some((1024, 1024)), false),
            765
        );
        assert_eq!(
            ImageRule::OpenAiTiles.tokens(Some((2048, 4096)), false),
            1_105
        );
        assert_eq!(ImageRule::OpenAiTiles.tokens(Some((4096, 4096)), true), 85);
        // Anthropic: 1092 × 1092 is ~1,590; 200 × 200 is 54.
        assert_eq!(
            ImageRule::AnthropicArea.tokens(Some((1092, 1092)), false),
            1_590
        );
        assert_eq!(ImageRule::AnthropicArea.tokens(Some((200, 200)), false), 54);
        assert_eq!(ImageRule::GeminiTiles.tokens(Some((300, 300)), false), 258);
        assert_eq!(
            ImageRule::GeminiTiles.tokens(Some((1536, 1536)), false),
            4 * 258
        );
        for r in [
            ImageRule::OpenAiTiles,
            ImageRule::AnthropicArea,
            ImageRule::GeminiTiles,
        ] {
            assert_eq!(r.tokens(None, false), UNKNOWN_IMAGE_TOKENS);
        }
        // The bound is above the most one image costs at OpenAI and Anthropic.
        for dims in [
            (768, 2048),
            (2048, 768),
            (4000, 4000),
            (1568, 1568),
            (10_000, 100),
        ] {
            assert!(ImageRule::OpenAiTiles.tokens(Some(dims), false) <= UNKNOWN_IMAGE_TOKENS);
            assert!(ImageRule::AnthropicArea.tokens(Some(dims), false) <= UNKNOWN_IMAGE_TOKENS);
        }
        assert_eq!(
            ImageRule::for_model("claude-sonnet-4-5"),
            ImageRule::AnthropicArea
        );
        assert_eq!(ImageRule::for_model("gpt-4o"), ImageRule::OpenAiTiles);
    }

    #[test]
    fn sizes_are_read_from_the_header_of_a_data_url() {
        assert_eq!(data_url_dimensions(&png(1024, 768)), Some((1024, 768)));
        assert_eq!(data_url_dimensions("https://example.com/cat.png"), None);
        assert_eq!(
            data_url_dimensions("data:image/jpeg;base64,/9j/4AAQSkZJRg=="),
            None
        );
        let part = serde_json::json!({"url": png(1024, 1024), "detail": "high"});
        assert_eq!(part_tokens(ImageRule::OpenAiTiles, &part), 765);
        let low = serde_json::json!({"url": "https://x/y.png", "detail": "low"});
        assert_eq!(part_tokens(ImageRule::OpenAiTiles, &low), 85);
        assert_eq!(
            part_tokens(
                ImageRule::OpenAiTiles,
                &serde_json::json!("https://x/y.png")
            ),
            UNKNOWN_IMAGE_TOKENS
        );
    }
}
