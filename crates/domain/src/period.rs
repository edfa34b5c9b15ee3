//! Calendar periods in the platform's time zone. A period is part of every
//! Redis counter key, so a new month starts from zero without a reset race.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use chrono_tz::Tz;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlatformClock {
    pub tz: Tz,
    /// The first day of a budget's week (`platform.week_starts`; Monday).
    pub week_start: chrono::Weekday,
    /// The month (1–12) the fiscal year, and so its quarters, starts in
    /// (`platform.fiscal_year_starts`; 1, January).
    pub fiscal_start: u32,
}

/// A skew smaller than this is within what one `TIME` call over a loaded
/// network can tell apart, and is taken as none.
pub const SKEW_NOISE_MS: i64 = 50;

/// How far the platform's clock (Redis `TIME`, read at `server_ms`) is
/// ahead of this replica's, from the replica's clock read just before
/// (`before_ms`) and just after (`after_ms`) the call: the server's answer
/// is taken as read half-way. A result within [`SKEW_NOISE_MS`] is 0.
///
/// Periods (the month and day a request is booked in, whether a grant or a
/// key has expired) are read from the platform's clock, never a replica's:
/// two replicas whose clocks disagree by seconds would otherwise book the
/// requests of a month's last seconds into different months.
pub fn clock_skew_ms(before_ms: i64, server_ms: i64, after_ms: i64) -> i64 {
    let mid = before_ms + (after_ms - before_ms) / 2;
    let skew = server_ms - mid;
    if skew.abs() < SKEW_NOISE_MS {
        0
    } else {
        skew
    }
}

/// The platform's time: this replica's clock corrected by a measured skew.
pub fn skewed(now: DateTime<Utc>, skew_ms: i64) -> DateTime<Utc> {
    if skew_ms == 0 {
        now
    } else {
        now + chrono::Duration::milliseconds(skew_ms)
    }
}

impl PlatformClock {
    /// Coordinated Universal Time (exports whose columns say UTC).
    pub const UTC: PlatformClock = PlatformClock {
        tz: Tz::UTC,
        week_start: chrono::Weekday::Mon,
        fiscal_start: 1,
    };

    pub fn new(tz: Tz) -> Self {
        Self {
            tz,
            week_start: chrono::Weekday::Mon,
            fiscal_start: 1,
        }
    }

    /// This clock with the platform calendar's week and fiscal year:
    /// `week_start` a day's English name or its first three letters
    /// (`monday`, `Sun`), `fiscal_start` a month 1–12.
    pub fn with_calendar(mut self, week_start: &str, fiscal_start: u32) -> Result<Self, String> {
        self.week_start = week_start
            .parse::<chrono::Weekday>()
            .map_err(|_| format!("unknown first day of the week {week_start:?}"))?;
        if !(1..=12).contains(&fiscal_start) {
            return Err(format!(
                "the fiscal year must start in a month 1-12, not {fiscal_start}"
            ));
        }
        self.fiscal_start = fiscal_start;
        Ok(self)
    }

    pub fn parse(name: &str) -> Result<Self, String> {
        name.parse::<Tz>()
            .map(Self::new)
            .map_err(|_| format!("unknown time zone {name:?}"))
    }

    /// `YYYY-MM` of the instant, in platform time.
    pub fn month(&self, at: DateTime<Utc>) -> String {
        self.dated(at, |d| d.month.clone())
    }

    /// `YYYY-MM-DD` of the instant, in platform time.
    pub fn day(&self, at: DateTime<Utc>) -> String {
        self.dated(at, |d| d.day.clone())
    }

    /// The instant's platform-time date, from this thread's memo of the
    /// current minute (every request asks for its month and day two or
    /// three times; the zone's conversion costs ~700 instructions a time).
    /// A minute is memoised only when its first and last instants have the
    /// same date and the same UTC offset, so a minute the offset changes in
    /// or a date boundary falls in (an offset with seconds, as old local
    /// mean times have) is converted each time. What is assumed: no zone
    /// changes its offset twice within one minute (none in the tz database
    /// does). A thread whose locals are being torn down converts directly.
    fn dated(&self, at: DateTime<Utc>, part: fn(&Dated) -> String) -> String {
        let minute = at.timestamp().div_euclid(60);
        DATED
            .try_with(|memo| {
                let mut memo = memo.borrow_mut();
                if let Some(d) = memo
                    .as_ref()
                    .filter(|d| d.tz == self.tz && d.minute == minute)
                {
                    return part(d);
                }
                let d = self.dated_directly(at);
                if self.one_date_in(minute, &d) {
                    part(memo.insert(Dated { minute, ..d }))
                } else {
                    part(&d)
                }
            })
            .unwrap_or_else(|_| part(&self.dated_directly(at)))
    }

