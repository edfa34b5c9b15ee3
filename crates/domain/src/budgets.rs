//! Budgets beyond the calendar month's two: a hard limit on the tokens,
//! the cost or the number of requests of a tenant, app or key over a day,
//! a week, a month or a quarter of the platform calendar — on every model,
//! or on a few models only ("$500 a month on gpt-4o and o3", "100 requests
//! a day"). Several may sit on one scope; each is checked and taken in the
//! same all-or-nothing hold as the monthly budgets (docs/limits.md).
//!
//! Pure: the budgets, their checks and their text form, and the periods
//! of the calendar. Which of a chain's budgets count a request, and the
//! words of a refusal: `domain::chain_budgets`.

use crate::money::MicroUsd;
use crate::period::PlatformClock;
use chrono::{DateTime, Datelike, Duration, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};

/// The most budgets one scope may carry.
pub const MAX_BUDGETS: usize = 16;
/// The most models one budget may name.
pub const MAX_MODELS: usize = 16;

/// A budget's period on the platform calendar (`PlatformClock`: its time
/// zone, first day of the week, first month of the fiscal year).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetPeriod {
    Day,
    Week,
    Month,
    Quarter,
}

impl BudgetPeriod {
    pub const ALL: [BudgetPeriod; 4] = [
        BudgetPeriod::Day,
        BudgetPeriod::Week,
        BudgetPeriod::Month,
        BudgetPeriod::Quarter,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "day",
            BudgetPeriod::Week => "week",
            BudgetPeriod::Month => "month",
            BudgetPeriod::Quarter => "quarter",
        }
    }

    /// The adjective reason codes and messages use: `daily`, `weekly` …
    pub fn adjective(self) -> &'static str {
        match self {
            BudgetPeriod::Day => "daily",
            BudgetPeriod::Week => "weekly",
            BudgetPeriod::Month => "monthly",
            BudgetPeriod::Quarter => "quarterly",
        }
    }

    fn letter(self) -> char {
        match self {
            BudgetPeriod::Day => 'd',
            BudgetPeriod::Week => 'w',
            BudgetPeriod::Month => 'm',
            BudgetPeriod::Quarter => 'q',
        }
    }

    /// How long a period's counters are kept in Redis: the period and a
    /// margin (a hold taken in its last second settles after it ends).
    pub fn ttl_secs(self) -> i64 {
        let days = match self {
            BudgetPeriod::Day => 3,
            BudgetPeriod::Week => 10,
            BudgetPeriod::Month => 35,
            BudgetPeriod::Quarter => 95,
        };
        days * 86_400
    }
}

/// What a budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetKind {
    Tokens,
    Cost,
    Requests,
}

impl BudgetKind {
    pub const ALL: [BudgetKind; 3] = [BudgetKind::Tokens, BudgetKind::Cost, BudgetKind::Requests];

    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Tokens => "tokens",
            BudgetKind::Cost => "cost",
            BudgetKind::Requests => "requests",
        }
    }

    /// The engine's index of this kind in a budget's limits (0-based).
    pub fn from_index(i: usize) -> Option<Self> {
        Self::ALL.get(i).copied()
    }
}

/// One budget of a scope: any of its three amounts (at least one), over
/// its period, on every model or on `models` only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    pub period: BudgetPeriod,
    /// The models it counts (their catalog ids); absent: every model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<MicroUsd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<i64>,
}

/// Why a scope's budgets are refused: the budget (0-based) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("budgets[{index}]: {problem}")]
pub struct BudgetError {
    pub index: usize,
    pub problem: String,
}

impl Budget {
    /// Whether it counts a request served by `model`.
    pub fn counts(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|m| m.iter().any(|x| x == model))
    }

    /// Its limits in the engine's order (tokens, micro-USD, requests);
    /// -1 = none.
    pub fn engine_limits(&self) -> [i64; 3] {
        [
            self.tokens.unwrap_or(-1),
            self.cost_usd.map_or(-1, |c| c.0),
            self.requests.unwrap_or(-1),
        ]
    }

    /// The models it counts, sorted, as one text (`*` for every model):
    /// what tells two budgets of one scope and period apart.
    pub fn model_key(&self) -> String {
        match &self.models {
            None => "*".into(),
            Some(m) => {
                let mut m = m.clone();
                m.sort();
                m.join(",")
            }
        }
    }
}

