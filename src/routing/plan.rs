//! What a new table moves: every placement unit whose owner changes, and
//! the traffic it carried.
//!
//! [`Plan::between`] compares two compiled tables as placement sees them
//! (the same arrays and maps [`Table::place`] reads), so what it lists is
//! what requests will do, not what the text says: an override that keeps
//! an entity where its country used to be moves nothing; a region renamed
//! moves everything it owned. Owners are compared by region name.
//!
//! | unit | compared | key space |
//! |---|---|---|
//! | country | its owner | |
//! | override (either table's) | the owner of its (country, entity) | |
//! | shards, Instagram shards | each shard, runs of the same change merged | |
//! | node entries | each key of either table | |
//! | key ranges | each segment between the split points of both | share of the 64-bit key space |
//! | time ranges | each segment between the ends of both | |
//! | hash | 65,536 spread keys, by (from, to) | share of the key space |
//! | default | `default_region` | |
//!
//! The traffic of a unit is read from a [`Window`] of the running
//! instance's `shardgate_placement_requests_total` ([`super::Units`]): exact
//! when the moving unit is a whole unit of the running table, estimated in
//! proportion (shards, key space) when it is a part of one, at most the
//! whole range for a part of a time range, and unknown when the running
//! table counted it under another unit (an override the new table adds).
//!
//! A plan also lists the fences the new table gives up ([`Unfenced`]): a
//! move it no longer records, or records at a lower epoch. A unit's epoch
//! is what refuses a forward from an instance still on an older table (the
//! 421 `stale_epoch`), so once the unit has switched (by this move, or by
//! an earlier one whose epoch a later hold took over), the table that
//! forgets its epoch lets such a write land in the region the unit left.
//! Two tables cannot tell whether it had, so every epoch forgotten is
//! listed; calling a move off with `phase: abort` keeps it. The fence is
//! compared where ids land, not only by name: a unit split out of a moved
//! one (an override under a moved country, part of a moved range) without
//! the move is listed too, with `within` ([`Unfenced`]).

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::rule::RegionId;
use super::table::{Table, NONE, OVERRIDE_FLAG};
use crate::config::unit::{Node, Unit};

mod fences;
pub use fences::{given_up, Unfenced, KEEP_FENCES};

/// Keys the hash comparison spreads over the key space.
const HASH_SAMPLES: u64 = 1 << 16;

/// The requests each unit of the running table placed over a window.
#[derive(Clone, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Window {
    /// How long the window is, in seconds.
    pub seconds: f64,
    /// Requests placed by every unit over it.
    pub total: u64,
    /// By unit name.
    pub units: HashMap<String, u64>,
}

/// How a moving unit's traffic is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// Counted for exactly this unit.
    Exact,
    /// A share of a unit's count, in proportion to the part that moves.
    Estimated,
    /// The whole count of the unit it is a part of (time is not uniform).
    AtMost,
}

/// The traffic a moving unit carried over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Traffic {
    /// Requests.
    pub requests: f64,
    /// Their share of every placed request, 0 to 1.
    pub share: f64,
    /// How it is known.
    pub measure: Measure,
}

/// One placement unit whose owner changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Move {
    /// The unit, named as in `shardgate_placement_requests_total`.
    pub unit: String,
    /// Its owner now (`None`: no entry, so the next table, `default_region` or 502 decides).
    pub from: Option<String>,
    /// Its owner under the new table.
    pub to: Option<String>,
    /// The share of the 64-bit key space that moves (key ranges, hash).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_share: Option<f64>,
    /// The traffic it carried (`None`: no window, or not counted apart).
    pub traffic: Option<Traffic>,
}

/// Every move from one table to another.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// The moves, in table order (countries, overrides, shards, nodes, ranges, hash, default).
    pub moves: Vec<Move>,
    /// The fences the new table gives up, in the running table's order.
    pub unfenced: Vec<Unfenced>,
    /// The window traffic was read over (`None`: none was available).
    pub window: Option<WindowSummary>,
}

/// The window a plan's traffic comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WindowSummary {
    /// Its length in seconds.
    pub seconds: f64,
    /// Requests placed over it.
    pub total: u64,
}

/// An owner before and after (`None`: no owner).
type Owners = (Option<String>, Option<String>);

