//! Input tokens of a chat request's audio and file parts, for the hold
//! (docs/providers.md, "Audio and files in the input estimate"): the text
//! estimate must not read their base64 as text, and a provider bills them by
//! their length (audio) or their pages (files), which the gateway bounds from
//! above.
//!
//! - Audio (`{"type": "input_audio", "input_audio": {"data", "format"}}`):
//!   its duration, held at [`AUDIO_TOKENS_PER_SECOND`] — Gemini's published
//!   rate, above OpenAI's audio models (about 10 a second). A WAV's duration
//!   is read from its header when the part says `"format": "wav"` (its
//!   rates, believed up to 384,000 bytes a second); any other's is bounded by
//!   its size at [`AUDIO_FLOOR_BYTES_PER_SECOND`] (6 kbit/s, below every
//!   common speech codec), so the bound is never below the real length.
//! - Files (`{"type": "file", "file": {"file_id" | "file_data", …}}`),
//!   other dialects' media parts ([`is_unsized_part`]: `video_url`, …)
//!   and references to an earlier answer's audio (`audio: {"id"}`): the
//!   provider renders each page (text and image); neither a file id nor a
//!   compressed PDF tells the gateway its pages, so each file is held at the
//!   model's context window ([`FILE_INPUT_TOKENS`] when tollgate does not
//!   know it) — the most the provider can bill for it.

use serde_json::Value;

/// Input tokens a second of audio is held at.
pub const AUDIO_TOKENS_PER_SECOND: u64 = 32;

/// Bytes a second of audio of an unreadable format is assumed to take: a
/// lower bound of its bitrate (6 kbit/s), so its duration is bounded from
/// above.
pub const AUDIO_FLOOR_BYTES_PER_SECOND: u64 = 750;

/// Input tokens a file part is held at when the model's context window is
/// not known to tollgate: the window of most current models.
pub const FILE_INPUT_TOKENS: u64 = 128_000;

/// The least an audio part is held at (one second).
const MIN_AUDIO_SECONDS: u64 = 1;

/// How a model's provider bills a request's media: its image rule, and the
/// tokens one file part is held at (the model's context window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Media {
    pub images: crate::images::ImageRule,
    pub file_tokens: u64,
}

impl Media {
    /// For `upstream_model`: its provider's image rule, its context window
    /// when tollgate knows it.
    pub fn for_model(upstream_model: &str) -> Media {
        Media {
            images: crate::images::ImageRule::for_model(upstream_model),
            file_tokens: crate::context::context_window(upstream_model)
                .unwrap_or(FILE_INPUT_TOKENS),
        }
    }
}

/// Bytes of the base64 text `b64` once decoded (padding and a data URL's
/// prefix not counted).
fn decoded_len(b64: &str) -> u64 {
    let b64 = b64.split_once(";base64,").map_or(b64, |(_, d)| d);
    let chars = b64.trim_end_matches('=').len() as u64;
    chars * 3 / 4
}

/// The most bytes a second of WAV may be read as taking: 48 kHz, two
/// channels, 32-bit samples. A header claiming more (the client writes it)
/// is not believed beyond this.
const WAV_MAX_BYTES_PER_SECOND: u64 = 384_000;

/// The byte rate of a WAV (RIFF … WAVE, `fmt ` first), read from the first
/// bytes of its base64 text: the lowest of the rate its header states,
/// sample rate × block size and sample rate × channels × bits / 8 (what a
/// decoder plays it at), and at most [`WAV_MAX_BYTES_PER_SECOND`], so a
/// header that overstates its rate does not shorten the held duration.
fn wav_byte_rate(b64: &str) -> Option<u64> {
    let head = crate::images::decode_b64_prefix(b64.get(..b64.len().min(48))?)?;
    if !(head.starts_with(b"RIFF") && head.get(8..16) == Some(b"WAVEfmt ")) {
        return None;
    }
    let le32 = |i: usize| -> Option<u64> {
        Some(u32::from_le_bytes(head.get(i..i + 4)?.try_into().ok()?) as u64)
    };
    let le16 = |i: usize| -> Option<u64> {
        Some(u16::from_le_bytes(head.get(i..i + 2)?.try_into().ok()?) as u64)
    };
    let (channels, sample_rate, byte_rate) = (le16(22)?, le32(24)?, le32(28)?);
    let (block, bits) = (le16(32)?, le16(34)?);
    let rate = byte_rate
        .min(sample_rate.saturating_mul(block))
        .min(sample_rate.saturating_mul(channels).saturating_mul(bits) / 8)
        .min(WAV_MAX_BYTES_PER_SECOND);
    (rate > 0).then_some(rate)
}

/// Input tokens of one `input_audio` object (`{"data", "format"}`): a WAV
/// header is read only when the part says it is a WAV (a decoder of
/// another format skips a header it does not expect).
pub fn audio_part_tokens(input_audio: &Value) -> u64 {
    let data = input_audio
        .get("data")
        .and_then(Value::as_str)
        .unwrap_or("");
    let bytes = decoded_len(data);
    let wav = input_audio.get("format").and_then(Value::as_str) == Some("wav");
    let per_second = wav
        .then(|| wav_byte_rate(data))
        .flatten()
        .unwrap_or(AUDIO_FLOOR_BYTES_PER_SECOND);
    let seconds = bytes.div_ceil(per_second).max(MIN_AUDIO_SECONDS);
    seconds.saturating_mul(AUDIO_TOKENS_PER_SECOND)
}

