//! The fences a new table gives up: ids a moved unit's epoch guarded in
//! the running table that no unit at that epoch guards in the new one.
//!
//! | how | listed as |
//! |---|---|
//! | the unit's move removed | `country KZ at epoch 5 (switch): its move is removed` |
//! | its epoch set back | `country KZ at epoch 5 (switch): set back to epoch 3` |
//! | a unit split out of it without the move | `override KZ:Wallet, split out of country KZ at epoch 5 (switch): it has no move` |
//! | … with the move at a lower epoch | `…: its move is at epoch 3` |
//!
//! The first two compare moves by unit name (`unfenced`). The third
//! compares where ids land ([`given_up`]): each piece of the id space a
//! moved unit can be split along (a (country, entity) cell, a shard, a
//! segment between the key boundaries of both tables; moves name no other
//! kind of unit) with the unit each table places it by, the default
//! region's when the new table places it nowhere; and UUIDv7 ids that
//! `auto` stops placing by key range. The pieces also clear a move whose
//! name is gone but whose ids all land in units at its epoch or a higher
//! one (a country renamed with its move): a gateway fences by the epoch
//! of the unit an id lands in, not by name.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde::Serialize;

use super::segments;
use crate::config::model::MoveRule;
use crate::config::schema::MovePhase;
use crate::config::unit::Unit;
use crate::ids::Format;
use crate::routing::rule::{RegionId, Rule, Strategy};
use crate::routing::table::{Table, NONE, OVERRIDE_FLAG};

/// The region units are looked up with: only hash units depend on it, and
/// they are never split.
const ANY: RegionId = RegionId(0);

/// A unit whose fence the new table gives up: its move removed, set back
/// to a lower epoch, or a unit split out of it without the move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unfenced {
    /// The unit, as the tables' `moves` name it; when split out of another,
    /// the new table's unit its ids land in (`default`, or `uuidv7 ids
    /// placed by …` for those `auto` takes off the key ranges).
    pub unit: String,
    /// The running table's moved unit it was split out of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    /// The move's phase in the running table.
    pub phase: MovePhase,
    /// The move's epoch in the running table.
    pub epoch: u64,
    /// The unit's epoch in the new table (`None`: it has no move).
    pub next: Option<u64>,
}

/// The fences a table whose moves are `next` gives up against one whose
/// moves are `running`, by unit name: each move of `running` it does not
/// record, or records at a lower epoch.
fn unfenced<'a, 'b>(
    running: impl IntoIterator<Item = &'a MoveRule>,
    next: impl IntoIterator<Item = &'b MoveRule>,
) -> Vec<Unfenced> {
    let next: Vec<&MoveRule> = next.into_iter().collect();
    running
        .into_iter()
        .filter_map(|m| {
            let kept = next.iter().find(|n| n.unit == m.unit).map(|n| n.epoch);
            let given_up = kept.is_none_or(|epoch| epoch < m.epoch);
            given_up.then(|| Unfenced {
                unit: m.unit.clone(),
                within: None,
                phase: m.phase,
                epoch: m.epoch,
                next: kept,
            })
        })
        .collect()
}

/// Every fence `next` gives up against `running`: by name, then the units
/// split out of moved ones (one entry a pair; none within a moved unit
/// already listed by name). A move whose name is gone but whose every
/// piece `next` places by a unit at its epoch or a higher one (a country
/// renamed with its move) gives nothing up: the fence is the epoch of the
/// unit an id lands in, whatever its name.
pub fn given_up(running: &Table, next: &Table) -> Vec<Unfenced> {
    let mut list = unfenced(running.moves(), next.moves());
    let kinds = Kinds::moved(running);
    if !(kinds.iuid || kinds.shards || kinds.keys) {
        return list;
    }
    // Pieces of each moved unit of `running`, by unit: all, and those still fenced.
    let mut pieces_of: HashMap<u32, (usize, usize)> = HashMap::new();
    let mut split: Vec<Unfenced> = Vec::new();
    let mut seen: HashSet<(u32, u32)> = HashSet::new();
    let (old_units, new_units) = (running.units(), next.units());
    for (old, new) in pieces(running, next, kinds) {
        let unit = old_units.unit_of(old, ANY);
        let Some(m) = running.move_at(unit) else { continue };
        // Placed nowhere, nothing lands there: no fence is needed.
        let Some(landed) = new.map(|n| new_units.unit_of(n, ANY)) else { continue };
        let epoch = next.move_at(landed).map(|n| n.epoch);
        let fenced = epoch.is_some_and(|e| e >= m.epoch);
        let counted = pieces_of.entry(unit).or_default();
        counted.0 += 1;
        counted.1 += usize::from(fenced);
        if fenced || !seen.insert((unit, landed)) {
            continue;
        }
        // Under its own name, it is listed by name.
        let (Some(within), Some(name)) = (old_units.name_at(unit), new_units.name_at(landed)) else { continue };
        if name != within {
            let within = Some(within.to_string());
            split.push(Unfenced { unit: name.to_string(), within, phase: m.phase, epoch: m.epoch, next: epoch });
        }
    }
    // UUIDv7 ids under `auto` leave the key ranges when the new table adds
    // time ranges (or drops every key range): no unit they land in has a move.
    let uuidv7 = (running.natural_strategy(Format::Uuidv7), next.natural_strategy(Format::Uuidv7));
    if kinds.keys && uuidv7.0 == Strategy::KeyRange && uuidv7.1 != Strategy::KeyRange {
        let by = if uuidv7.1 == Strategy::TimeRange { "time_range" } else { "hash" };
        for m in running.moves().filter(|m| matches!(Unit::movable(&m.unit), Some(Unit::KeyRange(_)))) {
            let (unit, within) = (format!("uuidv7 ids placed by {by} (auto)"), Some(m.unit.clone()));
            split.push(Unfenced { unit, within, phase: m.phase, epoch: m.epoch, next: None });
        }
    }
    let named = |u: &Unfenced| old_units.index_of(&u.unit);
    list.retain(|u| named(u).and_then(|i| pieces_of.get(&i)).is_none_or(|&(all, fenced)| fenced < all));
    split.retain(|s| !list.iter().any(|u| Some(&u.unit) == s.within.as_ref()));
    list.extend(split);
    list
}