/// A run of key-range segments with one change: start, end, the owners,
/// and the parts of running ranges it covers (name, covered, size).
type KeyRun = (u64, u128, Owners, Vec<(String, u128, u128)>);

/// Adds up the traffic of a moving unit from parts of running units.
struct Tally<'a> {
    window: Option<&'a Window>,
    requests: f64,
    measure: Measure,
    counted: bool,
}

impl<'a> Tally<'a> {
    fn new(window: Option<&'a Window>) -> Self {
        Tally { window, requests: 0.0, measure: Measure::Exact, counted: false }
    }

    /// Adds `part` (0 to 1) of the running unit `name`'s count, known as
    /// `measure` (`Exact` only for the whole unit).
    fn add(&mut self, name: &str, part: f64, measure: Measure) {
        let Some(w) = self.window else { return };
        let n = w.units.get(name).copied().unwrap_or(0) as f64;
        self.requests += n * part;
        self.counted = true;
        self.measure = match (self.measure, measure) {
            (Measure::AtMost, _) | (_, Measure::AtMost) => Measure::AtMost,
            (Measure::Estimated, _) | (_, Measure::Estimated) => Measure::Estimated,
            _ => Measure::Exact,
        };
    }

    /// Adds the parts of running units a run covers: `(name, covered, size)`.
    fn add_parts(&mut self, parts: &[(&str, u128, u128)]) {
        for &(name, covered, size) in parts {
            let measure = if covered >= size { Measure::Exact } else { Measure::Estimated };
            self.add(name, covered as f64 / size.max(1) as f64, measure);
        }
    }

    fn traffic(&self) -> Option<Traffic> {
        let w = self.window.filter(|_| self.counted)?;
        let share = if w.total == 0 { 0.0 } else { self.requests / w.total as f64 };
        Some(Traffic { requests: self.requests, share, measure: self.measure })
    }
}

/// A region's name in `table`, for cells that hold a region or [`NONE`].
fn owner(table: &Table, cell: u16) -> Option<String> {
    (cell != NONE).then(|| table.region(RegionId(cell & !OVERRIDE_FLAG)).name.clone())
}

fn name_of(table: &Table, id: Option<RegionId>) -> Option<String> {
    id.map(|r| table.region(r).name.clone())
}

impl Plan {
    /// Every placement unit whose owner differs between `running` and
    /// `next`, with its traffic from `window` (the running instance's).
    pub fn between(running: &Table, next: &Table, window: Option<&Window>) -> Plan {
        let mut plan = Plan {
            moves: Vec::new(),
            unfenced: fences::given_up(running, next),
            window: window.map(|w| WindowSummary { seconds: w.seconds, total: w.total }),
        };
        plan.countries(running, next, window);
        plan.overrides(running, next, window);
        plan.cells("shard", running.units().shard_units(), &running.shards, &next.shards, (running, next), window);
        plan.nodes(running, next, window);
        let (old, new) = (&running.instagram_shard, &next.instagram_shard);
        plan.cells("instagram_shard", running.units().instagram_units(), old, new, (running, next), window);
        plan.key_ranges(running, next, window);
        plan.time_ranges(running, next, window);
        plan.hash(running, next, window);
        let (from, to) = (name_of(running, running.default_region), name_of(next, next.default_region));
        if from != to {
            let mut tally = Tally::new(window);
            let unit = Unit::Default.to_string();
            tally.add(&unit, 1.0, Measure::Exact);
            plan.push(unit, from, to, None, &tally);
        }
        plan
    }

    /// Whether nothing moves and no fence is given up: nothing to review.
    pub fn is_empty(&self) -> bool {
        self.moves.is_empty() && self.unfenced.is_empty()
    }

    fn push(&mut self, unit: String, from: Option<String>, to: Option<String>, key_share: Option<f64>, t: &Tally) {
        self.moves.push(Move { unit, from, to, key_share, traffic: t.traffic() });
    }

    fn countries(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        for id in 0..=u8::MAX {
            let (from, to) = (name_of(running, running.country_owner(id)), name_of(next, next.country_owner(id)));
            if from == to {
                continue;
            }
            let name = next.country_name(id).or(running.country_name(id)).map_or(id.to_string(), str::to_string);
            let mut tally = Tally::new(window);
            if let Some(old) = running.country_name(id) {
                tally.add(&Unit::Country(old).to_string(), 1.0, Measure::Exact);
            }
            self.push(Unit::Country(&name).to_string(), from, to, None, &tally);
        }
    }

