//! A bill grouped below the app by a tag's value or by end user: the rows
//! the books hand over, merged into lines that sum to the bill.

use super::Totals;
use crate::money::MicroUsd;
use serde::Serialize;
use std::collections::BTreeMap;

/// What a bill is grouped by below the app (`group_by=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupBy {
    /// One tag key's values (`tag:project`).
    Tag(String),
    /// The end users (`end_user`).
    EndUser,
    /// The names clients asked for through a model alias (`asked_model`):
    /// a line's value is the asked name, [`ASKED_AS`], then the served
    /// catalog name; requests that asked for the catalog name itself are
    /// the rest (no value).
    AskedModel,
}

/// Between the asked and the served name in a line of a bill grouped by
/// the name asked for (`claude-opus-4-8 → house-sonnet`).
pub const ASKED_AS: &str = " → ";

impl GroupBy {
    pub fn parse(s: &str) -> Option<GroupBy> {
        match s {
            "end_user" => Some(GroupBy::EndUser),
            "asked_model" => Some(GroupBy::AskedModel),
            _ => {
                let key = s.strip_prefix("tag:")?;
                crate::attribution::parse_header(&format!("{key}=x"))
                    .ok()
                    .filter(|t| t.len() == 1)
                    .map(|_| GroupBy::Tag(key.to_string()))
            }
        }
    }

    pub fn as_param(&self) -> String {
        match self {
            GroupBy::Tag(k) => format!("tag:{k}"),
            GroupBy::EndUser => "end_user".into(),
            GroupBy::AskedModel => "asked_model".into(),
        }
    }
}

/// A month's usage of one tenant for one value of the grouping (None: the
/// requests without that tag, or without an end user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttributedRow {
    pub tenant_id: String,
    pub value: Option<String>,
    pub totals: Totals,
}

/// One line of a bill grouped by a tag or by end user.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AttributedLine {
    pub tenant_id: String,
    pub value: Option<String>,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_usd: MicroUsd,
    pub cost_micro: i64,
}

/// `valued` (rows of one value each) completed with each tenant's rest:
/// its total minus its valued rows, as the row without a value (omitted
/// when nothing is left).
pub fn with_rest(
    totals: &BTreeMap<String, Totals>,
    mut valued: Vec<AttributedRow>,
) -> Vec<AttributedRow> {
    for (tenant, total) in totals {
        let mut rest = *total;
        for r in valued.iter().filter(|r| &r.tenant_id == tenant) {
            rest.sub(&r.totals);
        }
        if rest != Totals::default() {
            valued.push(AttributedRow {
                tenant_id: tenant.clone(),
                value: None,
                totals: rest,
            });
        }
    }
    valued
}

/// The lines in (tenant, value) order, rows of one pair merged; the costs
/// sum to the tenants' bill lines ([`super::line_costs`]).
pub fn attributed_lines(rows: &[AttributedRow]) -> Vec<AttributedLine> {
    let mut m: BTreeMap<(&str, Option<&str>), Totals> = BTreeMap::new();
    for r in rows {
        m.entry((r.tenant_id.as_str(), r.value.as_deref()))
            .or_default()
            .add(&r.totals);
    }
    let weights: Vec<(&str, i128)> = m
        .iter()
        .map(|((t, _), x)| (*t, i128::from(x.cost_pico)))
        .collect();
    let costs = super::line_costs(&weights);
    m.into_iter()
        .zip(costs)
        .map(|(((t, v), x), cost)| AttributedLine {
            tenant_id: t.to_string(),
            value: v.map(str::to_string),
            requests: x.requests,
            input_tokens: x.input_tokens,
            output_tokens: x.output_tokens,
            cost_usd: MicroUsd(cost),
            cost_micro: cost,
        })
        .collect()
}

