//! Placement units: the entries of a table that own ids, named as operators
//! write them, each with the number of requests it placed.
//!
//! A unit is one line of the table's placement sections, named as
//! [`Unit`] writes it (`country KZ`, `shards 0-7`, `key_range 8000000000000000`, …).
//!
//! [`Units::count`] is called once per placed request (`proxy::respond`):
//! a match on the rule, one array load or a binary search over the table's
//! few entries, and one relaxed atomic add. The counts are exported as
//! `shardgate_placement_requests_total{unit}` and shared with the table a
//! reload brings by name ([`Units::carry`]), so a unit's series stays
//! monotonic and counts the requests that end after the swap; `plan`
//! reads them to say how much traffic a change moves.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::rule::{RegionId, Rule};
use crate::config::model::Config;
use crate::config::unit::{Node, Unit};

/// No unit.
const NO: u32 = u32::MAX;

/// A table's placement units and their request counts.
#[derive(Debug, Default)]
pub struct Units {
    names: Box<[String]>,
    /// Shared, by name, with the table this one replaced ([`Units::carry`]).
    counts: Box<[Arc<AtomicU64>]>,
    /// Country id → unit.
    countries: Box<[u32]>,
    /// `(country << 8) | entity`, sorted, → unit.
    overrides: Box<[(u16, u32)]>,
    /// Shard → the unit of the range holding it.
    shards: Box<[u32]>,
    /// Instagram ranges (first, last), sorted, → unit.
    instagram: Box<[(u16, u16, u32)]>,
    /// (node table, key), sorted, → unit.
    nodes: Box<[((Node, u64), u32)]>,
    /// The first key range's unit (the others follow in order).
    key_ranges: u32,
    /// The first time range's unit (the others follow in order).
    time_ranges: u32,
    /// Hash region, → unit.
    hash: Box<[(u16, u32)]>,
    default: u32,
}

/// Unit names as they are given out.
#[derive(Default)]
struct Names(Vec<String>);

impl Names {
    /// The index the next name gets.
    fn next(&self) -> u32 {
        u32::try_from(self.0.len()).unwrap_or(NO)
    }

    fn add(&mut self, unit: Unit<'_>) -> u32 {
        let i = self.next();
        self.0.push(unit.to_string());
        i
    }
}

impl Units {
    /// The units of a validated table.
    pub fn compile(cfg: &Config) -> Units {
        let mut names = Names::default();

        let country_name =
            |id: u8| cfg.countries.iter().find(|c| c.id == id).map_or(id.to_string(), |c| c.name.clone());
        let entity_name =
            |code: u8| cfg.entities.iter().find(|e| e.code == code).map_or(code.to_string(), |e| e.name.clone());
        let mut countries = vec![NO; 256].into_boxed_slice();
        for c in &cfg.countries {
            countries[usize::from(c.id)] = names.add(Unit::Country(&c.name));
        }
        let mut overrides: Vec<(u16, u32)> = cfg
            .overrides
            .iter()
            .map(|o| {
                let key = (u16::from(o.country) << 8) | u16::from(o.entity);
                let (country, entity) = (country_name(o.country), entity_name(o.entity));
                (key, names.add(Unit::Override { country: &country, entity: &entity }))
            })
            .collect();
        overrides.sort_unstable();
        let mut shards = vec![NO; cfg.shards.as_ref().map_or(0, |s| s.count as usize)].into_boxed_slice();
        for &(a, b, _) in cfg.shards.iter().flat_map(|s| &s.ranges) {
            let unit = names.add(Unit::Shards(a, b));
            if let Some(cells) = shards.get_mut(a as usize..=b as usize) {
                cells.fill(unit);
            }
        }
        let n = &cfg.nodes;
        let mut nodes: Vec<((Node, u64), u32)> = Vec::new();
        let keys = [
            (Node::LocalityMac, n.locality_mac.iter().map(|&(k, _)| u64::from(k)).collect::<Vec<_>>()),
            (Node::LocalityPid, n.locality_pid.iter().map(|&(k, _)| u64::from(k)).collect()),
            (Node::SnowflakeDatacenter, n.snowflake_datacenter.iter().map(|&(k, _)| k).collect()),
            (Node::SnowflakeWorker, n.snowflake_worker.iter().map(|&(k, _)| k).collect()),
            (Node::SonyflakeMachine, n.sonyflake_machine.iter().map(|&(k, _)| u64::from(k)).collect()),
        ];
        for (kind, keys) in keys {
            for key in keys {
                nodes.push(((kind, key), names.add(Unit::Node(kind, key))));
            }
        }
        nodes.sort_unstable();
        let mut instagram: Vec<(u16, u16, u32)> =
            n.instagram_shard.iter().map(|&(a, b, _)| (a, b, names.add(Unit::InstagramShards(a, b)))).collect();
        instagram.sort_unstable();
        let key_ranges = names.next();
        for &(start, _) in &cfg.key_ranges {
            names.add(Unit::KeyRange(start));
        }
        let time_ranges = names.next();
        for &(until, _) in &cfg.time_ranges {
            names.add(Unit::TimeRange(until));
        }
        let hash = cfg
            .hash
            .iter()
            .map(|&(r, _)| (u16::try_from(r).unwrap_or(u16::MAX), names.add(Unit::Hash(&cfg.regions[r].name))))
            .collect();
        let default = if cfg.default_region.is_some() { names.add(Unit::Default) } else { NO };
        Units {
            counts: names.0.iter().map(|_| Arc::default()).collect(),
            names: names.0.into_boxed_slice(),
            countries,
            overrides: overrides.into_boxed_slice(),
            shards,
            instagram: instagram.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
            key_ranges,
            time_ranges,
            hash,
            default,
        }
    }