/// Checks a scope's budgets: at most [`MAX_BUDGETS`], each with at least
/// one amount and none negative, 1 to [`MAX_MODELS`] distinct model names
/// of 1–128 characters when it names models, and no two with the same
/// period and models. Whether the models exist is the caller's check (the
/// catalog's).
pub fn validate(budgets: &[Budget]) -> Result<(), BudgetError> {
    let err = |index, problem: &str| BudgetError {
        index,
        problem: problem.into(),
    };
    if budgets.len() > MAX_BUDGETS {
        return Err(err(
            MAX_BUDGETS,
            "too many budgets (at most 16 on one scope)",
        ));
    }
    let mut seen = std::collections::HashSet::new();
    for (i, b) in budgets.iter().enumerate() {
        if b.tokens.is_none() && b.cost_usd.is_none() && b.requests.is_none() {
            return Err(err(i, "set tokens, cost_usd or requests"));
        }
        if [b.tokens, b.cost_usd.map(|c| c.0), b.requests]
            .iter()
            .any(|v| v.is_some_and(|v| v < 0))
        {
            return Err(err(i, "an amount must not be negative"));
        }
        if let Some(models) = &b.models {
            if models.is_empty() || models.len() > MAX_MODELS {
                return Err(err(
                    i,
                    "name 1 to 16 models, or leave models out for every model",
                ));
            }
            if models
                .iter()
                .any(|m| m.is_empty() || m.chars().count() > 128 || m.chars().any(char::is_control))
            {
                return Err(err(
                    i,
                    "a model name is empty, too long or has control characters",
                ));
            }
            let distinct: std::collections::HashSet<&String> = models.iter().collect();
            if distinct.len() != models.len() {
                return Err(err(i, "a model is named twice"));
            }
        }
        if !seen.insert((b.period, b.model_key())) {
            return Err(err(
                i,
                "another budget has the same period and models: put its amounts in one budget",
            ));
        }
    }
    Ok(())
}

/// Platform days `[first, end)`: a period as the ledger's days count it.
pub type Days = (NaiveDate, NaiveDate);