    /// Whether the whole `minute` has the date `d` and a single offset.
    fn one_date_in(&self, minute: i64, d: &Dated) -> bool {
        use chrono::Offset;
        let first = DateTime::<Utc>::from_timestamp(minute * 60, 0);
        let last = DateTime::<Utc>::from_timestamp(minute * 60 + 59, 999_999_999);
        let offset = |t: DateTime<Utc>| self.tz.offset_from_utc_datetime(&t.naive_utc()).fix();
        match (first, last) {
            (Some(a), Some(b)) => {
                offset(a) == offset(b)
                    && self.dated_directly(a) == *d
                    && self.dated_directly(b) == *d
            }
            _ => false,
        }
    }

    fn dated_directly(&self, at: DateTime<Utc>) -> Dated {
        let l = self.tz.from_utc_datetime(&at.naive_utc());
        Dated {
            tz: self.tz,
            minute: 0,
            day: date_text(l.year(), l.month(), Some(l.day())),
            month: date_text(l.year(), l.month(), None),
        }
    }

    pub fn month_of_unix_ms(&self, ms: i64) -> String {
        self.month(DateTime::<Utc>::from_timestamp_millis(ms).unwrap_or_default())
    }

    /// The instants a `YYYY-MM` period starts and ends (exclusive), in
    /// platform time. None for a malformed period.
    pub fn month_bounds(&self, period: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let (y, m) = parse_month(period)?;
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let start = self.local_midnight(y, m, 1)?;
        let end = self.local_midnight(ny, nm, 1)?;
        Some((start, end))
    }

    /// The instants a `YYYY-MM-DD` day starts and ends, in platform time.
    pub fn day_bounds(&self, day: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        let d = parse_day(day)?;
        let next = d.succ_opt()?;
        Some((
            self.local_midnight(d.year(), d.month(), d.day())?,
            self.local_midnight(next.year(), next.month(), next.day())?,
        ))
    }

    pub(crate) fn local_midnight(&self, y: i32, m: u32, d: u32) -> Option<DateTime<Utc>> {
        let naive = chrono::NaiveDate::from_ymd_opt(y, m, d)?.and_hms_opt(0, 0, 0)?;
        // A zone that skips midnight (DST) starts the day at the first
        // instant that exists.
        self.tz
            .from_local_datetime(&naive)
            .earliest()
            .or_else(|| {
                self.tz
                    .from_local_datetime(&(naive + chrono::Duration::hours(1)))
                    .earliest()
            })
            .map(|t| t.with_timezone(&Utc))
    }

    /// The instant's platform-time wall clock (what the console shows and
    /// what its date pickers hold).
    pub fn wall(&self, at: DateTime<Utc>) -> chrono::NaiveDateTime {
        self.tz.from_utc_datetime(&at.naive_utc()).naive_local()
    }

    /// The instant a platform-time wall clock names (a date picker's value
    /// read in the platform's zone). A time the zone skips (the hour a DST
    /// change jumps over) is read an hour later; a time it repeats, as its
    /// first instant.
    pub fn from_wall(&self, wall: chrono::NaiveDateTime) -> Option<DateTime<Utc>> {
        self.tz
            .from_local_datetime(&wall)
            .earliest()
            .or_else(|| {
                self.tz
                    .from_local_datetime(&(wall + chrono::Duration::hours(1)))
                    .earliest()
            })
            .map(|t| t.with_timezone(&Utc))
    }

    /// The zone as a person reads it: its name and its offset at the
    /// instant, e.g. `Asia/Shanghai (UTC+08:00)`.
    pub fn zone_label(&self, at: DateTime<Utc>) -> String {
        use chrono::Offset;
        let secs = self
            .tz
            .offset_from_utc_datetime(&at.naive_utc())
            .fix()
            .local_minus_utc();
        let sign = if secs < 0 { '-' } else { '+' };
        let m = secs.unsigned_abs() / 60;
        format!("{} (UTC{sign}{:02}:{:02})", self.tz.name(), m / 60, m % 60)
    }

