//! A request's cost split into the components a provider bills it for
//! (docs/billing.md, "Charge components"): how many of each (tokens or
//! calls) and what each cost, exactly, in pico-USD. The price sheet makes
//! them ([`PriceSheet::charges`](crate::pricing::PriceSheet::charges)); the ledger
//! keeps them on every row; rollups, bills, CSV and FOCUS sum them. A
//! request's exact cost *is* the sum of its components, so a bill grouped
//! by component adds up to the bill.

use crate::money::apportion;
use serde::{Deserialize, Serialize};

/// What a provider bills for. Each token is in exactly one component:
/// uncached text input, cached input, cache writes by TTL (Anthropic's 5
/// minutes and 1 hour, OpenAI's 30 minutes and 12 hours), audio and image
/// input, text output (reasoning included: it is billed as output), audio
/// and image output; server-side tool calls are counted in calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Input,
    CachedInput,
    CacheWrite5m,
    CacheWrite1h,
    CacheWrite30m,
    CacheWrite12h,
    AudioInput,
    ImageInput,
    Output,
    AudioOutput,
    ImageOutput,
    WebSearch,
}

/// How many components there are.
pub const N_COMPONENTS: usize = 12;

/// The components before OpenAI's cache-write TTLs (migration 0028), in
/// their order then: the layout of the ClickHouse archive's `charges`
/// arrays written before them (2 × 10 numbers), read by
/// [`Charges::from_slice`].
const BEFORE_0028: [Component; 10] = [
    Component::Input,
    Component::CachedInput,
    Component::CacheWrite5m,
    Component::CacheWrite1h,
    Component::AudioInput,
    Component::ImageInput,
    Component::Output,
    Component::AudioOutput,
    Component::ImageOutput,
    Component::WebSearch,
];

impl Component {
    /// Every component, in the order the ledger stores them.
    pub const ALL: [Component; N_COMPONENTS] = [
        Component::Input,
        Component::CachedInput,
        Component::CacheWrite5m,
        Component::CacheWrite1h,
        Component::CacheWrite30m,
        Component::CacheWrite12h,
        Component::AudioInput,
        Component::ImageInput,
        Component::Output,
        Component::AudioOutput,
        Component::ImageOutput,
        Component::WebSearch,
    ];

    /// The name in JSON, CSV, FOCUS and the rollups' column names.
    pub fn name(self) -> &'static str {
        match self {
            Component::Input => "input",
            Component::CachedInput => "cached_input",
            Component::CacheWrite5m => "cache_write_5m",
            Component::CacheWrite1h => "cache_write_1h",
            Component::CacheWrite30m => "cache_write_30m",
            Component::CacheWrite12h => "cache_write_12h",
            Component::AudioInput => "audio_input",
            Component::ImageInput => "image_input",
            Component::Output => "output",
            Component::AudioOutput => "audio_output",
            Component::ImageOutput => "image_output",
            Component::WebSearch => "web_search",
        }
    }

    pub fn parse(s: &str) -> Option<Component> {
        Component::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The unit its quantity counts (FOCUS `PricingUnit`).
    pub fn unit(self) -> &'static str {
        match self {
            Component::WebSearch => "calls",
            _ => "tokens",
        }
    }

    /// Its place in [`Charges`]' arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Quantities and exact costs per [`Component`] (indexed by
/// [`Component::index`]). Costs are pico-USD, each ≥ 0. In JSON (the
/// outbox, the API) only the components present, by name:
/// `{"input":[2000,6000000000],"output":[1000,15000000000]}` — (quantity,
/// pico-USD) pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Charges {
    pub quantity: [i64; N_COMPONENTS],
    pub pico: [i64; N_COMPONENTS],
}

impl Charges {
    /// The exact cost: the sum of the components.
    pub fn total_pico(&self) -> i128 {
        self.pico.iter().map(|&p| i128::from(p)).sum()
    }