    /// The index of the unit named `name`.
    pub(crate) fn index_of(&self, name: &str) -> Option<u32> {
        self.names.iter().position(|n| n == name).and_then(|i| u32::try_from(i).ok())
    }

    /// The unit that placed a request by `rule` in `region`.
    pub(crate) fn unit_of(&self, rule: Rule, region: RegionId) -> u32 {
        let node = |kind: Node, key: u64| {
            self.nodes.binary_search_by_key(&(kind, key), |&(k, _)| k).map_or(NO, |i| self.nodes[i].1)
        };
        let offset = |base: u32, index: usize| match u32::try_from(index) {
            Ok(i) if base != NO => base.saturating_add(i),
            _ => NO,
        };
        match rule {
            Rule::Country { country } => self.countries.get(usize::from(country)).copied().unwrap_or(NO),
            Rule::Override { country, entity } => {
                let key = (u16::from(country) << 8) | u16::from(entity);
                self.overrides.binary_search_by_key(&key, |&(k, _)| k).map_or(NO, |i| self.overrides[i].1)
            }
            Rule::Shard { shard } => self.shards.get(shard as usize).copied().unwrap_or(NO),
            Rule::LocalityMac { fragment } => node(Node::LocalityMac, u64::from(fragment)),
            Rule::LocalityPid { pid } => node(Node::LocalityPid, u64::from(pid)),
            Rule::SnowflakeDatacenter { id } => node(Node::SnowflakeDatacenter, id),
            Rule::SnowflakeWorker { id } => node(Node::SnowflakeWorker, id),
            Rule::SonyflakeMachine { id } => node(Node::SonyflakeMachine, u64::from(id)),
            Rule::InstagramShard { shard } => self.instagram_unit(shard),
            Rule::KeyRange { index } => offset(self.key_ranges, index),
            Rule::TimeRange { index } => offset(self.time_ranges, index),
            Rule::Hash => self.hash.iter().find(|&&(r, _)| r == region.0).map_or(NO, |&(_, u)| u),
            Rule::Default => self.default,
            Rule::Route | Rule::Local => NO,
        }
    }

    fn instagram_unit(&self, shard: u16) -> u32 {
        let n = self.instagram.partition_point(|&(first, _, _)| first <= shard);
        match n.checked_sub(1).map(|i| self.instagram[i]) {
            Some((_, last, unit)) if shard <= last => unit,
            _ => NO,
        }
    }

