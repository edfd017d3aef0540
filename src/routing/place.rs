//! Placement: decoded id → owning region, and why.
//!
//! [`Table::place`] is pure and allocation-free: a match on the strategy and
//! the format, then one or two array loads (country×entity, shard, Instagram
//! shard), one small hash-map probe (node tables), a binary search (key and
//! time ranges) or one pass over a handful of regions (rendezvous hashing).

use crate::ids::{mix64, Decoded, Format};

use super::rule::{Missing, NoOwner, Placement, RegionId, Rule, Strategy};
use super::table::{Table, NONE, OVERRIDE_FLAG};

#[inline]
fn found(v: u16) -> Option<RegionId> {
    (v != NONE).then_some(RegionId(v & !OVERRIDE_FLAG))
}

impl Table {
    /// Which region owns `id` under `strategy`, and why.
    ///
    /// Pure and allocation-free. When the strategy finds no owner, the
    /// `default_region` is used (rule [`Rule::Default`]); without one the
    /// result is a typed [`NoOwner`].
    #[inline]
    pub fn place(&self, id: &Decoded, strategy: Strategy) -> Result<Placement, NoOwner> {
        let strategy = match strategy {
            Strategy::Auto => self.natural_strategy(id.format()),
            s => s,
        };
        let hit = self.lookup(id, strategy);
        match hit {
            Ok(p) => Ok(p),
            Err(detail) => match self.default_region {
                Some(region) => Ok(Placement { region, rule: Rule::Default }),
                None => Err(NoOwner { strategy, detail }),
            },
        }
    }

    /// The strategy `auto` resolves to for `format`.
    #[inline]
    pub fn natural_strategy(&self, format: Format) -> Strategy {
        match format {
            Format::Iuid => Strategy::Country,
            Format::Uniqid => Strategy::Shard,
            Format::Locality | Format::Snowflake | Format::Sonyflake | Format::Instagram => Strategy::Node,
            Format::Uuidv7 => {
                if !self.time_until.is_empty() {
                    Strategy::TimeRange
                } else if !self.key_starts.is_empty() {
                    Strategy::KeyRange
                } else {
                    Strategy::Hash
                }
            }
        }
    }

    #[inline]
    fn lookup(&self, id: &Decoded, strategy: Strategy) -> Result<Placement, Missing> {
        match (strategy, id) {
            (Strategy::Country, Decoded::Iuid(i)) => {
                let (country, entity) = (i.country(), i.service_entity());
                let v = self.country_entity[(usize::from(country) << 8) | usize::from(entity)];
                match found(v) {
                    Some(region) if v & OVERRIDE_FLAG != 0 => {
                        Ok(Placement { region, rule: Rule::Override { country, entity } })
                    }
                    Some(region) => Ok(Placement { region, rule: Rule::Country { country } }),
                    None => Err(Missing::Country { country, entity }),
                }
            }
            (Strategy::Shard, Decoded::Uniqid(u)) => {
                let shard = u.shard();
                match self.shards.get(shard as usize).copied().and_then(found) {
                    Some(region) => Ok(Placement { region, rule: Rule::Shard { shard } }),
                    None => Err(Missing::Shard { shard }),
                }
            }
            (Strategy::Node, Decoded::Locality(l)) => {
                let (fragment, pid) = (l.mac_fragment(), l.pid());
                if let Some(&r) = self.locality_mac.get(&u64::from(fragment)) {
                    return Ok(Placement { region: RegionId(r), rule: Rule::LocalityMac { fragment } });
                }
                match self.locality_pid.get(&u64::from(pid)) {
                    Some(&r) => Ok(Placement { region: RegionId(r), rule: Rule::LocalityPid { pid } }),
                    None => Err(Missing::LocalityNode { fragment, pid }),
                }
            }
            (Strategy::Node, Decoded::Snowflake(s)) => {
                let (dc, worker) = (s.datacenter_id(), s.worker_id());
                if let Some(&r) = self.snowflake_dc.get(&dc) {
                    return Ok(Placement { region: RegionId(r), rule: Rule::SnowflakeDatacenter { id: dc } });
                }
                match self.snowflake_worker.get(&worker) {
                    Some(&r) => Ok(Placement { region: RegionId(r), rule: Rule::SnowflakeWorker { id: worker } }),
                    None => Err(Missing::SnowflakeNode { datacenter: dc, worker }),
                }
            }
            (Strategy::Node, Decoded::Sonyflake(s)) => {
                let id = s.machine_id();
                match self.sonyflake_machine.get(&u64::from(id)) {
                    Some(&r) => Ok(Placement { region: RegionId(r), rule: Rule::SonyflakeMachine { id } }),
                    None => Err(Missing::SonyflakeMachine { id }),
                }
            }
            (Strategy::Node, Decoded::Instagram(g)) => {
                let shard = g.shard_id();
                match self.instagram_shard.get(usize::from(shard)).copied().and_then(found) {
                    Some(region) => Ok(Placement { region, rule: Rule::InstagramShard { shard } }),
                    None => Err(Missing::InstagramShard { shard }),
                }
            }
            (Strategy::KeyRange, id) => {
                let key = id.key_hash();
                let n = self.key_starts.partition_point(|&s| s <= key);
                match n.checked_sub(1) {
                    Some(index) => {
                        Ok(Placement { region: RegionId(self.key_regions[index]), rule: Rule::KeyRange { index } })
                    }
                    None => Err(Missing::KeyRange { key }),
                }
            }
            (Strategy::Hash, id) => match self.rendezvous(id.key_hash()) {
                Some(region) => Ok(Placement { region, rule: Rule::Hash }),
                None => Err(Missing::Hash),
            },
            (Strategy::TimeRange, id) => {
                let unix_ms = id.unix_ms();
                let index = self.time_until.partition_point(|&u| u <= unix_ms);
                match self.time_regions.get(index) {
                    Some(&r) => Ok(Placement { region: RegionId(r), rule: Rule::TimeRange { index } }),
                    None => Err(Missing::Time { unix_ms }),
                }
            }
            (_, id) => Err(Missing::Unsupported { format: id.format() }),
        }
    }