    fn overrides(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        let cells = running.country_entity.iter().zip(next.country_entity.iter()).enumerate();
        let is_override = |c: u16| c != NONE && c & OVERRIDE_FLAG != 0;
        for (i, (&old, &new)) in cells {
            if !is_override(old) && !is_override(new) {
                continue;
            }
            let (from, to) = (owner(running, old), owner(next, new));
            if from == to {
                continue;
            }
            let (country, entity) = ((i >> 8) as u8, (i & 0xff) as u8);
            let named = |t: &Table| Some((t.country_name(country)?.to_string(), t.entity_name(entity)?.to_string()));
            let (c, e) = named(next).or_else(|| named(running)).unwrap_or((country.to_string(), entity.to_string()));
            let mut tally = Tally::new(window);
            // Without an override, the running table counted it with its country.
            if is_override(old) {
                let (c, e) = named(running).unwrap_or((country.to_string(), entity.to_string()));
                tally.add(&Unit::Override { country: &c, entity: &e }.to_string(), 1.0, Measure::Exact);
            }
            self.push(Unit::Override { country: &c, entity: &e }.to_string(), from, to, None, &tally);
        }
    }

    /// Shard-like arrays: each index compared, runs of one change merged;
    /// traffic from the running units (`units`: each index's unit name and
    /// its size in indexes).
    fn cells(
        &mut self,
        kind: &str,
        units: Vec<Option<(&str, usize)>>,
        old: &[u16],
        new: &[u16],
        (running, next): (&Table, &Table),
        window: Option<&Window>,
    ) {
        let len = old.len().max(new.len());
        let at = |cells: &[u16], i: usize| cells.get(i).copied().unwrap_or(NONE);
        let mut i = 0;
        while i < len {
            let (from, to) = (owner(running, at(old, i)), owner(next, at(new, i)));
            if from == to {
                i += 1;
                continue;
            }
            let start = i;
            let mut parts: Vec<(&str, u128, u128)> = Vec::new();
            while i < len && owner(running, at(old, i)) == from && owner(next, at(new, i)) == to {
                if let Some(&Some((name, size))) = units.get(i) {
                    match parts.last_mut() {
                        Some(p) if p.0 == name => p.1 += 1,
                        _ => parts.push((name, 1, size as u128)),
                    }
                }
                i += 1;
            }
            let mut tally = Tally::new(window);
            tally.add_parts(&parts);
            let unit = if start + 1 == i { format!("{kind} {start}") } else { format!("{kind}s {start}-{}", i - 1) };
            self.push(unit, from, to, None, &tally);
        }
    }

    fn nodes(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        let maps = [
            (Node::LocalityMac, &running.locality_mac, &next.locality_mac),
            (Node::LocalityPid, &running.locality_pid, &next.locality_pid),
            (Node::SnowflakeDatacenter, &running.snowflake_dc, &next.snowflake_dc),
            (Node::SnowflakeWorker, &running.snowflake_worker, &next.snowflake_worker),
            (Node::SonyflakeMachine, &running.sonyflake_machine, &next.sonyflake_machine),
        ];
        for (kind, old, new) in maps {
            let mut keys: Vec<u64> = old.keys().chain(new.keys()).copied().collect();
            keys.sort_unstable();
            keys.dedup();
            for key in keys {
                let from = old.get(&key).and_then(|&r| owner(running, r));
                let to = new.get(&key).and_then(|&r| owner(next, r));
                if from != to {
                    let name = Unit::Node(kind, key).to_string();
                    let mut tally = Tally::new(window);
                    if old.contains_key(&key) {
                        tally.add(&name, 1.0, Measure::Exact);
                    }
                    self.push(name, from, to, None, &tally);
                }
            }
        }
    }