    /// A month's start and end as platform-time wall clock,
    /// `2026-11-01 00:00 – 2026-12-01 00:00`.
    pub fn month_span(&self, period: &str) -> Option<String> {
        let (a, b) = self.month_bounds(period)?;
        let f = |t: DateTime<Utc>| {
            self.tz
                .from_utc_datetime(&t.naive_utc())
                .format("%Y-%m-%d %H:%M")
                .to_string()
        };
        Some(format!("{} – {}", f(a), f(b)))
    }

    /// Day of the month (1-based) of the instant, in platform time.
    pub fn day_of_month(&self, at: DateTime<Utc>) -> u32 {
        self.tz.from_utc_datetime(&at.naive_utc()).day()
    }
}

/// One minute's platform-time date (`PlatformClock::dated`).
#[derive(PartialEq, Eq)]
struct Dated {
    tz: Tz,
    minute: i64,
    day: String,
    month: String,
}

thread_local! {
    static DATED: std::cell::RefCell<Option<Dated>> = const { std::cell::RefCell::new(None) };
}

/// `YYYY-MM` or `YYYY-MM-DD`, as `format!("{:04}-{:02}-{:02}")` writes it
/// (settling asks for the day and month of every request; the formatting
/// machinery costs ~20× these few pushes).
fn date_text(y: i32, m: u32, d: Option<u32>) -> String {
    if !(0..=9999).contains(&y) {
        return match d {
            Some(d) => format!("{y:04}-{m:02}-{d:02}"),
            None => format!("{y:04}-{m:02}"),
        };
    }
    // Two digits of v (which is below 100).
    let two = |s: &mut String, v: u32| {
        s.push(char::from(b'0' + (v / 10) as u8));
        s.push(char::from(b'0' + (v % 10) as u8));
    };
    let (y, mut s) = (y as u32, String::with_capacity(10));
    two(&mut s, y / 100);
    two(&mut s, y % 100);
    for v in std::iter::once(m).chain(d) {
        s.push('-');
        two(&mut s, v % 100);
    }
    s
}

/// Where a `YYYY-MM` period lies from the current month.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonthPhase {
    /// After the current month: nothing can be in it yet.
    Future,
    /// The current month: figures still change.
    Current,
    /// The month just ended: it is closed soon after it ends.
    Previous,
    /// Older months.
    Past,
}

/// The phase of `period` seen from `current` (both `YYYY-MM`).
pub fn month_phase(current: &str, period: &str) -> Option<MonthPhase> {
    let (cy, cm) = parse_month(current)?;
    let (py, pm) = parse_month(period)?;
    let (c, p) = (cy * 12 + cm as i32, py * 12 + pm as i32);
    Some(match p - c {
        d if d > 0 => MonthPhase::Future,
        0 => MonthPhase::Current,
        -1 => MonthPhase::Previous,
        _ => MonthPhase::Past,
    })
}

/// The month before a `YYYY-MM` period.
pub fn previous_month(period: &str) -> Option<String> {
    let (y, m) = parse_month(period)?;
    let (py, pm) = if m == 1 { (y - 1, 12) } else { (y, m - 1) };
    Some(format!("{py:04}-{pm:02}"))
}

/// Number of days of a `YYYY-MM` period.
pub fn days_in_month(period: &str) -> Option<u32> {
    let (y, m) = parse_month(period)?;
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let first = chrono::NaiveDate::from_ymd_opt(y, m, 1)?;
    let next = chrono::NaiveDate::from_ymd_opt(ny, nm, 1)?;
    Some((next - first).num_days() as u32)
}

/// A `YYYY-MM-DD` day, as chrono's `%Y-%m-%d` reads it. The form the
/// gateway writes (four, two and two digits) is read directly: chrono's
/// format parser cost ~1,250 instructions per ledger row (bench/results/
/// 2026-12-03-the-outbox-event-written-directly-and-three.md); anything else goes to chrono, so
/// what is accepted is unchanged.
pub fn parse_day(s: &str) -> Option<chrono::NaiveDate> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b[r].iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    if b.len() == 10 && b[4] == b'-' && b[7] == b'-' {
        if let (Some(y), Some(m), Some(d)) = (digits(0..4), digits(5..7), digits(8..10)) {
            return chrono::NaiveDate::from_ymd_opt(y as i32, m, d);
        }
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()
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

/// Why a From–To filter is refused, naming the end at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeFault {
    /// The From could not be read.
    From,
    /// The To could not be read.
    To,
    /// Both read, and the From is after the To: nothing can match.
    FromAfterTo,
}

