//! The fences a new table gives up: ids a moved unit's epoch guarded in
//! the running table that no unit at that epoch guards in the new one.
//!
//! | how | listed as |
//! |---|---|
//! | the unit's move removed | `country KZ at epoch 5 (switch): its move is removed` |
//! | its epoch set back | `country KZ at epoch 5 (switch): set back to epoch 3` |
//! | a unit split out of it without the move | `override KZ:Wallet, split out of country KZ at epoch 5 (switch): it has no move` |
//!
//! The first two compare moves by unit name ([`unfenced`], which `move`
//! also uses on the tables it puts). The third compares where ids land:
//! each piece of the id space a unit can be split along (a (country,
//! entity) cell, a shard, an Instagram shard, a segment between the key
//! or time boundaries of both tables) with the unit each table places it
//! by. Node entries, hash regions and the default are single keys: a unit
//! of theirs cannot be split, only removed, which the names show. The
//! pieces also clear a move whose name is gone but whose ids all land in
//! units at its epoch or a higher one (a country renamed with its move):
//! a gateway fences by the epoch of the unit an id lands in, not by name.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use super::segments;
use crate::config::model::MoveRule;
use crate::config::schema::MovePhase;
use crate::routing::rule::{RegionId, Rule};
use crate::routing::table::{Table, NONE, OVERRIDE_FLAG};

/// The region units are looked up with: only hash units depend on it, and
/// they are never split.
const ANY: RegionId = RegionId(0);

/// A unit whose fence the new table gives up: its move removed, set back
/// to a lower epoch, or a unit split out of it without the move.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unfenced {
    /// The unit, as the tables' `moves` name it (the new table's unit when
    /// it was split out of another).
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
pub fn unfenced<'a, 'b>(
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
pub(super) fn between(running: &Table, next: &Table) -> Vec<Unfenced> {
    let mut list = unfenced(running.moves(), next.moves());
    if running.moves().next().is_none() {
        return list;
    }
    // Pieces of each moved unit of `running`: all, and those still fenced.
    let mut pieces_of: HashMap<&str, (usize, usize)> = HashMap::new();
    let mut split: Vec<Unfenced> = Vec::new();
    for (old, new) in pieces(running, next) {
        let (Some(m), Some(within)) = (running.move_of(old, ANY), running.units().name(old, ANY)) else {
            continue;
        };
        let epoch = new.and_then(|n| next.move_of(n, ANY)).map(|n| n.epoch);
        let fenced = epoch.is_some_and(|e| e >= m.epoch);
        let counted = pieces_of.entry(within).or_default();
        counted.0 += 1;
        counted.1 += usize::from(fenced);
        // Unplaced, nothing lands there; under its own name, listed by name.
        let Some(unit) = new.and_then(|n| next.units().name(n, ANY)).filter(|u| !fenced && *u != within) else {
            continue;
        };
        if !split.iter().any(|u| u.unit == unit && u.within.as_deref() == Some(within)) {
            let within = Some(within.to_string());
            split.push(Unfenced { unit: unit.to_string(), within, phase: m.phase, epoch: m.epoch, next: epoch });
        }
    }
    list.retain(|u| pieces_of.get(u.unit.as_str()).is_none_or(|&(all, fenced)| fenced < all));
    split.retain(|s| !list.iter().any(|u| Some(&u.unit) == s.within.as_ref()));
    list.extend(split);
    list
}

/// Each piece of the id space a unit can be split along, with the rule
/// each table places it by (`None`: the new table places it nowhere).
fn pieces<'t>(running: &'t Table, next: &'t Table) -> impl Iterator<Item = (Rule, Option<Rule>)> + 't {
    let iuid = (0..1usize << 16).filter_map(|cell| Some((iuid_rule(running, cell)?, iuid_rule(next, cell))));
    let shards = (0..running.shards.len())
        .filter_map(|s| u32::try_from(s).ok())
        .map(|shard| (Rule::Shard { shard }, Some(Rule::Shard { shard })));
    let instagram = (0..running.instagram_shard.len())
        .filter_map(|s| u16::try_from(s).ok())
        .map(|shard| (Rule::InstagramShard { shard }, Some(Rule::InstagramShard { shard })));
    let key = |t: &Table, at: u64| t.key_starts.partition_point(|&s| s <= at).checked_sub(1);
    let keys = segments(&running.key_starts, &next.key_starts, true).into_iter().filter_map(move |(a, _)| {
        Some((Rule::KeyRange { index: key(running, a)? }, key(next, a).map(|index| Rule::KeyRange { index })))
    });
    let time = |t: &Table, at: u64| {
        let i = t.time_until.partition_point(|&u| u <= at);
        (i < t.time_regions.len()).then_some(i)
    };
    let ends = |t: &Table| -> Vec<u64> { t.time_until.iter().copied().filter(|&u| u != u64::MAX).collect() };
    let times = segments(&ends(running), &ends(next), false).into_iter().filter_map(move |(a, _)| {
        Some((Rule::TimeRange { index: time(running, a)? }, time(next, a).map(|index| Rule::TimeRange { index })))
    });
    iuid.chain(shards).chain(instagram).chain(keys).chain(times)
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
    writeln!(
        f,
        "(keep each move at its epoch or a higher one, and give a unit split out of a moved one the move too; \
         call a move off with phase: abort)"
    )
}
