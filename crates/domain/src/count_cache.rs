//! Token counts of texts seen before. Requests repeat most of what they
//! send: a chat resends every earlier message with each turn, an agent sends
//! the same system prompt and tool definitions with every call. Counting a
//! text with BPE costs ~250 instructions a byte (a megabyte ~60 ms); hashing
//! it costs a few. So a count is remembered by the text's hash.
//!
//! The table is direct-mapped and lock-free: one `AtomicU64` a slot, holding
//! the upper 40 bits of the text's 64-bit hash (its tag) and the count (24
//! bits), the slot chosen by the low bits. A text whose slot holds another
//! text's tag is a miss and is counted; it then takes the slot. The hash is
//! SipHash keyed at random per process (`std`'s `RandomState`), so a client
//! cannot choose texts that collide; a false hit needs 54 equal hash bits.
//! Counts are remembered per tenant ([`scope`]) and only for the request's
//! input estimate; what a stream's output is counted with is never cached.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Texts shorter than this are counted each time (cheaper than the hash).
pub const MIN_BYTES: usize = 16;
const COUNT_BITS: u32 = 24;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;
/// Slots of the process's table: 128 KiB.
const SLOTS: usize = 1 << 14;

pub struct CountCache {
    seed: std::hash::RandomState,
    slots: Box<[AtomicU64]>,
}

impl CountCache {
    /// A table of `slots` (rounded up to a power of two).
    pub fn new(slots: usize) -> Self {
        let n = slots.max(1).next_power_of_two();
        Self {
            seed: std::hash::RandomState::new(),
            slots: (0..n).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The hash a text of a tokenizer (`family`) is remembered by in a
    /// scope ([`scope`]).
    pub fn hash(&self, scope: u64, family: u8, text: &str) -> u64 {
        self.seed.hash_one((scope, family, text))
    }

    fn slot(&self, h: u64) -> &AtomicU64 {
        &self.slots[h as usize & (self.slots.len() - 1)]
    }

    /// The count remembered for this hash, if its slot holds it.
    pub fn get(&self, h: u64) -> Option<u64> {
        let v = self.slot(h).load(Ordering::Relaxed);
        (v != 0 && v >> COUNT_BITS == h >> COUNT_BITS).then_some(v & COUNT_MASK)
    }

    /// Remembers a count (one of 2^24 tokens or more is not remembered).
    pub fn put(&self, h: u64, count: u64) {
        if count <= COUNT_MASK {
            let v = (h >> COUNT_BITS) << COUNT_BITS | count;
            self.slot(h).store(v, Ordering::Relaxed);
        }
    }
}

/// The scope of a tenant's counts: a text is remembered per tenant, so a
/// tenant cannot time a request to learn whether another tenant sent the
/// same text (a hit costs microseconds, a miss on a long text
/// milliseconds). The repetition the table is for — a conversation's
/// earlier turns, an agent's prompt and tools — is within one tenant.
pub fn scope(tenant: &str) -> u64 {
    global().seed.hash_one(tenant)
}

/// The process's table.
pub fn global() -> &'static CountCache {
    static T: OnceLock<CountCache> = OnceLock::new();
    T.get_or_init(|| CountCache::new(SLOTS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_found_by_its_own_text_only() {
        let c = CountCache::new(SLOTS);
        let (a, b) = (
            c.hash(7, 0, "the same system prompt"),
            c.hash(7, 0, "another prompt"),
        );
        assert_eq!(c.get(a), None);
        c.put(a, 17);
        assert_eq!(c.get(a), Some(17));
        assert_eq!(c.get(b), None);
        // The family and the scope are part of the key.
        assert_eq!(c.get(c.hash(7, 1, "the same system prompt")), None);
        assert_eq!(c.get(c.hash(8, 0, "the same system prompt")), None);
    }

    /// One slot, so every text shares it: each put takes the slot, and a
    /// text never reads another's count.
    #[test]
    fn texts_sharing_a_slot_never_read_each_others_count() {
        let c = CountCache::new(1);
        let texts: Vec<String> = (0..1_000).map(|i| format!("text number {i}")).collect();
        for (i, t) in texts.iter().enumerate() {
            let h = c.hash(7, 0, t);
            c.put(h, i as u64 + 1);
            assert_eq!(c.get(h), Some(i as u64 + 1));
            if i > 0 {
                assert_eq!(
                    c.get(c.hash(7, 0, &texts[i - 1])),
                    None,
                    "evicted, not shared"
                );
            }
        }
    }

    #[test]
    fn counts_beyond_24_bits_are_not_remembered() {
        let c = CountCache::new(8);
        let h = c.hash(7, 0, "a very long text");
        c.put(h, COUNT_MASK + 1);
        assert_eq!(c.get(h), None);
        c.put(h, COUNT_MASK);
        assert_eq!(c.get(h), Some(COUNT_MASK));
    }
}