    pub fn quantity_of(&self, c: Component) -> i64 {
        self.quantity[c.index()]
    }

    pub fn pico_of(&self, c: Component) -> i64 {
        self.pico[c.index()]
    }

    /// Sets one component (cost saturated to i64).
    pub fn set(&mut self, c: Component, quantity: i64, pico: i128) {
        self.quantity[c.index()] = quantity.max(0);
        self.pico[c.index()] = i64::try_from(pico.max(0)).unwrap_or(i64::MAX);
    }

    /// The same quantities at a total of `pico` when that is less than
    /// theirs (a request billed at its sanity bound): each component's cost
    /// scaled down by the largest-remainder rule, so they still add up.
    pub fn capped_at(mut self, pico: i128) -> Charges {
        let total = self.total_pico();
        if pico >= total {
            return self;
        }
        let weights: Vec<i128> = self.pico.iter().map(|&p| i128::from(p)).collect();
        for (slot, share) in self.pico.iter_mut().zip(apportion(pico.max(0), &weights)) {
            *slot = i64::try_from(share).unwrap_or(i64::MAX);
        }
        self
    }

    /// Adds another row's charges (saturating).
    pub fn add(&mut self, o: &Charges) {
        for i in 0..N_COMPONENTS {
            self.quantity[i] = self.quantity[i].saturating_add(o.quantity[i]);
            self.pico[i] = self.pico[i].saturating_add(o.pico[i]);
        }
    }

    /// The components with a quantity or a cost, in ledger order.
    pub fn present(&self) -> impl Iterator<Item = (Component, i64, i64)> + '_ {
        Component::ALL
            .into_iter()
            .map(|c| (c, self.quantity_of(c), self.pico_of(c)))
            .filter(|(_, q, p)| *q != 0 || *p != 0)
    }

    /// As the ledger's `charges` array: the quantities, then the costs.
    pub fn to_array(&self) -> [i64; 2 * N_COMPONENTS] {
        let mut a = [0; 2 * N_COMPONENTS];
        a[..N_COMPONENTS].copy_from_slice(&self.quantity);
        a[N_COMPONENTS..].copy_from_slice(&self.pico);
        a
    }

    /// From the ledger's array — or an array written before OpenAI's
    /// cache-write TTLs were components (the ten components of then, in
    /// their order); None when it has another length.
    pub fn from_slice(a: &[i64]) -> Option<Charges> {
        let mut c = Charges::default();
        if a.len() == 2 * BEFORE_0028.len() {
            let n = BEFORE_0028.len();
            for (i, comp) in BEFORE_0028.into_iter().enumerate() {
                c.quantity[comp.index()] = a[i];
                c.pico[comp.index()] = a[n + i];
            }
            return Some(c);
        }
        if a.len() != 2 * N_COMPONENTS {
            return None;
        }
        c.quantity.copy_from_slice(&a[..N_COMPONENTS]);
        c.pico.copy_from_slice(&a[N_COMPONENTS..]);
        Some(c)
    }
}

