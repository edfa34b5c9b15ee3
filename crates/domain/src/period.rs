//! Calendar periods in the platform's time zone. A period is part of every
//! Redis counter key, so a new month starts from zero without a reset race.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use chrono_tz::Tz;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformClock {
    pub tz: Tz,
}

impl PlatformClock {
    pub fn new(tz: Tz) -> Self {
        Self { tz }
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        name.parse::<Tz>()
            .map(Self::new)
            .map_err(|_| format!("unknown time zone {name:?}"))
    }

    /// `YYYY-MM` of the instant, in platform time.
    pub fn month(&self, at: DateTime<Utc>) -> String {
        let l = self.tz.from_utc_datetime(&at.naive_utc());
        format!("{:04}-{:02}", l.year(), l.month())
    }

    /// `YYYY-MM-DD` of the instant, in platform time.
    pub fn day(&self, at: DateTime<Utc>) -> String {
        let l = self.tz.from_utc_datetime(&at.naive_utc());
        format!("{:04}-{:02}-{:02}", l.year(), l.month(), l.day())
    }

    pub fn month_of_unix_ms(&self, ms: i64) -> String {
        self.month(DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default())
    }
}

/// Validates a `YYYY-MM` period string.
pub fn parse_month(s: &str) -> Option<(i32, u32)> {
    let (y, m) = s.split_once('-')?;
    if y.len() != 4 || m.len() != 2 {
        return None;
    }
    let y: i32 = y.parse().ok()?;
    let m: u32 = m.parse().ok()?;
    (1..=12).contains(&m).then_some((y, m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn month_follows_the_platform_zone() {
        let c = PlatformClock::parse("Asia/Shanghai").unwrap();
        // 2026-11-30 17:00 UTC is already December 1st in Shanghai.
        let at = Utc.with_ymd_and_hms(2026, 11, 30, 17, 0, 0).unwrap();
        assert_eq!(c.month(at), "2026-12");
        assert_eq!(c.day(at), "2026-12-01");
        let utc = PlatformClock::parse("UTC").unwrap();
        assert_eq!(utc.month(at), "2026-11");
    }

    #[test]
    fn parses_months() {
        assert_eq!(parse_month("2026-11"), Some((2026, 11)));
        assert_eq!(parse_month("2026-13"), None);
        assert_eq!(parse_month("26-11"), None);
        assert!(PlatformClock::parse("Mars/Base").is_err());
    }
}
