//! The dashboards' spend trend: this month so far beside last month, from
//! the daily spend of each (day of month → micro-USD), and the month-end
//! forecast the bills page shows.

use super::{forecast_while_running, BillRow, DayRow, Forecast, Totals};
use std::collections::BTreeMap;

/// This month's spend so far beside last month's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendTrend {
    /// This month, days 1 to today (today so far).
    pub month_to_date: i64,
    /// All of last month.
    pub last_month: i64,
    /// The days of this month that are over (today − 1): the change
    /// compares whole days with whole days, never today's part of a day
    /// with a whole one.
    pub complete_days: u32,
    /// This month's complete days.
    pub this_complete: i64,
    /// Last month's same days (all of it when it was shorter).
    pub last_complete: i64,
    /// `this_complete` against `last_complete`, in whole percent (rounded
    /// towards zero); None on the first day (no complete day yet) or when
    /// last month had spent nothing by then.
    pub change_pct: Option<i64>,
    /// Spend at this month's end, while it runs ([`forecast_while_running`]).
    pub forecast: Option<Forecast>,
}

/// The trend on day `today` (1-based) of a `days`-day month,
/// `secs_into_today` seconds into that day (platform time).
pub fn spend_trend(
    this: &BTreeMap<u32, i64>,
    last: &BTreeMap<u32, i64>,
    today: u32,
    days: u32,
    secs_into_today: u32,
) -> SpendTrend {
    let sum = |m: &BTreeMap<u32, i64>, upto: u32| -> i64 {
        m.range(..=upto)
            .fold(0i64, |a, (_, v)| a.saturating_add(*v))
    };
    let complete_days = today.saturating_sub(1);
    let this_complete = sum(this, complete_days);
    let last_complete = sum(last, complete_days);
    let change_pct = (complete_days > 0 && last_complete > 0).then(|| {
        let d = i128::from(this_complete) - i128::from(last_complete);
        i64::try_from(d * 100 / i128::from(last_complete)).unwrap_or(i64::MAX)
    });
    SpendTrend {
        month_to_date: sum(this, today),
        last_month: sum(last, u32::MAX),
        complete_days,
        this_complete,
        last_complete,
        change_pct,
        forecast: forecast_while_running(this, today, days, secs_into_today),
    }
}

/// Running totals of `daily` for days 1 to `upto`: the value of each day
/// is the spend up to and including it (days without spend carry the
/// total on).
pub fn cumulative(daily: &BTreeMap<u32, i64>, upto: u32) -> Vec<(u32, i64)> {
    let mut total = 0i64;
    (1..=upto)
        .map(|d| {
            total = total.saturating_add(daily.get(&d).copied().unwrap_or(0));
            (d, total)
        })
        .collect()
}

/// A month's spend per day of month from rows of any grain (`YYYY-MM-DD`
/// days; a malformed day is not counted).
pub fn spend_by_day<'a>(rows: impl IntoIterator<Item = (&'a str, i64)>) -> BTreeMap<u32, i64> {
    let mut m = BTreeMap::new();
    for (day, cost) in rows {
        if let Some(d) = day.get(8..10).and_then(|d| d.parse::<u32>().ok()) {
            let e: &mut i64 = m.entry(d).or_default();
            *e = e.saturating_add(cost);
        }
    }
    m
}

/// The day rows of an archived month summed per day.
pub fn totals_by_day(rows: &[DayRow]) -> BTreeMap<String, Totals> {
    let mut m: BTreeMap<String, Totals> = BTreeMap::new();
    for r in rows {
        m.entry(r.day.clone()).or_default().add(&r.totals);
    }
    m
}

/// The bill rows of an archived month summed per tenant.
pub fn totals_by_tenant(rows: &[BillRow]) -> BTreeMap<String, Totals> {
    let mut m: BTreeMap<String, Totals> = BTreeMap::new();
    for r in rows {
        m.entry(r.tenant_id.clone()).or_default().add(&r.totals);
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bill::ForecastBasis;

    fn days(v: &[(u32, i64)]) -> BTreeMap<u32, i64> {
        v.iter().copied().collect()
    }

    #[test]
    fn this_months_complete_days_are_compared_with_the_same_days_of_last_month() {
        let this = days(&[(1, 100), (2, 350), (3, 50)]);
        let last = days(&[(1, 100), (2, 300), (3, 200), (20, 1_000)]);
        let t = spend_trend(&this, &last, 3, 31, 3600);
        assert_eq!(t.month_to_date, 500);
        assert_eq!(t.complete_days, 2);
        assert_eq!((t.this_complete, t.last_complete), (450, 400));
        assert_eq!(t.last_month, 1_600);
        assert_eq!(t.change_pct, Some(12)); // 450 / 400 = +12.5 %
        let f = t.forecast.expect("the month runs");
        assert_eq!(f.basis, ForecastBasis::CompleteDays(2));
        // 450 over two complete days: 225 a day; today's 50 counts as 225.
        assert_eq!(f.month_end, 450 + 225 + 225 * 28);
    }

    #[test]
    fn today_is_not_compared_with_a_whole_day() {
        // Early on day 2, today's part of a day would read as a fall.
        let t = spend_trend(
            &days(&[(1, 100), (2, 1)]),
            &days(&[(1, 100), (2, 100)]),
            2,
            30,
            60,
        );
        assert_eq!(t.change_pct, Some(0));
        assert_eq!(t.month_to_date, 101);
    }

    #[test]
    fn the_first_day_and_a_month_after_a_quiet_one_have_no_ratio() {
        let first = spend_trend(&days(&[(1, 5)]), &days(&[(1, 100)]), 1, 30, 7200);
        assert_eq!((first.complete_days, first.change_pct), (0, None));
        let quiet = spend_trend(&days(&[(1, 5), (2, 5)]), &BTreeMap::new(), 2, 30, 7200);
        assert_eq!((quiet.change_pct, quiet.last_month), (None, 0));
        let fall = spend_trend(&days(&[(1, 25)]), &days(&[(1, 100)]), 2, 30, 7200);
        assert_eq!(fall.change_pct, Some(-75));
    }

    #[test]
    fn a_longer_month_is_compared_with_all_of_a_shorter_one() {
        // Day 31 of March against February (28 days): all of February.
        let last: BTreeMap<u32, i64> = (1..=28).map(|d| (d, 10)).collect();
        let t = spend_trend(&days(&[(30, 7)]), &last, 31, 31, 0);
        assert_eq!(t.last_complete, 280);
        assert_eq!(t.forecast, None, "the last day: the month is all but over");
    }

    #[test]
    fn running_totals_carry_over_quiet_days() {
        assert_eq!(
            cumulative(&days(&[(1, 5), (3, 2)]), 4),
            vec![(1, 5), (2, 5), (3, 7), (4, 7)]
        );
        assert!(cumulative(&days(&[(1, 5)]), 0).is_empty());
    }

    #[test]
    fn spend_is_summed_per_day_of_month() {
        let m = spend_by_day([
            ("2026-12-01", 3),
            ("2026-12-01", 4),
            ("2026-12-15", 1),
            ("bad", 9),
        ]);
        assert_eq!(m, days(&[(1, 7), (15, 1)]));
    }
}
