//! `moves`: placement units being re-homed. A move names a unit as `plan`
//! names it (`country KZ`, `override KZ:WalletAccount`, `shards 6-7`,
//! `key_range c000000000000000`) and the region it goes to. The owner stays
//! where the placement sections say: in `hold` the unit is still its
//! source's, and the revision that switches it gives it to `to` and says
//! `phase: switch`, so a table never holds one owner in two places.

use std::collections::HashSet;
use std::time::Duration;

use super::names::Names;
use crate::config::model::{Country, Entity, MoveRule, Override, Shards};
use crate::config::report::Ctx;
use crate::config::schema::{File, MovePhase};
use crate::config::show;
use crate::config::unit::{Unit, MOVABLE_FORMS};
use crate::config::yaml::YamlPath;

/// The placement sections a move's unit is looked up in.
pub(super) struct Owners<'a> {
    pub(super) countries: &'a [Country],
    pub(super) entities: &'a [Entity],
    pub(super) overrides: &'a [Override],
    pub(super) shards: Option<&'a Shards>,
    pub(super) key_ranges: &'a [(u64, usize)],
}

impl Owners<'_> {
    /// The region that owns `unit` in this table; `None` when it is not a
    /// unit of it that a move can name.
    fn owner(&self, unit: &str) -> Option<usize> {
        match Unit::movable(unit)? {
            Unit::Country(c) => self.countries.iter().find(|x| x.name == c).map(|x| x.region),
            Unit::Override { country, entity } => {
                let country = self.countries.iter().find(|x| x.name == country)?.id;
                let entity = self.entities.iter().find(|x| x.name == entity)?.code;
                self.overrides.iter().find(|o| o.country == country && o.entity == entity).map(|o| o.region)
            }
            Unit::Shards(a, b) => self.shards?.ranges.iter().find(|&&(x, y, _)| x == a && y == b).map(|r| r.2),
            Unit::KeyRange(start) => self.key_ranges.iter().find(|&&(s, _)| s == start).map(|r| r.1),
            Unit::Node(..) | Unit::InstagramShards(..) | Unit::TimeRange(_) | Unit::Hash(_) | Unit::Default => None,
        }
    }
}

/// Checks every move and makes its typed form.
pub(super) fn moves(file: &File, names: &Names<'_>, owners: &Owners<'_>, ctx: &mut Ctx<'_>) -> Vec<MoveRule> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(file.moves.len());
    for m in &file.moves {
        let p = YamlPath::root().k("moves").i(m.index);
        let to = names.region(ctx, &p.k("to"), &m.to);
        let owner = owners.owner(&m.unit);
        if owner.is_none() {
            ctx.at(
                &p.k("unit"),
                format!("{} is not a placement unit of this table", show(&m.unit)),
                Some(MOVABLE_FORMS),
            );
        }
        if !seen.insert(m.unit.as_str()) {
            ctx.at(&p.k("unit"), format!("{} is moved twice", show(&m.unit)), Some("one move per unit at a time"));
        }
        if m.epoch == 0 {
            ctx.at(&p.k("epoch"), "epoch 0: epochs start at 1".into(), Some("raise it for every move of the unit"));
        }
        let hold_all = match m.hold.requests.as_str() {
            "writes" => false,
            "all" => true,
            other => {
                ctx.at(&p.k("hold").k("requests"), format!("{} is not `writes` or `all`", show(other)), None);
                false
            }
        };
        if m.hold.max_requests == 0 {
            ctx.at(&p.k("hold").k("max_requests"), "max_requests 0 would hold nothing".into(), Some("at least 1"));
        }
        if m.hold.max_time.0 == Duration::ZERO {
            ctx.at(&p.k("hold").k("max_time"), "max_time 0 would abort at once".into(), Some("e.g. 5s"));
        }
        if m.release_rate == 0 {
            ctx.at(
                &p.k("release_rate"),
                "release_rate 0 would never release".into(),
                Some("requests per second, e.g. 500"),
            );
        }
        let (Some(to), Some(owner)) = (to, owner) else { continue };
        match m.phase {
            MovePhase::Switch if owner != to => ctx.at(
                &p.k("phase"),
                format!(
                    "a switch of {} to {} but the table still gives it to another region",
                    show(&m.unit),
                    show(&m.to)
                ),
                Some("the revision that switches a unit also gives it its new owner in the placement section"),
            ),
            MovePhase::Hold if owner == to => ctx.at(
                &p.k("phase"),
                format!("{} already belongs to {}: there is nothing to hold", show(&m.unit), show(&m.to)),
                Some("hold while the table still gives the unit to its source, then switch"),
            ),
            _ => {}
        }
        out.push(MoveRule {
            unit: m.unit.clone(),
            to,
            phase: m.phase,
            epoch: m.epoch,
            hold_all,
            max_requests: m.hold.max_requests,
            max_time: m.hold.max_time.0,
            release_rate: m.release_rate,
        });
    }
    out
}