/// Budgets as one line of text, for a form field: `;` between budgets,
/// each its period, `on` and its models (comma-separated) when it names
/// some, then its amounts: `month on gpt-4o,o3 cost=500; day requests=100` (cost in USD).
pub fn to_text(budgets: &[Budget]) -> String {
    budgets
        .iter()
        .map(|b| {
            let mut s = b.period.as_str().to_string();
            if let Some(m) = &b.models {
                s.push_str(" on ");
                s.push_str(&m.join(","));
            }
            if let Some(t) = b.tokens {
                s.push_str(&format!(" tokens={t}"));
            }
            if let Some(c) = b.cost_usd {
                // The decimal USD of the JSON, without trailing zeros.
                let usd = c.to_string();
                let usd = usd.trim_end_matches('0').trim_end_matches('.');
                s.push_str(&format!(" cost={usd}"));
            }
            if let Some(r) = b.requests {
                s.push_str(&format!(" requests={r}"));
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Reads [`to_text`]'s form back (`;` or new lines between budgets); the
/// error names the budget (0-based) that does not read. Not validated:
/// see [`validate`].
pub fn from_text(text: &str) -> Result<Vec<Budget>, BudgetError> {
    let mut out = Vec::new();
    for (index, item) in text
        .split([';', '\n'])
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .enumerate()
    {
        let err = |problem: &str| BudgetError {
            index,
            problem: problem.into(),
        };
        let mut words = item.split_whitespace();
        let period = match words.next().unwrap_or_default() {
            "day" => BudgetPeriod::Day,
            "week" => BudgetPeriod::Week,
            "month" => BudgetPeriod::Month,
            "quarter" => BudgetPeriod::Quarter,
            _ => return Err(err("start with day, week, month or quarter")),
        };
        let mut b = Budget {
            period,
            models: None,
            tokens: None,
            cost_usd: None,
            requests: None,
        };
        let mut words = words.peekable();
        if words.peek() == Some(&"on") {
            words.next();
            let models = words
                .next()
                .ok_or_else(|| err("name the models after 'on'"))?;
            b.models = Some(models.split(',').map(str::to_string).collect());
        }
        for w in words {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| err("amounts read tokens=…, cost=… or requests=…"))?;
            match k {
                "tokens" => b.tokens = Some(v.parse().map_err(|_| err("tokens: a whole number"))?),
                "requests" => {
                    b.requests = Some(v.parse().map_err(|_| err("requests: a whole number"))?)
                }
                "cost" => {
                    b.cost_usd =
                        Some(MicroUsd::from_usd_str(v).map_err(|_| err("cost: an amount in USD"))?)
                }
                _ => return Err(err("amounts read tokens=…, cost=… or requests=…")),
            }
        }
        out.push(b);
    }
    Ok(out)
}

/// The period of `p` that `at` falls in: its id, start and end.
pub fn period_of(
    clock: &PlatformClock,
    p: BudgetPeriod,
    at: DateTime<Utc>,
) -> Option<(String, DateTime<Utc>, DateTime<Utc>)> {
    let local = clock.tz.from_utc_datetime(&at.naive_utc()).date_naive();
    let (start, end) = span_of(clock, p, local)?;
    let id = format!("{}:{}", p.letter(), label(p, start));
    Some((id, midnight(clock, start)?, midnight(clock, end)?))
}

/// The start and end of a period by its id (what [`period_of`] returns).
pub fn period_bounds(clock: &PlatformClock, id: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let (letter, rest) = id.split_once(':')?;
    let p = BudgetPeriod::ALL
        .into_iter()
        .find(|p| p.letter().to_string() == letter)?;
    let start = match p {
        BudgetPeriod::Day | BudgetPeriod::Week => crate::period::parse_day(rest)?,
        BudgetPeriod::Month | BudgetPeriod::Quarter => {
            let (y, m) = crate::period::parse_month(rest)?;
            NaiveDate::from_ymd_opt(y, m, 1)?
        }
    };
    let (s, e) = span_of(clock, p, start)?;
    if s != start {
        return None;
    }
    Some((midnight(clock, s)?, midnight(clock, e)?))
}

/// The local dates a period containing `d` starts and ends (exclusive).
pub(crate) fn span_of(
    clock: &PlatformClock,
    p: BudgetPeriod,
    d: NaiveDate,
) -> Option<(NaiveDate, NaiveDate)> {
    Some(match p {
        BudgetPeriod::Day => (d, d.succ_opt()?),
        BudgetPeriod::Week => {
            let back = d.weekday().days_since(clock.week_start);
            let start = d - Duration::days(i64::from(back));
            (start, start + Duration::days(7))
        }
        BudgetPeriod::Month => {
            let start = d.with_day(1)?;
            (start, add_months(start, 1)?)
        }
        BudgetPeriod::Quarter => {
            let first = d.with_day(1)?;
            // Months since the fiscal year's start month, 0–11.
            let into = (d.month() as i32 - clock.fiscal_start as i32).rem_euclid(12) as u32;
            let start = sub_months(first, into % 3)?;
            (start, add_months(start, 3)?)
        }
    })
}

fn add_months(d: NaiveDate, n: u32) -> Option<NaiveDate> {
    d.checked_add_months(chrono::Months::new(n))
}

fn sub_months(d: NaiveDate, n: u32) -> Option<NaiveDate> {
    d.checked_sub_months(chrono::Months::new(n))
}

fn label(p: BudgetPeriod, start: NaiveDate) -> String {
    match p {
        BudgetPeriod::Day | BudgetPeriod::Week => start.format("%Y-%m-%d").to_string(),
        BudgetPeriod::Month | BudgetPeriod::Quarter => start.format("%Y-%m").to_string(),
    }
}

fn midnight(clock: &PlatformClock, d: NaiveDate) -> Option<DateTime<Utc>> {
    clock.local_midnight(d.year(), d.month(), d.day())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn clock() -> PlatformClock {
        PlatformClock::parse("Asia/Shanghai").unwrap()
    }

    pub(crate) fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    pub(crate) fn budget(
        period: BudgetPeriod,
        models: Option<&[&str]>,
        cost: Option<i64>,
    ) -> Budget {
        Budget {
            period,
            models: models.map(|m| m.iter().map(|s| s.to_string()).collect()),
            tokens: None,
            cost_usd: cost.map(MicroUsd),
            requests: None,
        }
    }

    #[test]
    fn periods_follow_the_platform_calendar() {
        let c = clock();
        // 2026-12-06 23:30 in Shanghai is a Sunday; UTC says 15:30.
        let t = at("2026-12-06T15:30:00Z");
        let (id, s, e) = period_of(&c, BudgetPeriod::Day, t).unwrap();
        assert_eq!(id, "d:2026-12-06");
        assert_eq!(s, at("2026-12-05T16:00:00Z"));
        assert_eq!(e, at("2026-12-06T16:00:00Z"));
        // Weeks start on Monday by default: Monday 2026-11-30.
        let (id, s, e) = period_of(&c, BudgetPeriod::Week, t).unwrap();
        assert_eq!(id, "w:2026-11-30");
        assert_eq!(s, at("2026-11-29T16:00:00Z"));
        assert_eq!(
            e,
            at("2026-12-06T16:00:00Z"),
            "the next Monday, local midnight"
        );
        // … or on Sunday: that Sunday itself.
        let sunday = c.with_calendar("sunday", 1).unwrap();
        assert_eq!(
            period_of(&sunday, BudgetPeriod::Week, t).unwrap().0,
            "w:2026-12-06"
        );
        assert_eq!(
            period_of(&c, BudgetPeriod::Month, t).unwrap().0,
            "m:2026-12"
        );
        // Calendar quarters, and fiscal ones starting in April.
        assert_eq!(
            period_of(&c, BudgetPeriod::Quarter, t).unwrap().0,
            "q:2026-10"
        );
        let april = c.with_calendar("mon", 4).unwrap();
        let (id, s, e) =
            period_of(&april, BudgetPeriod::Quarter, at("2027-03-31T00:00:00Z")).unwrap();
        assert_eq!(id, "q:2027-01");
        assert_eq!(
            (s, e),
            (at("2026-12-31T16:00:00Z"), at("2027-03-31T16:00:00Z"))
        );
        assert_eq!(
            period_of(&april, BudgetPeriod::Quarter, at("2027-04-01T00:00:00Z"))
                .unwrap()
                .0,
            "q:2027-04"
        );
        let nov = c.with_calendar("mon", 11).unwrap();
        assert_eq!(
            period_of(&nov, BudgetPeriod::Quarter, at("2027-01-15T00:00:00Z"))
                .unwrap()
                .0,
            "q:2026-11"
        );
        // Bounds read back from the id.
        for p in BudgetPeriod::ALL {
            let (id, s, e) = period_of(&april, p, t).unwrap();
            assert_eq!(period_bounds(&april, &id), Some((s, e)), "{id}");
        }
        assert_eq!(
            period_bounds(&c, "w:2026-12-01"),
            None,
            "a Tuesday starts no week"
        );
        assert_eq!(period_bounds(&c, "x:2026-12"), None);
        assert!(c.with_calendar("someday", 1).is_err());
        assert!(c.with_calendar("mon", 13).is_err());
    }

    #[test]
    fn validation_names_the_budget_at_fault() {
        let ok = budget(BudgetPeriod::Day, None, Some(1));
        assert_eq!(validate(std::slice::from_ref(&ok)), Ok(()));
        let empty = budget(BudgetPeriod::Day, Some(&["a"]), None);
        assert_eq!(validate(&[ok.clone(), empty]).unwrap_err().index, 1);
        let negative = Budget {
            tokens: Some(-5),
            ..ok.clone()
        };
        assert!(validate(&[negative])
            .unwrap_err()
            .problem
            .contains("negative"));
        let minus_one = Budget {
            requests: Some(-1),
            ..ok.clone()
        };
        assert!(
            validate(&[minus_one]).is_err(),
            "-1 is not 'none' when written"
        );
        let same = budget(BudgetPeriod::Day, None, Some(2));
        assert!(validate(&[ok.clone(), same])
            .unwrap_err()
            .problem
            .contains("same period"));
        let ab = budget(BudgetPeriod::Day, Some(&["b", "a"]), Some(1));
        let ba = budget(BudgetPeriod::Day, Some(&["a", "b"]), Some(1));
        assert!(
            validate(&[ab, ba]).is_err(),
            "the same models in another order"
        );
        let twice = budget(BudgetPeriod::Day, Some(&["a", "a"]), Some(1));
        assert!(validate(&[twice]).is_err());
        let many = vec![ok; MAX_BUDGETS + 1];
        assert!(validate(&many).is_err());
        let json = r#"[{"period":"week","models":["gpt-4o"],"cost_usd":"500","requests":10}]"#;
        let parsed: Vec<Budget> = serde_json::from_str(json).unwrap();
        assert_eq!(parsed[0].engine_limits(), [-1, 500_000_000, 10]);
        assert!(
            serde_json::from_str::<Vec<Budget>>(r#"[{"period":"fortnight","tokens":1}]"#).is_err()
        );
    }

    #[test]
    fn budgets_read_back_from_their_text() {
        let b = vec![
            Budget {
                tokens: Some(1_000),
                cost_usd: Some(MicroUsd(500_000_000)),
                ..budget(BudgetPeriod::Month, Some(&["gpt-4o", "o3"]), None)
            },
            Budget {
                requests: Some(100),
                ..budget(BudgetPeriod::Day, None, None)
            },
        ];
        let text = to_text(&b);
        assert_eq!(
            text,
            "month on gpt-4o,o3 tokens=1000 cost=500; day requests=100"
        );
        assert_eq!(from_text(&text).unwrap(), b);
        assert_eq!(from_text("  ").unwrap(), vec![]);
        assert_eq!(
            from_text("day tokens=1;\nfortnight tokens=2")
                .unwrap_err()
                .index,
            1
        );
        assert!(from_text("day tokens=x").is_err());
        assert!(from_text("day on").is_err());
        assert!(from_text("week cost=abc").is_err());
        assert!(
            from_text("week cost_usd=1").is_err(),
            "the JSON's name is not the text's"
        );
    }
}