    fn key_ranges(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        let range = |t: &Table, at: u64| t.key_starts.partition_point(|&s| s <= at).checked_sub(1);
        let mut runs: Vec<KeyRun> = Vec::new();
        for (a, b) in segments(&running.key_starts, &next.key_starts, true) {
            let (old, new) = (range(running, a), range(next, a));
            let from = old.and_then(|i| owner(running, running.key_regions[i]));
            let to = new.and_then(|i| owner(next, next.key_regions[i]));
            if from == to {
                continue;
            }
            if !runs.last().is_some_and(|r| r.1 == u128::from(a) && r.2 == (from.clone(), to.clone())) {
                runs.push((a, u128::from(a), (from, to), Vec::new()));
            }
            let Some(run) = runs.last_mut() else { continue };
            run.1 = b;
            if let Some(i) = old {
                let start = running.key_starts[i];
                let end = running.key_starts.get(i + 1).map_or(1u128 << 64, |&e| u128::from(e));
                run.3.push((Unit::KeyRange(start).to_string(), b - u128::from(a), end - u128::from(start)));
            }
        }
        for (a, b, (from, to), parts) in runs {
            let mut tally = Tally::new(window);
            let parts: Vec<(&str, u128, u128)> = parts.iter().map(|(n, c, s)| (n.as_str(), *c, *s)).collect();
            tally.add_parts(&parts);
            let share = (b - u128::from(a)) as f64 / (1u128 << 64) as f64;
            let end = if b == 1u128 << 64 { "end".to_string() } else { format!("{b:016x}") };
            self.push(format!("key_range {a:016x}..{end}"), from, to, Some(share), &tally);
        }
    }

    fn time_ranges(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        let bounds = |t: &Table| -> Vec<u64> { t.time_until.iter().copied().filter(|&u| u != u64::MAX).collect() };
        let (old_ends, new_ends) = (bounds(running), bounds(next));
        let range = |t: &Table, at: u64| {
            let i = t.time_until.partition_point(|&u| u <= at);
            (i < t.time_regions.len()).then_some(i)
        };
        for (a, b) in segments(&old_ends, &new_ends, false) {
            let (old, new) = (range(running, a), range(next, a));
            let from = old.and_then(|i| owner(running, running.time_regions[i]));
            let to = new.and_then(|i| owner(next, next.time_regions[i]));
            if from == to {
                continue;
            }
            let mut tally = Tally::new(window);
            if let Some(i) = old {
                let until = running.time_until[i];
                let starts_here = if i == 0 { a == 0 } else { running.time_until[i - 1] == a };
                let whole = starts_here && u128::from(until) == b;
                let name = Unit::TimeRange((until != u64::MAX).then_some(until)).to_string();
                // A part of a range: time is not uniform, so its whole count bounds it.
                tally.add(&name, 1.0, if whole { Measure::Exact } else { Measure::AtMost });
            }
            let ms = |v: u128| {
                u64::try_from(v)
                    .ok()
                    .and_then(|ms| crate::ids::clock::iso8601(ms.saturating_mul(1000), 0))
                    .map(|t| t.to_string())
            };
            let unit = match (a, ms(b).filter(|_| b < u128::from(u64::MAX))) {
                (0, Some(until)) => format!("time_range until {until}"),
                (0, None) => "time_range all".to_string(),
                (a, Some(until)) => format!("time_range {}..{until}", ms(u128::from(a)).unwrap_or_default()),
                (a, None) => format!("time_range from {}", ms(u128::from(a)).unwrap_or_default()),
            };
            self.push(unit, from, to, None, &tally);
        }
    }

    fn hash(&mut self, running: &Table, next: &Table, window: Option<&Window>) {
        let candidates = |t: &Table| -> Vec<(String, u64, u64)> {
            t.hash.iter().map(|c| (t.region(RegionId(c.region)).name.clone(), c.seed, c.weight.to_bits())).collect()
        };
        if candidates(running) == candidates(next) {
            return;
        }
        let mut moved: Vec<(Owners, u64)> = Vec::new();
        for i in 0..HASH_SAMPLES {
            // Spread evenly over the key space (keys are hashes).
            let key = i.wrapping_mul(u64::MAX / HASH_SAMPLES);
            let (from, to) = (name_of(running, running.rendezvous(key)), name_of(next, next.rendezvous(key)));
            if from == to {
                continue;
            }
            match moved.iter_mut().find(|(k, _)| k.0 == from && k.1 == to) {
                Some((_, n)) => *n += 1,
                None => moved.push(((from, to), 1)),
            }
        }
        moved.sort();
        for ((from, to), n) in moved {
            let share = n as f64 / HASH_SAMPLES as f64;
            let mut tally = Tally::new(window);
            for c in running.hash.iter() {
                let name = running.region(RegionId(c.region)).name.as_str();
                if Some(name) == from.as_deref() {
                    // The keys leaving `from` are a share of all keys; of `from`'s own, more.
                    let own = running_share(running, c.region);
                    tally.add(
                        &Unit::Hash(name).to_string(),
                        if own > 0.0 { share / own } else { 0.0 },
                        Measure::Estimated,
                    );
                }
            }
            self.push("hash".to_string(), from, to, Some(share), &tally);
        }
    }
}