/// Whether `v`, the value of a content part's `file` member, is a file
/// reference or inline file (`file_id`, `file_data`, `file_url`,
/// `filename`).
pub fn is_file(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        ["file_id", "file_data", "file_url", "filename"]
            .iter()
            .any(|k| o.contains_key(*k))
    })
}

/// Content-part types of other chat dialects whose media the gateway
/// cannot size (held like a file).
const UNSIZED_PARTS: &[&str] = &[
    "audio_url",
    "video_url",
    "document_url",
    "input_video",
    "video",
    "document",
];

/// Whether a chat content part of type `ty` carries media the gateway
/// cannot size.
pub fn is_unsized_part(ty: &str) -> bool {
    UNSIZED_PARTS.contains(&ty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::images::tests::encode as b64;

    /// A WAV of `seconds` at 16 kHz, mono, 16-bit (32,000 bytes a second).
    fn wav(seconds: u32) -> Vec<u8> {
        let data = 32_000 * seconds;
        let mut b = b"RIFF".to_vec();
        b.extend_from_slice(&(36 + data).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes()); // PCM
        b.extend_from_slice(&1u16.to_le_bytes()); // mono
        b.extend_from_slice(&16_000u32.to_le_bytes());
        b.extend_from_slice(&32_000u32.to_le_bytes()); // byte rate
        b.extend_from_slice(&2u16.to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data.to_le_bytes());
        b.resize(b.len() + data as usize, 0);
        b
    }

    #[test]
    fn a_wav_is_held_by_its_duration() {
        let t = audio_part_tokens(&json!({"data": b64(&wav(10)), "format": "wav"}));
        // 10 s of samples plus a 44-byte header: 11 whole seconds at most.
        assert!((10 * 32..=11 * 32).contains(&t), "{t}");
        // Far below reading its base64 as text.
        assert!(t < 1_000);
    }

    #[test]
    fn other_formats_are_bounded_by_their_size_at_the_lowest_bitrate() {
        // 24,000 bytes of mp3 at 128 kbit/s are 1.5 s; bounded as 32 s.
        let mp3 = b64(&[0xffu8; 24_000]);
        let t = audio_part_tokens(&json!({"data": mp3, "format": "mp3"}));
        assert_eq!(t, 32 * AUDIO_TOKENS_PER_SECOND);
        // Never below one second; missing data is one second.
        assert_eq!(audio_part_tokens(&json!({})), AUDIO_TOKENS_PER_SECOND);
        // A real length of 1.5 s bills at most 2 s of tokens: held above.
        assert!(t >= 2 * AUDIO_TOKENS_PER_SECOND);
    }

    #[test]
    fn a_wav_that_lies_about_its_rate_is_held_at_the_longer_duration() {
        // A byte rate above sample rate × block size: the duration is what
        // a decoder plays (10 s), not the header's 0.1 s.
        let wav_part = |w: &[u8]| json!({"data": b64(w), "format": "wav"});
        let mut w = wav(10);
        w[28..32].copy_from_slice(&3_200_000u32.to_le_bytes());
        let t = audio_part_tokens(&wav_part(&w));
        assert!(t >= 10 * AUDIO_TOKENS_PER_SECOND, "{t}");
        // A sample rate, byte rate and block size beyond any real WAV are
        // not believed: 320,044 bytes at most 384,000 a second is one
        // second, not the 0.0001 s a 4 GB/s header claims.
        let mut huge = wav(10);
        huge[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        huge[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
        huge[32..34].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(audio_part_tokens(&wav_part(&huge)), AUDIO_TOKENS_PER_SECOND);
        // A zero rate falls back to the size bound.
        w[28..32].copy_from_slice(&0u32.to_le_bytes());
        let t = audio_part_tokens(&wav_part(&w));
        assert_eq!(t, (w.len() as u64).div_ceil(750) * AUDIO_TOKENS_PER_SECOND);
    }

    #[test]
    fn a_wav_header_in_another_format_is_not_read() {
        // An MP3 part that starts with a WAV header claiming a huge rate:
        // the header is not read, the size bounds it.
        let mut w = wav(1);
        w[28..32].copy_from_slice(&u32::MAX.to_le_bytes());
        let t = audio_part_tokens(&json!({"data": b64(&w), "format": "mp3"}));
        assert_eq!(t, (w.len() as u64).div_ceil(750) * AUDIO_TOKENS_PER_SECOND);
    }

    #[test]
    fn files_are_recognised_by_their_members() {
        assert!(is_file(&json!({"file_id": "file-abc"})));
        assert!(is_file(
            &json!({"file_url": "https://files.example.com/a.pdf"})
        ));
        assert!(is_file(
            &json!({"file_data": "data:application/pdf;base64,JVBERi0x", "filename": "a.pdf"})
        ));
        assert!(!is_file(&json!("file-abc")));
        assert!(!is_file(&json!({"name": "x"})));
        assert_eq!(Media::for_model("gpt-4o").file_tokens, FILE_INPUT_TOKENS);
        assert_eq!(Media::for_model("gemini-2.5-pro").file_tokens, 1_048_576);
    }
}
