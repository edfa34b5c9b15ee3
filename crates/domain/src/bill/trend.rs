//! The dashboards' spend trend: this month so far beside last month, from
//! the daily spend of each (day of month → micro-USD), and the month-end
//! forecast the bills page shows.

use super::{forecast, BillRow, DayRow, Forecast, Totals};
use std::collections::BTreeMap;

/// This month's spend so far beside last month's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpendTrend {
    /// This month, days 1 to today.
    pub month_to_date: i64,
    /// All of last month.
    pub last_month: i64,
    /// Last month's first `today` days (all of it when it was shorter):
    /// the same point of the month, what `month_to_date` is compared with.
    pub last_month_to_date: i64,
    /// `month_to_date` against `last_month_to_date`, in whole percent
    /// (rounded towards zero); None when last month had spent nothing by
    /// then (no ratio to give).
    pub change_pct: Option<i64>,
    /// Spend at this month's end; None once the month is over or before it
    /// began (`today` 0).
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
    let month_to_date = sum(this, today);
    let last_month_to_date = sum(last, today);
    let change_pct = (last_month_to_date > 0).then(|| {
        let d = i128::from(month_to_date) - i128::from(last_month_to_date);
        i64::try_from(d * 100 / i128::from(last_month_to_date)).unwrap_or(i64::MAX)
    });
    SpendTrend {
        month_to_date,
        last_month: sum(last, u32::MAX),
        last_month_to_date,
        change_pct,
        forecast: (today > 0 && today < days).then(|| forecast(this, today, days, secs_into_today)),
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
    fn this_month_is_compared_with_the_same_days_of_last_month() {
        let this = days(&[(1, 100), (2, 300), (3, 50)]);
        let last = days(&[(1, 100), (2, 100), (3, 200), (20, 1_000)]);
        let t = spend_trend(&this, &last, 3, 31, 3600);
        assert_eq!(t.month_to_date, 450);
        assert_eq!(t.last_month_to_date, 400);
        assert_eq!(t.last_month, 1_400);
        assert_eq!(t.change_pct, Some(12)); // 450 / 400 = +12.5 %
        let f = t.forecast.expect("the month runs");
        assert_eq!(f.basis, ForecastBasis::CompleteDays(2));
        // 400 over two complete days: 200 a day; today's 50 counts as 200.
        assert_eq!(f.month_end, 400 + 200 + 200 * 28);
    }

    #[test]
    fn a_month_after_a_quiet_one_has_no_ratio_and_a_fall_is_negative() {
        let t = spend_trend(&days(&[(1, 5)]), &BTreeMap::new(), 1, 30, 7200);
        assert_eq!(t.change_pct, None);
        assert_eq!(t.last_month, 0);
        let f = spend_trend(&days(&[(1, 25)]), &days(&[(1, 100)]), 1, 30, 7200);
        assert_eq!(f.change_pct, Some(-75));
    }

    #[test]
    fn a_longer_month_is_compared_with_all_of_a_shorter_one() {
        // Day 31 of March against February (28 days): all of February.
        let last: BTreeMap<u32, i64> = (1..=28).map(|d| (d, 10)).collect();
        let t = spend_trend(&days(&[(31, 7)]), &last, 31, 31, 0);
        assert_eq!(t.last_month_to_date, 280);
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