/// The share of the key space `region` owns by hashing in `table`.
fn running_share(table: &Table, region: u16) -> f64 {
    let n = (0..HASH_SAMPLES / 16)
        .filter(|&i| table.rendezvous(i.wrapping_mul(u64::MAX / (HASH_SAMPLES / 16))) == Some(RegionId(region)))
        .count();
    n as f64 / (HASH_SAMPLES / 16) as f64
}

/// The segments between the boundaries of both tables, `[a, b)`, as `u128`
/// ends so the last reaches 2^64 (`from_zero`: the key space starts at 0;
/// else time starts at 0 as well, and the last segment is open).
fn segments(old: &[u64], new: &[u64], from_zero: bool) -> Vec<(u64, u128)> {
    let mut points: Vec<u64> = old.iter().chain(new).copied().collect();
    if from_zero || !points.contains(&0) {
        points.push(0);
    }
    points.sort_unstable();
    points.dedup();
    let end = if from_zero { 1u128 << 64 } else { u128::from(u64::MAX) };
    points.iter().enumerate().map(|(i, &a)| (a, points.get(i + 1).map_or(end, |&b| u128::from(b)))).collect()
}

impl fmt::Display for Plan {
    /// For people: one line per move, then what traffic it carried.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fences::write_list(f, &self.unfenced)?;
        let n = self.moves.len();
        if n == 0 {
            return writeln!(f, "nothing moves: every placement unit keeps its owner");
        }
        writeln!(f, "{n} placement unit{} move{}:", if n == 1 { "" } else { "s" }, if n == 1 { "s" } else { "" })?;
        let width = self.moves.iter().map(|m| m.unit.len()).max().unwrap_or(0);
        for m in &self.moves {
            let region = |r: &Option<String>| r.clone().unwrap_or_else(|| "(no entry)".into());
            let route = format!("{} -> {}", region(&m.from), region(&m.to));
            write!(f, "  {:width$}  {route:24}", m.unit)?;
            if let Some(k) = m.key_share {
                write!(f, "  key space {:.2}%", k * 100.0)?;
            }
            match (&m.traffic, &self.window) {
                (Some(t), _) => {
                    let how = match t.measure {
                        Measure::Exact => "",
                        Measure::Estimated => "~",
                        Measure::AtMost => "<= ",
                    };
                    write!(f, "  {how}{:.2}% of traffic ({how}{:.0} requests)", t.share * 100.0, t.requests)?;
                }
                (None, Some(_)) if matches!(Unit::movable(&m.unit), Some(Unit::Override { .. })) => {
                    f.write_str("  traffic not counted apart (the running table counts it with its country)")?
                }
                (None, Some(_)) => f.write_str("  no traffic counted (no entry in the running table)")?,
                (None, None) => {}
            }
            writeln!(f)?;
        }
        match &self.window {
            Some(w) => {
                // Parts of time ranges are bounds, not counts: they are left out of the sum.
                let counted =
                    self.moves.iter().filter_map(|m| m.traffic.as_ref()).filter(|t| t.measure != Measure::AtMost);
                let moving: f64 = counted.map(|t| t.requests).sum();
                let share = if w.total == 0 { 0.0 } else { moving / w.total as f64 * 100.0 };
                writeln!(
                    f,
                    "traffic over the last {:.0} s: {} placed requests, {share:.2}% of them on moving units",
                    w.seconds, w.total
                )?;
                if self.moves.iter().any(|m| m.traffic.as_ref().is_some_and(|t| t.measure == Measure::AtMost)) {
                    writeln!(f, "(parts of time ranges are not in that sum: each is at most its range's traffic)")?;
                }
                Ok(())
            }
            None => writeln!(f, "traffic: none available (give --admin URL of a running instance)"),
        }
    }
}

#[cfg(test)]
mod tests;
