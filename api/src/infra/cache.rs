//! Short-lived in-process copies of read models that are costly to compute and rarely
//! change (never money: balances, payments and idempotency records are always read from
//! the database).
//!
//! Each replica keeps its own copy. A change made through this replica clears it at once;
//! another replica's copy can lag by at most the time-to-live, which is why only data whose
//! staleness the API documents is kept here.
use std::{
    collections::HashMap,
    hash::Hash,
    sync::Mutex,
    time::{Duration, Instant},
};

pub struct TtlCache<K, V> {
    entries: Mutex<HashMap<K, (Instant, V)>>,
    ttl: Duration,
    capacity: usize,
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub fn new(ttl: Duration, capacity: usize) -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
            ttl,
            capacity,
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.lock().expect("cache lock");
        entries
            .get(key)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    pub fn insert(&self, key: K, value: V) {
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= self.capacity && !entries.contains_key(&key) {
            // Expired entries go first; a cache still full of live ones starts over rather
            // than growing without bound.
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= self.capacity {
                entries.clear();
            }
        }
        entries.insert(key, (Instant::now(), value));
    }

    pub fn clear(&self) {
        self.entries.lock().expect("cache lock").clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_lives_for_its_ttl_only() {
        let c = TtlCache::new(Duration::from_millis(30), 10);
        c.insert(1, "a");
        assert_eq!(c.get(&1), Some("a"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&1), None);
    }

    #[test]
    fn a_full_cache_never_holds_more_than_its_capacity() {
        let c = TtlCache::new(Duration::from_secs(60), 3);
        for i in 0..10 {
            c.insert(i, i);
            assert!(c.entries.lock().unwrap().len() <= 3);
            assert_eq!(c.get(&i), Some(i));
        }
    }

    #[test]
    fn clear_forgets_everything() {
        let c = TtlCache::new(Duration::from_secs(60), 3);
        c.insert("k", 1);
        c.clear();
        assert_eq!(c.get(&"k"), None);
    }
}