    /// Highest-random-weight choice among the hash regions.
    pub(crate) fn rendezvous(&self, key: u64) -> Option<RegionId> {
        if self.hash_weighted {
            let mut best: Option<(f64, u16)> = None;
            for c in self.hash.iter() {
                let h = mix64(key ^ c.seed);
                // u in (0, 1): never 0, so ln(u) < 0 and the score is finite.
                let u = ((h >> 11) as f64 + 0.5) * (1.0 / (1u64 << 53) as f64);
                let score = -c.weight / u.ln();
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, c.region));
                }
            }
            best.map(|(_, r)| RegionId(r))
        } else {
            let mut best: Option<(u64, u16)> = None;
            for c in self.hash.iter() {
                let score = mix64(key ^ c.seed);
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, c.region));
                }
            }
            best.map(|(_, r)| RegionId(r))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{
        Instagram, InstagramLayout, Iuid, LocalityUuid, Snowflake, Sonyflake, SonyflakeFlavor, UniqidShard, Uuid7,
    };

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn table(extra: &str) -> Result<Table, crate::config::ConfigErrors> {
        table_hashing("[eu, kz, us] }", extra)
    }

    fn table_hashing(hash: &str, extra: &str) -> Result<Table, crate::config::ConfigErrors> {
        let text = format!(
            r#"version: 1
regions:
  eu: {{ upstreams: ["http://127.0.0.1:1"] }}
  kz: {{ upstreams: ["http://127.0.0.1:2"] }}
  us: {{ upstreams: ["http://127.0.0.1:3"] }}
countries: {{ KZ: {{ id: 7, region: kz }}, DE: {{ id: 49, region: eu }} }}
entities: {{ Order: 3, Wallet: 4 }}
overrides: [{{ country: KZ, entity: Wallet, region: eu }}]
shards: {{ count: 16, regions: {{ eu: "0-5", kz: "6-10", us: "11-15" }} }}
nodes:
  locality_mac: {{ "c110002": eu }}
  locality_pid: {{ 42: us }}
  snowflake_datacenter: {{ 1: kz }}
  snowflake_worker: {{ 9: us }}
  sonyflake_machine: {{ 258: kz }}
  instagram_shard: {{ "0-99": us }}
key_ranges: [{{ start: "0000000000000000", region: eu }}, {{ start: "8000000000000000", region: us }}]
hash: {{ regions: {hash}
time_ranges: [{{ until: 1600000000000, region: eu }}, {{ region: kz }}]
{extra}routes: []
"#
        );
        Ok(Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    fn placed(t: &Table, id: Decoded, s: Strategy) -> Result<(String, Rule), NoOwner> {
        t.place(&id, s).map(|p| (t.region(p.region).name.clone(), p.rule))
    }

    fn region(t: &Table, id: Decoded, s: Strategy) -> Result<String, NoOwner> {
        placed(t, id, s).map(|(r, _)| r)
    }

    #[test]
    fn each_strategy_reads_its_table() -> TestResult {
        let t = table("")?;
        let iuid = |c, e| Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, c, e, 1));
        assert_eq!(placed(&t, iuid(7, 3), Strategy::Auto)?, ("kz".into(), Rule::Country { country: 7 }));
        assert_eq!(placed(&t, iuid(7, 4), Strategy::Auto)?, ("eu".into(), Rule::Override { country: 7, entity: 4 }));
        let shard = |s: u32| -> Result<Decoded, &'static str> {
            Ok(Decoded::Uniqid(UniqidShard::from_fields(s, 0x1234, 1_700_000_000, 5).ok_or("uniqid")?))
        };
        assert_eq!(region(&t, shard(8)?, Strategy::Auto)?, "kz");
        let loc = |mac, pid| Decoded::Locality(LocalityUuid::from_fields(1, pid, mac, 1_700_000_000_000));
        assert_eq!(placed(&t, loc(0x0c11_0002, 1), Strategy::Auto)?.0, "eu");
        assert_eq!(placed(&t, loc(0x0000_0001, 42), Strategy::Auto)?, ("us".into(), Rule::LocalityPid { pid: 42 }));
        // Twitter's layout: datacenter at bit 17, worker at bit 12.
        let sf = |dc: u64, w: u64| Snowflake::parse(&((1u64 << 22) | (dc << 17) | (w << 12)).to_string());
        assert_eq!(region(&t, Decoded::Snowflake(sf(1, 0)?), Strategy::Auto)?, "kz");
        assert_eq!(region(&t, Decoded::Snowflake(sf(2, 9)?), Strategy::Auto)?, "us");
        let sony = Sonyflake::parse_with(&((5u64 << 24) | 258).to_string(), SonyflakeFlavor::V1)?;
        assert_eq!(region(&t, Decoded::Sonyflake(sony), Strategy::Auto)?, "kz");
        let ig = Instagram::parse_with(&((5u64 << 23) | (42 << 10)).to_string(), InstagramLayout::default())?;
        assert_eq!(region(&t, Decoded::Instagram(ig), Strategy::Auto)?, "us");
        // UUIDv7: time ranges when configured (auto), key ranges and hashing on request.
        let v7 = |ms: u64| Decoded::Uuidv7(Uuid7::from_fields(ms, 0, 1));
        assert_eq!(region(&t, v7(1_500_000_000_000), Strategy::Auto)?, "eu");
        assert_eq!(region(&t, v7(1_700_000_000_000), Strategy::TimeRange)?, "kz");
        let id = v7(1_700_000_000_000);
        let by_key = if id.key_hash() < 0x8000_0000_0000_0000 { "eu" } else { "us" };
        assert_eq!(region(&t, id, Strategy::KeyRange)?, by_key);
        let first = region(&t, v7(123), Strategy::Hash)?;
        assert_eq!(region(&t, v7(123), Strategy::Hash)?, first, "hashing is stable");
        Ok(())
    }

    #[test]
    fn no_owner_is_typed_and_default_region_catches_it() -> TestResult {
        let t = table("")?;
        let unowned = Decoded::Iuid(Iuid::from_fields(0, 99, 3, 1));
        let err = t.place(&unowned, Strategy::Auto).err().ok_or("placed")?;
        assert_eq!(err.detail, Missing::Country { country: 99, entity: 3 });
        assert_eq!(err.to_string(), "no region owns country 99 (entity 3)");
        // A strategy that cannot read the format.
        let err = t.place(&unowned, Strategy::Shard).err().ok_or("placed")?;
        assert_eq!(err.detail, Missing::Unsupported { format: Format::Iuid });
        let t = table("default_region: us\n")?;
        assert_eq!(placed(&t, unowned, Strategy::Auto)?, ("us".into(), Rule::Default));
        Ok(())
    }

    #[test]
    fn weighted_hashing_follows_the_weights() -> TestResult {
        let t = table_hashing("[eu, kz], weights: { kz: 3 } }", "")?;
        let mut kz = 0;
        for i in 0..4000u64 {
            let id = Decoded::Uuidv7(Uuid7::from_fields(1_700_000_000_000 + i, (i * 7919) as u16 & 0x0fff, i));
            if region(&t, id, Strategy::Hash)? == "kz" {
                kz += 1;
            }
        }
        assert!((2700..=3300).contains(&kz), "{kz} of 4000 to the region of weight 3 (expected about 3000)");
        Ok(())
    }
}