impl Serialize for Charges {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (c, q, p) in self.present() {
            m.serialize_entry(c.name(), &[q, p])?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for Charges {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Charges, D::Error> {
        let m = std::collections::BTreeMap::<String, [i64; 2]>::deserialize(d)?;
        let mut c = Charges::default();
        for (name, [q, p]) in m {
            let comp = Component::parse(&name).ok_or_else(|| {
                serde::de::Error::custom(format!("unknown charge component {name:?}"))
            })?;
            c.quantity[comp.index()] = q.max(0);
            c.pico[comp.index()] = p.max(0);
        }
        Ok(c)
    }
}

impl Charges {
    /// Appends the JSON of [`Serialize`] to `out`, without serde (the
    /// outbox writes it on every settle).
    pub fn write_json(&self, out: &mut String) {
        out.push('{');
        let mut sep = "";
        for (c, q, p) in self.present() {
            out.push_str(sep);
            sep = ",";
            out.push('"');
            out.push_str(c.name());
            out.push_str("\":[");
            out.push_str(itoa::Buffer::new().format(q));
            out.push(',');
            out.push_str(itoa::Buffer::new().format(p));
            out.push(']');
        }
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_indexes_follow_the_order() {
        for (i, c) in Component::ALL.into_iter().enumerate() {
            assert_eq!(c.index(), i);
            assert_eq!(Component::parse(c.name()), Some(c));
        }
        assert_eq!(Component::parse("reasoning"), None);
        assert_eq!(Component::WebSearch.unit(), "calls");
        assert_eq!(Component::CachedInput.unit(), "tokens");
    }

    #[test]
    fn a_capped_row_still_adds_up() {
        let mut c = Charges::default();
        c.set(Component::Input, 100, 333);
        c.set(Component::CachedInput, 900, 667);
        c.set(Component::Output, 10, 1_000);
        let capped = c.capped_at(1_001);
        assert_eq!(capped.total_pico(), 1_001);
        assert_eq!(capped.quantity, c.quantity);
        // Not capped when the cap is above the cost.
        assert_eq!(c.capped_at(5_000), c);
    }

    #[test]
    fn the_array_round_trips() {
        let mut c = Charges::default();
        c.set(Component::CacheWrite1h, 7, 42);
        c.set(Component::WebSearch, 2, 20_000_000);
        let a = c.to_array();
        assert_eq!(Charges::from_slice(&a), Some(c));
        assert_eq!(Charges::from_slice(&a[1..]), None);
        assert_eq!(
            c.present().collect::<Vec<_>>(),
            vec![
                (Component::CacheWrite1h, 7, 42),
                (Component::WebSearch, 2, 20_000_000)
            ]
        );
    }

    /// A closed month archived before OpenAI's write TTLs keeps its
    /// components: its arrays have the ten components of then, in their
    /// order.
    #[test]
    fn an_array_from_before_the_openai_write_ttls_reads_as_it_was_written() {
        // input, cached, 5m, 1h, audio in, image in, output, audio out,
        // image out, web search: quantities, then pico-USD.
        let old: Vec<i64> = (1..=10).chain(101..=110).collect();
        let c = Charges::from_slice(&old).unwrap();
        assert_eq!(c.quantity_of(Component::Input), 1);
        assert_eq!(c.quantity_of(Component::CacheWrite1h), 4);
        assert_eq!(c.quantity_of(Component::AudioInput), 5);
        assert_eq!(
            (
                c.quantity_of(Component::WebSearch),
                c.pico_of(Component::WebSearch)
            ),
            (10, 110)
        );
        assert_eq!(c.pico_of(Component::Output), 107);
        assert_eq!(c.quantity_of(Component::CacheWrite30m), 0);
        assert_eq!(c.quantity_of(Component::CacheWrite12h), 0);
        let mut w = Charges::default();
        w.set(Component::CacheWrite30m, 3, 30);
        w.set(Component::CacheWrite12h, 4, 80);
        assert_eq!(Charges::from_slice(&w.to_array()), Some(w));
    }

    #[test]
    fn the_json_names_what_is_present_and_round_trips() {
        let mut c = Charges::default();
        c.set(Component::Input, 100, 250_000_000);
        c.set(Component::WebSearch, 1, 10_000_000_000);
        let json = serde_json::to_string(&c).unwrap();
        assert_eq!(
            json,
            r#"{"input":[100,250000000],"web_search":[1,10000000000]}"#
        );
        let mut fast = String::new();
        c.write_json(&mut fast);
        assert_eq!(fast, json);
        assert_eq!(serde_json::from_str::<Charges>(&json).unwrap(), c);
        assert!(serde_json::from_str::<Charges>(r#"{"nope":[1,2]}"#).is_err());
        let mut empty = String::new();
        Charges::default().write_json(&mut empty);
        assert_eq!(empty, "{}");
    }
}