/// The kinds of piece compared: only those of a kind some unit moved.
#[derive(Clone, Copy, Default)]
struct Kinds {
    iuid: bool,
    shards: bool,
    keys: bool,
}

impl Kinds {
    /// The kinds of the units `running` moves.
    fn moved(running: &Table) -> Kinds {
        let mut kinds = Kinds::default();
        for m in running.moves() {
            match Unit::movable(&m.unit) {
                Some(Unit::Country(_) | Unit::Override { .. }) => kinds.iuid = true,
                Some(Unit::Shards(..)) => kinds.shards = true,
                Some(Unit::KeyRange(_)) => kinds.keys = true,
                Some(
                    Unit::Node(..) | Unit::InstagramShards(..) | Unit::TimeRange(_) | Unit::Hash(_) | Unit::Default,
                )
                | None => {}
            }
        }
        kinds
    }
}

/// Each piece of the id space a moved unit can be split along, with the
/// rule each table places it by: a (country, entity) cell, a shard, a
/// segment between the key boundaries of both tables. An id the new table
/// places nowhere lands in its `default_region`, when it has one.
fn pieces<'t>(running: &'t Table, next: &'t Table, kinds: Kinds) -> impl Iterator<Item = (Rule, Option<Rule>)> + 't {
    let or_default = |rule: Option<Rule>| rule.or(next.default_region.map(|_| Rule::Default));
    let cells = if kinds.iuid { 1usize << 16 } else { 0 };
    let iuid = (0..cells).filter_map(move |cell| Some((iuid_rule(running, cell)?, or_default(iuid_rule(next, cell)))));
    let placed = |t: &Table, shard: usize| t.shards.get(shard).is_some_and(|&c| c != NONE);
    let shards = (0..if kinds.shards { running.shards.len() } else { 0 })
        .filter(move |&s| placed(running, s))
        .filter_map(|s| Some((s, u32::try_from(s).ok()?)))
        .map(move |(s, shard)| (Rule::Shard { shard }, or_default(placed(next, s).then_some(Rule::Shard { shard }))));
    let key = |t: &Table, at: u64| t.key_starts.partition_point(|&s| s <= at).checked_sub(1);
    let segments = if kinds.keys { segments(&running.key_starts, &next.key_starts, true) } else { Vec::new() };
    let keys = segments.into_iter().filter_map(move |(a, _)| {
        Some((
            Rule::KeyRange { index: key(running, a)? },
            or_default(key(next, a).map(|index| Rule::KeyRange { index })),
        ))
    });
    iuid.chain(shards).chain(keys)
}

/// The rule `t` places an iUID's (country, entity) `cell` by, as
/// placement reads it (an override, else its country).
fn iuid_rule(t: &Table, cell: usize) -> Option<Rule> {
    let (country, entity) = ((cell >> 8) as u8, (cell & 0xff) as u8);
    match t.country_entity.get(cell).copied()? {
        NONE => None,
        v if v & OVERRIDE_FLAG != 0 => Some(Rule::Override { country, entity }),
        _ => Some(Rule::Country { country }),
    }
}

impl fmt::Display for Unfenced {
    /// `country KZ at epoch 5 (switch): its move is removed`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (unit, epoch, phase) = (&self.unit, self.epoch, self.phase.name());
        match (&self.within, self.next) {
            (None, None) => write!(f, "{unit} at epoch {epoch} ({phase}): its move is removed"),
            (None, Some(e)) => write!(f, "{unit} at epoch {epoch} ({phase}): set back to epoch {e}"),
            (Some(w), None) => write!(f, "{unit}, split out of {w} at epoch {epoch} ({phase}): it has no move"),
            (Some(w), Some(e)) => {
                write!(f, "{unit}, split out of {w} at epoch {epoch} ({phase}): its move is at epoch {e}")
            }
        }
    }
}

/// What keeps every fence, as `plan` and `move` advise it.
pub const KEEP_FENCES: &str = "keep each move at its epoch or a higher one; give a unit split out of a moved one \
                               the move too, at that epoch; keep a moved unit's ids out of default_region, and \
                               UUIDv7 ids by key range while one is moved";

/// The fences given up, for people: first in a plan, since they are what
/// a reviewer must not miss.
pub(super) fn write_list(f: &mut fmt::Formatter<'_>, list: &[Unfenced]) -> fmt::Result {
    if list.is_empty() {
        return Ok(());
    }
    writeln!(f, "fences given up: a write forwarded by an instance still on an older table is no longer refused")?;
    for u in list {
        writeln!(f, "  {u}")?;
    }
    writeln!(f, "({KEEP_FENCES}; call a move off with phase: abort)")
}
