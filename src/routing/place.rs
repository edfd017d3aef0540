//! Placement: decoded id → owning region, and why.
//!
//! [`Table::place`] is pure and allocation-free: a match on the strategy and
//! the format, then one or two array loads (country×entity, shard, Instagram
//! shard), one small hash-map probe (node tables), a binary search (key and
//! time ranges) or one pass over a handful of regions (rendezvous hashing).

use crate::ids::{mix64, Decoded, Format};

use super::rule::{Missing, NoOwner, Placement, Rule, Strategy};
use super::table::{RegionId, Table, NONE, OVERRIDE_FLAG};

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
    fn rendezvous(&self, key: u64) -> Option<RegionId> {
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