/// A month's day rows with their tags, from `all` (one row per tenant ×
/// app × model × day, without tags) and `tagged` (the tagged requests'
/// rows of the same grain, one per tag set): each day row becomes its
/// tagged rows and the rest without tags (omitted when nothing is left),
/// so the rows still sum to `all`. How a closed month's FOCUS export gets
/// its `Tags` from the archive, where only attributed requests keep theirs.
pub fn with_tagged(all: Vec<super::DayRow>, tagged: Vec<super::DayRow>) -> Vec<super::DayRow> {
    type Grain = (String, String, String, String);
    let grain = |r: &super::DayRow| -> Grain {
        (
            r.tenant_id.clone(),
            r.day.clone(),
            r.app_id.clone(),
            r.model.clone(),
        )
    };
    let mut split: BTreeMap<Grain, Totals> = BTreeMap::new();
    for t in &tagged {
        split.entry(grain(t)).or_default().add(&t.totals);
    }
    let mut out = Vec::with_capacity(all.len() + tagged.len());
    for mut r in all {
        if let Some(t) = split.get(&grain(&r)) {
            r.totals.sub(t);
        }
        if r.totals != Totals::default() {
            out.push(r);
        }
    }
    out.extend(tagged);
    out.sort_by(|a, b| (grain(a), &a.tags).cmp(&(grain(b), &b.tags)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bill::attributed_csv;

    fn day(
        tenant: &str,
        day: &str,
        tags: &[(&str, &str)],
        requests: i64,
        cost: i64,
    ) -> crate::bill::DayRow {
        crate::bill::DayRow {
            tenant_id: tenant.into(),
            app_id: "a".into(),
            model: "m".into(),
            day: day.into(),
            tags: tags
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            totals: Totals {
                requests,
                input_tokens: 10 * requests,
                output_tokens: requests,
                cost_micro: cost,
                cost_pico: cost * 1_000_000,
                charges: Default::default(),
            },
        }
    }

    #[test]
    fn tagged_rows_split_their_day_and_the_rest_keeps_no_tags() {
        let all = vec![
            day("t", "2026-03-01", &[], 5, 500),
            day("t", "2026-03-02", &[], 2, 200),
            day("u", "2026-03-01", &[], 1, 100),
        ];
        let tagged = vec![
            day("t", "2026-03-01", &[("project", "apollo")], 2, 150),
            day("t", "2026-03-01", &[("project", "gemini")], 1, 50),
            // The whole day tagged: no rest row.
            day("t", "2026-03-02", &[("env", "dev")], 2, 200),
        ];
        let rows = with_tagged(all.clone(), tagged);
        let got: Vec<(&str, &str, String, i64, i64)> = rows
            .iter()
            .map(|r| {
                (
                    r.tenant_id.as_str(),
                    r.day.as_str(),
                    crate::attribution::tags_json(&r.tags),
                    r.totals.requests,
                    r.totals.cost_micro,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("t", "2026-03-01", "{}".to_string(), 2, 300),
                (
                    "t",
                    "2026-03-01",
                    r#"{"project":"apollo"}"#.to_string(),
                    2,
                    150
                ),
                (
                    "t",
                    "2026-03-01",
                    r#"{"project":"gemini"}"#.to_string(),
                    1,
                    50
                ),
                ("t", "2026-03-02", r#"{"env":"dev"}"#.to_string(), 2, 200),
                ("u", "2026-03-01", "{}".to_string(), 1, 100),
            ]
        );
        // The rows still sum to the month.
        let sum = |rs: &[crate::bill::DayRow]| rs.iter().map(|r| r.totals.cost_micro).sum::<i64>();
        assert_eq!(sum(&rows), sum(&all));
    }

    #[test]
    fn group_by_reads_a_tag_key_or_end_user() {
        assert_eq!(
            GroupBy::parse("tag:project"),
            Some(GroupBy::Tag("project".into()))
        );
        assert_eq!(GroupBy::parse("end_user"), Some(GroupBy::EndUser));
        assert_eq!(GroupBy::parse("asked_model"), Some(GroupBy::AskedModel));
        for g in [
            GroupBy::EndUser,
            GroupBy::AskedModel,
            GroupBy::Tag("p".into()),
        ] {
            assert_eq!(GroupBy::parse(&g.as_param()), Some(g));
        }
        for bad in ["tag:", "tag:Project", "tag:a,b", "tag:a=b", "project", ""] {
            assert_eq!(GroupBy::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn attributed_lines_merge_and_sum_to_the_bill() {
        let r = |t: &str, v: Option<&str>, c: i64| AttributedRow {
            tenant_id: t.into(),
            value: v.map(str::to_string),
            totals: Totals {
                requests: 1,
                input_tokens: 2,
                output_tokens: 3,
                cost_micro: c,
                cost_pico: c * 1_000_000,
                charges: Default::default(),
            },
        };
        let rows = [
            r("a", Some("apollo"), 10),
            r("a", None, 1),
            r("a", Some("apollo"), 5),
            r("a", Some("gemini"), 7),
        ];
        let lines = attributed_lines(&rows);
        let got: Vec<_> = lines
            .iter()
            .map(|l| (l.value.as_deref(), l.requests, l.cost_micro))
            .collect();
        assert_eq!(
            got,
            vec![
                (None, 1, 1),
                (Some("apollo"), 2, 15),
                (Some("gemini"), 1, 7)
            ]
        );
        let csv = attributed_csv("2026-11", &GroupBy::Tag("project".into()), &rows, &[]);
        let mut l = csv.lines();
        assert_eq!(
            l.next().unwrap(),
            "period,tenant_id,tenant_name,cost_center,tag:project,requests,input_tokens,output_tokens,cost_usd"
        );
        assert_eq!(l.next().unwrap(), "2026-11,a,,,,1,2,3,0.000001");
        assert_eq!(l.next().unwrap(), "2026-11,a,,,apollo,2,4,6,0.000015");
    }
}