    /// Counts one request placed by `rule` in `region`.
    #[inline]
    pub fn count(&self, rule: Rule, region: RegionId) {
        if let Some(c) = self.counts.get(self.unit_of(rule, region) as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Shares the counts of `running`'s units with the units of the same
    /// name here (a table about to replace `running`), so each series goes
    /// on from where it was, and the requests still under way on `running`
    /// count where this table reads them.
    pub fn carry(&mut self, running: &Units) {
        for (name, count) in running.names.iter().zip(running.counts.iter()) {
            if let Some(i) = self.names.iter().position(|m| m == name) {
                self.counts[i] = Arc::clone(count);
            }
        }
    }

    /// Every unit and the requests it placed.
    pub fn counts(&self) -> impl Iterator<Item = (&str, u64)> {
        self.names.iter().zip(self.counts.iter()).map(|(n, c)| (n.as_str(), c.load(Ordering::Relaxed)))
    }

    /// Each shard's unit and the number of shards in it.
    pub(crate) fn shard_units(&self) -> Vec<Option<(&str, usize)>> {
        self.per_index(&self.shards)
    }

    /// Each Instagram shard's unit and the number of shards in it.
    pub(crate) fn instagram_units(&self) -> Vec<Option<(&str, usize)>> {
        let cells: Vec<u32> = (0..8192u16).map(|shard| self.instagram_unit(shard)).collect();
        self.per_index(&cells)
    }

    fn per_index(&self, cells: &[u32]) -> Vec<Option<(&str, usize)>> {
        let mut sizes = vec![0usize; self.names.len()];
        for &u in cells {
            if let Some(s) = sizes.get_mut(u as usize) {
                *s += 1;
            }
        }
        cells.iter().map(|&u| Some((self.names.get(u as usize)?.as_str(), sizes[u as usize]))).collect()
    }

    /// The name of unit `unit` (an index [`Units::unit_of`] gives).
    pub(crate) fn name_at(&self, unit: u32) -> Option<&str> {
        self.names.get(unit as usize).map(String::as_str)
    }

    /// The unit name `rule` counts under (`None` for rules that are not a
    /// placement unit: a route's fixed region, the local region).
    pub fn name(&self, rule: Rule, region: RegionId) -> Option<&str> {
        self.name_at(self.unit_of(rule, region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:1"] }
  kz: { upstreams: ["http://127.0.0.1:2"] }
default_region: eu
countries: { KZ: { id: 7, region: kz }, DE: { id: 49, region: eu } }
entities: { Order: 3, Wallet: 4 }
overrides: [{ country: KZ, entity: Wallet, region: eu }]
shards: { count: 12, regions: { eu: "0-5", kz: ["6-10", "11"] } }
nodes:
  locality_mac: { "c110002": eu }
  snowflake_datacenter: { 1: kz }
  instagram_shard: { "0-99": eu, "100-8191": kz }
key_ranges: [{ start: "0000000000000000", region: eu }, { start: "8000000000000000", region: kz }]
hash: { regions: [eu, kz] }
time_ranges: [{ until: 1600000000000, region: eu }, { region: kz }]
"#;

    fn units(text: &str) -> Result<Units, crate::config::ConfigErrors> {
        Ok(Units::compile(&crate::config::load_str(text, "t.yaml")?))
    }

    #[test]
    fn every_rule_counts_under_the_line_that_placed_it() -> Result<(), crate::config::ConfigErrors> {
        let u = units(TEXT)?;
        let cases = [
            (Rule::Country { country: 7 }, 0, "country KZ"),
            (Rule::Override { country: 7, entity: 4 }, 0, "override KZ:Wallet"),
            (Rule::Shard { shard: 3 }, 0, "shards 0-5"),
            (Rule::Shard { shard: 11 }, 1, "shard 11"),
            (Rule::LocalityMac { fragment: 0xc110002 }, 0, "locality_mac c110002"),
            (Rule::SnowflakeDatacenter { id: 1 }, 1, "snowflake_datacenter 1"),
            (Rule::InstagramShard { shard: 100 }, 1, "instagram_shard 100-8191"),
            (Rule::InstagramShard { shard: 99 }, 0, "instagram_shard 0-99"),
            (Rule::KeyRange { index: 1 }, 1, "key_range 8000000000000000"),
            (Rule::TimeRange { index: 0 }, 0, "time_range until 2020-09-13T12:26:40Z"),
            (Rule::TimeRange { index: 1 }, 1, "time_range open"),
            (Rule::Hash, 1, "hash kz"),
            (Rule::Default, 0, "default"),
        ];
        for (rule, region, name) in cases {
            assert_eq!(u.name(rule, RegionId(region)), Some(name), "{rule:?}");
            u.count(rule, RegionId(region));
        }
        assert_eq!(u.name(Rule::Route, RegionId(0)), None);
        assert_eq!(u.name(Rule::Shard { shard: 99 }, RegionId(0)), None);
        u.count(Rule::Country { country: 7 }, RegionId(1));
        let counts: std::collections::HashMap<_, _> = u.counts().collect();
        assert_eq!(counts["country KZ"], 2);
        assert_eq!(counts["country DE"], 0);
        assert_eq!(counts["shard 11"], 1);
        Ok(())
    }

    #[test]
    fn counts_are_shared_with_the_units_of_the_same_name() -> Result<(), crate::config::ConfigErrors> {
        let old = units(TEXT)?;
        for _ in 0..3 {
            old.count(Rule::Country { country: 7 }, RegionId(1));
            old.count(Rule::Shard { shard: 1 }, RegionId(0));
        }
        let new = units(
            &TEXT
                .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }")
                .replace(r#"eu: "0-5""#, r#"eu: ["0-4", "5"]"#),
        )?;
        let mut new = new;
        new.carry(&old);
        // A request under way on the old table ends after the swap.
        old.count(Rule::Country { country: 7 }, RegionId(1));
        let counts: std::collections::HashMap<_, _> = new.counts().collect();
        assert_eq!(counts["country KZ"], 4);
        // The range was split: its units are new.
        assert_eq!(counts["shards 0-4"], 0);
        Ok(())
    }
}