/// A From–To filter as read: each end `Ok(None)` when left empty,
/// `Err(())` when it could not be read. Every fault, at once: an unreadable
/// end is never read as "no bound" (that would show every row), and a From
/// after the To is refused rather than answered with nothing. Equal ends
/// are one instant (or one day) and are kept.
pub fn check_range<T: PartialOrd>(
    from: Result<Option<T>, ()>,
    to: Result<Option<T>, ()>,
) -> Result<(Option<T>, Option<T>), Vec<RangeFault>> {
    match (from, to) {
        (Ok(Some(a)), Ok(Some(b))) if a > b => Err(vec![RangeFault::FromAfterTo]),
        (Ok(a), Ok(b)) => Ok((a, b)),
        (f, t) => Err(
            [(f.is_err(), RangeFault::From), (t.is_err(), RangeFault::To)]
                .into_iter()
                .filter_map(|(bad, fault)| bad.then_some(fault))
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn wall_clock_both_ways() {
        use chrono::NaiveDate;
        let sh = PlatformClock::parse("Asia/Shanghai").unwrap();
        let at = DateTime::parse_from_rfc3339("2026-12-31T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let wall = NaiveDate::from_ymd_opt(2026, 12, 31)
            .unwrap()
            .and_hms_opt(18, 0, 0)
            .unwrap();
        assert_eq!(sh.wall(at), wall);
        assert_eq!(sh.from_wall(wall), Some(at));
        let utc = PlatformClock::parse("UTC").unwrap();
        assert_eq!(utc.from_wall(wall), Some(wall.and_utc()));
        // New York skips 02:00–03:00 on 2026-03-08: 02:30 reads as 03:30
        // EDT; 01:30 on 2026-11-01 happens twice: the first (EDT) is taken.
        let ny = PlatformClock::parse("America/New_York").unwrap();
        let d = |m, day, h, min| {
            NaiveDate::from_ymd_opt(2026, m, day)
                .unwrap()
                .and_hms_opt(h, min, 0)
                .unwrap()
        };
        assert_eq!(
            ny.from_wall(d(3, 8, 2, 30)).unwrap().to_rfc3339(),
            "2026-03-08T07:30:00+00:00"
        );
        assert_eq!(
            ny.from_wall(d(11, 1, 1, 30)).unwrap().to_rfc3339(),
            "2026-11-01T05:30:00+00:00"
        );
    }

    #[test]
    fn a_range_is_refused_for_an_unreadable_end_or_a_from_after_the_to() {
        use super::{check_range, RangeFault::*};
        let d = |s: &str| super::parse_day(s).ok_or(()).map(Some);
        assert_eq!(
            check_range(d("2026-12-01"), d("2026-12-31")),
            Ok((
                super::parse_day("2026-12-01"),
                super::parse_day("2026-12-31")
            ))
        );
        // One day is a range; open ends are no bound.
        assert!(check_range(d("2026-12-01"), d("2026-12-01")).is_ok());
        assert_eq!(check_range::<u8>(Ok(None), Ok(None)), Ok((None, None)));
        assert_eq!(check_range(Ok(Some(3)), Ok(None)), Ok((Some(3), None)));
        assert_eq!(
            check_range(d("2026-12-31"), d("2026-12-01")),
            Err(vec![FromAfterTo])
        );
        assert_eq!(check_range(d("notadate"), d("2026-12-01")), Err(vec![From]));
        assert_eq!(check_range(Ok(Some(1)), Err(())), Err(vec![To]));
        assert_eq!(check_range::<u8>(Err(()), Err(())), Err(vec![From, To]));
    }

    #[test]
    fn skew_is_the_server_time_less_the_calls_midpoint() {
        // The replica is 30 s behind: Redis says 30 s later than the midpoint.
        assert_eq!(clock_skew_ms(1_000, 31_010, 1_020), 30_000);
        // Ahead by 30 s.
        assert_eq!(clock_skew_ms(31_000, 1_005, 31_010), -30_000);
        // Within the noise: none.
        assert_eq!(clock_skew_ms(1_000, 1_030, 1_020), 0);
        assert_eq!(clock_skew_ms(1_000, 961, 1_020), 0);
    }

    #[test]
    fn a_replica_behind_books_the_platforms_month() {
        let c = PlatformClock::parse("UTC").unwrap();
        // The replica reads 23:59:35 on the 31st, the platform 00:00:05.
        let local = "2026-12-31T23:59:35Z".parse::<DateTime<Utc>>().unwrap();
        assert_eq!(c.month(local), "2026-12");
        assert_eq!(c.month(skewed(local, 30_000)), "2027-01");
        assert_eq!(skewed(local, 0), local);
    }

    use super::*;

    /// The memoised day and month against chrono-tz's own conversion and
    /// formatting, in zones with half- and quarter-hour offsets, DST at
    /// midnight, a skipped day (Apia, 2011-12-30) and seconds in old local
    /// mean times: over stretches around such changes, and around every
    /// hour of two years, in order (memo hits) and with another zone asked
    /// in between (misses).
    #[test]
    fn the_memoised_date_is_the_zones_date() {
        let zones = [
            "UTC",
            "Asia/Shanghai",
            "Asia/Kolkata",
            "Asia/Kathmandu",
            "Australia/Lord_Howe",
            "America/Sao_Paulo",
            "Pacific/Apia",
            "America/St_Johns",
            "Europe/London",
            "Asia/Tehran",
            "Europe/Amsterdam",
        ];
        // (start, days, step in seconds): a fine step where midnight falls
        // within a minute (offsets with seconds), so one memoised minute
        // is asked before and after it.
        let starts = [
            ("1890-01-01T00:00:00Z", 1, 17),  // local mean times with seconds
            ("1919-12-31T12:00:00Z", 1, 17),  // Kathmandu: +05:41:16 → +05:30 at midnight
            ("2011-12-28T00:00:00Z", 4, 433), // Apia skips the 30th
            ("2018-11-03T00:00:00Z", 3, 433), // Sao Paulo's DST began at midnight
            ("2026-03-08T00:00:00Z", 3, 433),
            ("2026-10-24T00:00:00Z", 3, 433),
        ];
        let utc = PlatformClock::parse("UTC").unwrap();
        for z in zones {
            let clock = PlatformClock::parse(z).unwrap();
            let want = |at: DateTime<Utc>| {
                let l = clock.tz.from_utc_datetime(&at.naive_utc());
                (
                    l.format("%Y-%m-%d").to_string(),
                    l.format("%Y-%m").to_string(),
                )
            };
            let check = |at: DateTime<Utc>| {
                assert_eq!((clock.day(at), clock.month(at)), want(at), "{z} {at}");
            };
            for (start, days, step) in starts {
                let start: DateTime<Utc> = start.parse().unwrap();
                let mut at = start;
                while at < start + chrono::Duration::days(days) {
                    check(at);
                    utc.day(at); // another zone in between: the memo misses
                    check(at);
                    at += chrono::Duration::seconds(step);
                }
            }
            let mut at: DateTime<Utc> = "2025-01-01T00:00:00Z".parse().unwrap();
            while at.year() < 2027 {
                for s in [-61, -1, 0, 1, 59, 60, 1799, 1800] {
                    check(at + chrono::Duration::seconds(s));
                }
                at += chrono::Duration::hours(1);
            }
        }
    }

    /// The direct reading against chrono's `%Y-%m-%d` (the independent
    /// reading): every day of four centuries, impossible dates, and
    /// arbitrary strings of the same shape and of others.
    #[test]
    fn a_day_is_read_as_chrono_reads_it() {
        let chrono = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").ok();
        let mut d = chrono::NaiveDate::from_ymd_opt(1900, 1, 1).unwrap();
        while d.year() < 2300 {
            let s = d.format("%Y-%m-%d").to_string();
            assert_eq!(parse_day(&s), Some(d), "{s}");
            d = d.succ_opt().unwrap();
        }
        for s in [
            "2026-02-29",
            "2024-02-29",
            "2026-13-01",
            "2026-00-10",
            "2026-12-00",
            "2026-12-32",
            "0000-01-01",
            "9999-12-31",
            "2026-1-05",
            "2026-01-5",
            "+2026-01-05",
            "2026/01/05",
            "2026-01-05 ",
            " 2026-01-05",
            "",
            "2026-0a-05",
            "２０２６-01-05",
        ] {
            assert_eq!(parse_day(s), chrono(s), "{s:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn any_string_is_read_as_chrono_reads_it(s in "[0-9+-]{0,12}|[0-9]{4}-[0-9]{2}-[0-9]{2}|\\PC{0,12}") {
            let want = chrono::NaiveDate::parse_from_str(&s, "%Y-%m-%d").ok();
            proptest::prop_assert_eq!(parse_day(&s), want);
        }
    }

    /// The pushed digits against `format!` (the independent spelling), over
    /// every day of four centuries and the years it hands to `format!`.
    #[test]
    fn date_text_writes_what_format_writes() {
        let mut d = chrono::NaiveDate::from_ymd_opt(1900, 1, 1).unwrap();
        while d.year() < 2300 {
            let (y, m, dd) = (d.year(), d.month(), d.day());
            assert_eq!(date_text(y, m, Some(dd)), format!("{y:04}-{m:02}-{dd:02}"));
            assert_eq!(date_text(y, m, None), format!("{y:04}-{m:02}"));
            d = d.succ_opt().unwrap();
        }
        for y in [0, 7, 99, 999, 9999, 10_000, -1, 262_143] {
            assert_eq!(date_text(y, 3, Some(9)), format!("{y:04}-03-09"));
        }
    }

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
    fn month_bounds_are_platform_midnights() {
        let c = PlatformClock::parse("Asia/Shanghai").unwrap();
        let (s, e) = c.month_bounds("2026-12").unwrap();
        assert_eq!(s, Utc.with_ymd_and_hms(2026, 11, 30, 16, 0, 0).unwrap());
        assert_eq!(e, Utc.with_ymd_and_hms(2026, 12, 31, 16, 0, 0).unwrap());
        let (s, e) = c.day_bounds("2026-12-01").unwrap();
        assert_eq!(e - s, chrono::Duration::hours(24));
        assert_eq!(c.month(s), "2026-12");
        assert_eq!(previous_month("2026-01").as_deref(), Some("2025-12"));
        assert_eq!(days_in_month("2028-02"), Some(29));
        assert_eq!(days_in_month("2026-11"), Some(30));
        assert!(c.month_bounds("2026-13").is_none());
    }

    #[test]
    fn parses_months() {
        assert_eq!(parse_month("2026-11"), Some((2026, 11)));
        assert_eq!(parse_month("2026-13"), None);
        assert_eq!(parse_month("26-11"), None);
        assert!(PlatformClock::parse("Mars/Base").is_err());
    }

    #[test]
    fn the_zone_is_named_with_its_offset_and_months_have_a_phase() {
        let at = DateTime::<Utc>::from_timestamp(1_795_000_000, 0).unwrap();
        let sh = PlatformClock::parse("Asia/Shanghai").unwrap();
        assert_eq!(sh.zone_label(at), "Asia/Shanghai (UTC+08:00)");
        let ny = PlatformClock::parse("America/St_Johns").unwrap();
        assert!(
            ny.zone_label(at).starts_with("America/St_Johns (UTC-0"),
            "{}",
            ny.zone_label(at)
        );
        assert!(ny.zone_label(at).ends_with(":30)"), "{}", ny.zone_label(at));
        assert_eq!(
            PlatformClock::parse("UTC").unwrap().zone_label(at),
            "UTC (UTC+00:00)"
        );
        assert_eq!(
            sh.month_span("2026-12").unwrap(),
            "2026-12-01 00:00 – 2027-01-01 00:00"
        );
        assert_eq!(month_phase("2026-12", "2027-01"), Some(MonthPhase::Future));
        assert_eq!(month_phase("2026-12", "2026-12"), Some(MonthPhase::Current));
        assert_eq!(
            month_phase("2027-01", "2026-12"),
            Some(MonthPhase::Previous)
        );
        assert_eq!(month_phase("2026-12", "2026-10"), Some(MonthPhase::Past));
        assert_eq!(month_phase("2026-12", "2026-13"), None);
    }
}
