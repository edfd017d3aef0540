//! Found: where `placement: search` routes found their ids, so the next
//! request for one goes straight to its region.
//!
//! A bounded cache (quick_cache's S3-FIFO-like policy: ids asked for once
//! are evicted before those asked for again), keyed by route and id. An
//! entry holds the region's name and the hash of its endpoints when it was
//! found; it is dropped when older than the table's `search_cache.ttl`, or
//! when the table in force has no such region or other endpoints for it,
//! so a reload that moves a region's backends sends its ids searching again.
//! The clock is passed in (`now`), as the id codecs take theirs.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_cache::sync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, UnitWeighter};

use super::rule::RegionId;
use super::table::Table;

/// What is remembered of one id.
#[derive(Clone, Debug)]
struct Entry {
    region: Arc<str>,
    endpoints_hash: u64,
    found_at: Instant,
}

/// Counts evictions for the metrics.
#[derive(Clone, Debug, Default)]
struct CountEvictions(Arc<AtomicU64>);

impl Lifecycle<Box<str>, Entry> for CountEvictions {
    type RequestState = ();

    fn on_evict(&self, _: &mut (), _: Box<str>, _: Entry) {
        self.0.fetch_add(1, Relaxed);
    }
}

/// What the cache says about an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Found before in this region, still trusted.
    Hit(RegionId),
    /// Never found, or forgotten.
    Miss,
    /// Found before, but too long ago or the region has changed: forgotten now.
    Stale,
}

/// Counters of the cache, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FoundStats {
    /// Lookups that found a trusted region.
    pub hits: u64,
    /// Lookups that found nothing.
    pub misses: u64,
    /// Lookups that found an entry too old or of a changed region.
    pub stale: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
    /// Entries held now.
    pub entries: u64,
}

/// The cache of found regions.
#[derive(Debug)]
pub struct Found {
    cache: Cache<Box<str>, Entry, UnitWeighter, DefaultHashBuilder, CountEvictions>,
    evictions: Arc<AtomicU64>,
    hits: AtomicU64,
    misses: AtomicU64,
    stale: AtomicU64,
}

/// The key of `id` on `route`: the same id may name different entities on
/// two routes, held in different regions.
fn key(route: &str, id: &str) -> Box<str> {
    let mut k = String::with_capacity(route.len() + 1 + id.len());
    k.push_str(route);
    k.push('\0');
    k.push_str(id);
    k.into_boxed_str()
}

impl Found {
    /// A cache of at most `capacity` ids (at least one).
    pub fn new(capacity: usize) -> Found {
        let evictions = CountEvictions::default();
        let capacity = capacity.max(1);
        let cache = Cache::with(
            capacity,
            u64::try_from(capacity).unwrap_or(u64::MAX),
            UnitWeighter,
            DefaultHashBuilder::default(),
            evictions.clone(),
        );
        Found {
            cache,
            evictions: evictions.0,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            stale: AtomicU64::new(0),
        }
    }

    /// Where `id` was found on `route`, if that is still to be trusted under `table`.
    pub fn lookup(&self, route: &str, id: &str, table: &Table, now: Instant) -> Lookup {
        let k = key(route, id);
        let Some(entry) = self.cache.get(&k) else {
            self.misses.fetch_add(1, Relaxed);
            return Lookup::Miss;
        };
        let ttl: Duration = table.settings().search_ttl;
        let fresh = now.saturating_duration_since(entry.found_at) < ttl;
        let region = table.region_by_name(&entry.region).filter(|&r| table.endpoints_hash(r) == entry.endpoints_hash);
        match region {
            Some(r) if fresh => {
                self.hits.fetch_add(1, Relaxed);
                Lookup::Hit(r)
            }
            _ => {
                self.cache.remove(&k);
                self.stale.fetch_add(1, Relaxed);
                Lookup::Stale
            }
        }
    }

    /// Remembers that `id` was found on `route` in `region` of `table`.
    pub fn remember(&self, route: &str, id: &str, table: &Table, region: RegionId, now: Instant) {
        let name = Arc::from(table.region(region).name.as_str());
        let entry = Entry { region: name, endpoints_hash: table.endpoints_hash(region), found_at: now };
        self.cache.insert(key(route, id), entry);
    }

    /// Forgets `id` on `route` (its region answered that it no longer has it).
    pub fn forget(&self, route: &str, id: &str) {
        self.cache.remove(&key(route, id));
    }

    /// Where `id` was found on `route` and how long ago, without counting a lookup (`/explain`).
    pub fn peek(&self, route: &str, id: &str, now: Instant) -> Option<(String, Duration)> {
        self.cache.peek(&key(route, id)).map(|e| (e.region.to_string(), now.saturating_duration_since(e.found_at)))
    }

    /// The counters.
    pub fn stats(&self) -> FoundStats {
        FoundStats {
            hits: self.hits.load(Relaxed),
            misses: self.misses.load(Relaxed),
            stale: self.stale.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            entries: self.cache.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn table(us: &str) -> Result<Table, crate::config::ConfigErrors> {
        let text = format!(
            "version: 1\nsearch_cache: {{ ttl: 60s }}\nregions:\n  eu: {{ upstreams: [\"http://127.0.0.1:1\"] }}\n  us: {{ upstreams: [\"{us}\"] }}\nroutes: []\n"
        );
        Ok(Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    #[test]
    fn found_regions_are_trusted_until_old_or_moved() -> TestResult {
        let t = table("http://127.0.0.1:3")?;
        let us = t.region_by_name("us").ok_or("us")?;
        let found = Found::new(100);
        let t0 = Instant::now();
        assert_eq!(found.lookup("legacy", "abc", &t, t0), Lookup::Miss);
        found.remember("legacy", "abc", &t, us, t0);
        assert_eq!(found.lookup("legacy", "abc", &t, t0 + Duration::from_secs(59)), Lookup::Hit(us));
        // Another route's id of the same text is another entity.
        assert_eq!(found.lookup("users", "abc", &t, t0), Lookup::Miss);
        // Past the ttl: forgotten.
        assert_eq!(found.lookup("legacy", "abc", &t, t0 + Duration::from_secs(60)), Lookup::Stale);
        assert_eq!(found.lookup("legacy", "abc", &t, t0), Lookup::Miss);
        // A reload that moves us's backends forgets us's ids, not eu's.
        let eu = t.region_by_name("eu").ok_or("eu")?;
        found.remember("legacy", "abc", &t, us, t0);
        found.remember("legacy", "def", &t, eu, t0);
        let moved = table("http://127.0.0.1:4")?;
        assert_eq!(found.lookup("legacy", "abc", &moved, t0), Lookup::Stale);
        assert_eq!(found.lookup("legacy", "def", &moved, t0), Lookup::Hit(eu));
        let s = found.stats();
        assert_eq!((s.hits, s.misses, s.stale, s.entries), (2, 3, 2, 1));
        Ok(())
    }

    #[test]
    fn the_cache_stays_within_its_capacity() -> TestResult {
        let t = table("http://127.0.0.1:3")?;
        let us = t.region_by_name("us").ok_or("us")?;
        let found = Found::new(50);
        let now = Instant::now();
        for i in 0..1000 {
            found.remember("legacy", &i.to_string(), &t, us, now);
        }
        let s = found.stats();
        assert!(s.entries <= 50 && s.entries > 0, "{s:?}");
        assert!(s.evictions >= 950, "{s:?}");
        Ok(())
    }
}
