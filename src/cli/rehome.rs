//! `shardgate move --source etcd://…/KEY --hold HOLD.yaml --switch SWITCH.yaml
//! [--barrier 3s] [--recover 5m] [--region R]`: re-homes a placement unit
//! across a fleet that follows one etcd key, phase by phase. The tables are
//! checked as an instance serving `--region` loads them (a shared fleet
//! table names no region of its own).
//!
//! 1. Both tables are checked here first: the hold table must hold a move
//!    and the switch table switch it; each keeps the moves earlier moves
//!    left as they are, as neither may give up a fence the table before it
//!    keeps. Nothing is put when either is invalid, or when the hold table
//!    gives up a fence of the table in etcd (a move left out, set back, or
//!    a unit split out of a moved one without it), changes another unit's
//!    move there, or does not raise its unit's epoch.
//! 2. The hold table is put; then every instance of the fleet (each one's
//!    report under `KEY/fleet/`) must report that it runs it, or a later
//!    revision, within the barrier: each holds the unit's requests.
//! 3. Only then is the switch table put, and its application awaited.
//!    When an instance does not confirm the hold in time (down, frozen,
//!    rejecting the table), the hold table is put again with its holds
//!    called off (`phase: abort`): the move is aborted, every held request
//!    goes to the source, and no unit's epoch goes down.
//!
//! Each put goes only while the key is still at the revision this tool read
//! or last put: another writer's table is never overwritten; the move stops.
//! When etcd fails once the hold may be in, the tool asks again (for
//! `--recover`) and ends the move by what the key holds by then.
//!
//! Exit 0 when switched, 1 when aborted or refused, 2 for a barrier not
//! shorter than a hold's `max_time`, 69 when etcd cannot be reached, 78
//! when a table is invalid (or the two do not make a move together).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::exit;
use crate::config::instance::InstanceFlags;
use crate::config::model::MoveRule;
use crate::config::schema::MovePhase;
use crate::routing::plan::{given_up, Unfenced};
use crate::routing::Table;
use crate::source::etcd::{Client, Target};

/// `move`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MoveArgs {
    /// The key the fleet follows: etcd://HOST:PORT[,HOST:PORT...]/KEY.
    #[arg(long)]
    pub source: String,
    /// The table with the move in `phase: hold` (the unit still with its source).
    #[arg(long)]
    pub hold: PathBuf,
    /// The table with the move in `phase: switch` (the unit given to its new region).
    #[arg(long)]
    pub switch: PathBuf,
    /// How long every instance has to confirm the hold (shorter than the moves' hold.max_time).
    #[arg(long, default_value = "3s", value_parser = crate::config::duration::parse_duration)]
    pub barrier: Duration,
    /// When etcd fails once the hold may be in: how long to keep asking it, to end the move.
    #[arg(long, default_value = "5m", value_parser = crate::config::duration::parse_duration)]
    pub recover: Duration,
    /// With etcd authentication: the user (the password from SHARDGATE_ETCD_PASSWORD).
    #[arg(long, env = "SHARDGATE_ETCD_USER")]
    pub etcd_user: Option<String>,
    /// Check the tables as an instance serving this region loads them
    /// (`serve --region`), for a shared table that names none.
    #[arg(long)]
    pub region: Option<String>,
}

/// Runs `move`; returns the exit code.
pub fn run(args: &MoveArgs, out: &mut impl Write, err: &mut impl Write) -> i32 {
    let target = match Target::parse(&args.source) {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "shardgate move: {e}");
            return exit::USAGE;
        }
    };
    let tables = match tables(args) {
        Ok(t) => t,
        Err((code, e)) => {
            let _ = writeln!(err, "{e}");
            return code;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(err, "shardgate move: {e}");
            return exit::FAILURE;
        }
    };

    let user = args.etcd_user.clone().map(|u| (u, std::env::var("SHARDGATE_ETCD_PASSWORD").unwrap_or_default()));
    let client = Client::new(&target, None, user);
    match rt.block_on(drive(&client, &target, &tables, (args.barrier, args.recover), out)) {
        Ok(true) => exit::OK,
        Ok(false) => exit::FAILURE,
        Err(e) => {
            let _ = writeln!(err, "shardgate move: {}: {e}", target.name());
            exit::UNAVAILABLE
        }
    }
}

/// The three tables a move may put, checked before anything is.
struct Tables {
    /// The hold table's text and moves.
    hold: (String, Vec<Named>),
    /// The hold table with its holds called off, put when the barrier fails.
    off: String,
    /// The switch table's text.
    switch: String,
    /// How each table is loaded (`--region`).
    flags: InstanceFlags,
}

/// A move with the name of the region it goes to: each table numbers its
/// regions its own way.
#[derive(Clone, Debug)]
struct Named {
    rule: MoveRule,
    to: String,
}

/// The moves of `cfg`, each with its region's name.
fn named(cfg: &crate::config::Config) -> Vec<Named> {
    let name = |i: usize| cfg.regions.get(i).map(|r| r.name.clone()).unwrap_or_default();
    cfg.moves.iter().map(|m| Named { rule: m.clone(), to: name(m.to) }).collect()
}

/// Both tables, checked against each other, and the hold table called off;
/// else the exit code and why.
fn tables(args: &MoveArgs) -> Result<Tables, (i32, String)> {
    let flags = InstanceFlags::in_region(args.region.clone());
    let hold = checked(&args.hold, MovePhase::Hold, &flags)?;
    let switch = checked(&args.switch, MovePhase::Switch, &flags)?;
    let invalid = |e: String| (exit::CONFIG, format!("shardgate move: {e}"));
    if let Some(u) = fence_given_up(&hold.0, &switch.0, &flags) {
        return Err(invalid(format!("the switch table gives up a fence the hold table keeps: {u}")));
    }
    if let Some(h) = held(&hold.1).find(|h| args.barrier >= h.rule.max_time) {
        let (unit, max_time) = (&h.rule.unit, h.rule.max_time);
        return Err((
            exit::USAGE,
            format!(
                "shardgate move: --barrier {:?} is not shorter than {unit}'s hold.max_time {max_time:?}: held \
                 requests would give up first",
                args.barrier
            ),
        ));
    }
    pair(&hold.1, &switch.1).map_err(invalid)?;
    let off = called_off(&hold.0, &hold.1, &flags).ok_or_else(|| {
        invalid(format!(
            "{}: each hold's phase must be written in the move itself (not through an alias), so that a move \
             the fleet does not confirm can be called off at its epoch",
            args.hold.display()
        ))
    })?;
    Ok(Tables { hold, off, switch: switch.0, flags })
}

/// The text of the table at `path` and its moves: valid, with a move in
/// `phase`. Its other moves are what earlier moves left (a switch kept as
/// its unit's fence, an abort); a switch table holds nothing.
fn checked(
    path: &std::path::Path,
    phase: MovePhase,
    flags: &InstanceFlags,
) -> Result<(String, Vec<Named>), (i32, String)> {
    let (cfg, text) = flags.load_file(path).map_err(|e| (exit::CONFIG, format!("{e}\n{}: invalid", path.display())))?;
    let moves = named(&cfg);
    let moving = moves.iter().any(|m| m.rule.phase == phase);
    let holding = phase == MovePhase::Switch && held(&moves).next().is_some();
    if !moving || holding {
        let none_held = if phase == MovePhase::Switch { ", and none in phase hold" } else { "" };
        let name = phase.name();
        let why = format!("{}: this table must have a move in phase {name}{none_held}", path.display());
        return Err((exit::CONFIG, why));
    }
    Ok((text, moves))
}

/// The units a table holds: its moves in phase `hold`.
fn held(moves: &[Named]) -> impl Iterator<Item = &Named> {
    moves.iter().filter(|m| m.rule.phase == MovePhase::Hold)
}

/// The switch moves the units the hold holds, to the same regions, each at
/// a higher epoch, and keeps the hold table's other moves as they are (the
/// fences of earlier moves).
fn pair(hold: &[Named], switch: &[Named]) -> Result<(), String> {
    for h in held(hold) {
        let (unit, epoch) = (&h.rule.unit, h.rule.epoch);
        let Some(s) = switch.iter().find(|s| &s.rule.unit == unit && s.rule.phase == MovePhase::Switch) else {
            return Err(format!("the switch table does not switch {unit}"));
        };
        if s.to != h.to || s.rule.epoch <= epoch {
            return Err(format!("{unit}: the switch must go to the hold's region at a higher epoch than {epoch}"));
        }
    }
    if let Some(s) = switch.iter().find(|s| !hold.iter().any(|h| h.rule.unit == s.rule.unit)) {
        return Err(format!("the switch table moves {}, which the hold table has no move for", s.rule.unit));
    }
    match changed(hold.iter().filter(|h| h.rule.phase != MovePhase::Hold), switch) {
        Some(unit) => Err(format!(
            "the switch table changes {unit}'s move, or leaves it out, which the hold table keeps from an \
                 earlier move (rename a moved unit in a revision of its own)"
        )),
        None => Ok(()),
    }
}

/// The first of `kept` (moves earlier moves left) that `next` records
/// otherwise (another phase, region or epoch) or not under its name. A move
/// changes only the units it holds; a moved unit is renamed in a revision
/// of its own.
fn changed<'a>(kept: impl IntoIterator<Item = &'a Named>, next: &[Named]) -> Option<&'a str> {
    let same = |k: &Named, n: &Named| (n.rule.phase, &n.to, n.rule.epoch) == (k.rule.phase, &k.to, k.rule.epoch);
    kept.into_iter()
        .find(|k| !next.iter().any(|n| n.rule.unit == k.rule.unit && same(k, n)))
        .map(|k| k.rule.unit.as_str())
}

/// The hold table with its holds called off: the value of each held move's
/// `phase` made `abort` where the text writes it, at its epoch, which sends
/// held requests to the source as the table from before the hold would,
/// without setting the units' epochs back (and with them the fences of
/// earlier switches). Nothing else of the text changes. `None` when a
/// hold's value is not where the text says (an alias) or the result does
/// not load with every held move an abort.
fn called_off(hold: &str, moves: &[Named], flags: &InstanceFlags) -> Option<String> {
    use crate::config::yaml::{walk, YamlPath};
    let walked = walk(hold, crate::config::keys::shape()).ok()?;
    let mut lines: Vec<String> = hold.split('\n').map(str::to_owned).collect();
    for (i, _) in moves.iter().enumerate().filter(|(_, m)| m.rule.phase == MovePhase::Hold) {
        let pos = walked.index.value_pos(&YamlPath::root().k("moves").i(i).k("phase"));
        let line = lines.get_mut(pos.line.checked_sub(1)?)?;
        let at = line.char_indices().nth(pos.col.checked_sub(1)?)?.0;
        let word = ["hold", "\"hold\"", "'hold'"].into_iter().find(|w| line[at..].starts_with(w))?;
        line.replace_range(at..at + word.len(), &word.replace("hold", "abort"));
    }
    let text = lines.join("\n");
    let after = named(&flags.load(&text, "the hold table, called off").ok()?);
    let aborted = |(h, a): (&Named, &Named)| match h.rule.phase {
        MovePhase::Hold => a.rule == MoveRule { phase: MovePhase::Abort, ..h.rule.clone() },
        _ => a.rule == h.rule,
    };
    (after.len() == moves.len() && moves.iter().zip(&after).all(aborted)).then_some(text)
}

/// The first fence the table `next` gives up that `running` keeps, as
/// `plan` finds them: a move left out or set back, a unit split out of a
/// moved one without it (a unit renamed with its move gives none up).
/// `None` when either does not load: the other checks say why.
fn fence_given_up(running: &str, next: &str, flags: &InstanceFlags) -> Option<Unfenced> {
    let table = |text: &str| flags.load(text, "table").ok().map(|cfg| Table::compile(&cfg));
    given_up(&table(running)?, &table(next)?).into_iter().next()
}

/// Why the table in etcd refuses the hold table, or that table's problems
/// when it does not load (its epochs cannot be checked):
/// - a unit the hold holds that it moves at the hold's epoch or a later
///   one: each move of a unit must raise its epoch, or a forward from an
///   instance still on an older table would win the fence;
/// - a fence it keeps that the hold table gives up (`fences`: the tables'
///   [`fence_given_up`], said in full);
/// - a move of another unit that the hold table changes.
fn refused(
    running: &str,
    hold: &[Named],
    flags: &InstanceFlags,
    fences: impl FnOnce() -> Option<String>,
) -> Option<String> {
    let cfg = match flags.load(running, "the table in etcd") {
        Ok(cfg) => cfg,
        Err(e) => return Some(format!("the table in etcd does not load, so its units' epochs are unknown:\n{e}")),
    };
    let etcd = named(&cfg);
    let stale = held(hold).find_map(|h| {
        let m = etcd.iter().find(|m| m.rule.unit == h.rule.unit && m.rule.epoch >= h.rule.epoch)?;
        Some(format!(
            "{} is at epoch {} in the table in etcd: the hold must raise it (epoch {} or more)",
            h.rule.unit,
            m.rule.epoch,
            m.rule.epoch.saturating_add(1)
        ))
    });
    stale.or_else(fences).or_else(|| {
        let kept = etcd.iter().filter(|m| !held(hold).any(|h| h.rule.unit == m.rule.unit));
        let unit = changed(kept, hold)?;
        Some(format!(
            "the hold table changes {unit}'s move in the table in etcd, or leaves it out: a move changes only the \
             units it holds (rename a moved unit in a revision of its own)"
        ))
    })
}

/// Hold, barrier, switch (or the hold called off): whether it switched.
/// The barrier, and how long to keep asking a failed etcd (`--recover`).
async fn drive(
    client: &Client,
    target: &Target,
    tables: &Tables,
    (barrier, recover): (Duration, Duration),
    out: &mut impl Write,
) -> Result<bool, crate::source::etcd::EtcdError> {
    let Some(before) = client.get(&target.key).await?.0 else {
        let _ = writeln!(out, "no table at {}: nothing to move", target.key);
        return Ok(false);
    };
    let given_up = || {
        let u = fence_given_up(&before.value, &tables.hold.0, &tables.flags)?;
        Some(format!(
            "the hold table gives up a fence the table in etcd keeps: {u}; {}",
            crate::routing::plan::KEEP_FENCES
        ))
    };
    if let Some(why) = refused(&before.value, &tables.hold.1, &tables.flags, given_up) {
        let _ = writeln!(out, "not moved: {why}");
        return Ok(false);
    }
    // Every instance that reports now must confirm: one that drops out
    // (its lease gone) does not leave the barrier open.
    let fleet = format!("{}/fleet/", target.key);
    let expected: Vec<String> = client.list(&fleet).await?.iter().map(|kv| kv.key.clone()).collect();
    // Each put goes only on the revision this move read or wrote: another
    // writer's table is never overwritten.
    let put = Put { client, key: &target.key, tables, read: before.mod_revision };
    let held = match client.put_if(&target.key, &tables.hold.0, before.mod_revision).await {
        Ok(Ok(revision)) => revision,
        Ok(Err(now)) => {
            let _ = writeln!(out, "not moved: the table in etcd {} after it was read; nothing put", rewritten(now));
            return Ok(false);
        }
        // The hold may have gone in, its answer lost.
        Err(failed) => return put.recover(failed, recover, out).await,
    };
    let _ = writeln!(out, "hold put at revision {held}; waiting up to {barrier:?} for every instance");
    match after_hold(&put, held, (&fleet, &expected), barrier, out).await {
        Ok(switched) => Ok(switched),
        Err(failed) => put.recover(failed, recover, out).await,
    }
}

/// The move's puts once its hold may be in: on the key, never over
/// another writer's table.
struct Put<'a> {
    client: &'a Client,
    key: &'a str,
    tables: &'a Tables,
    /// The revision of the table read before the hold.
    read: i64,
}

/// Why a put after the hold did not go: another writer's table, kept.
fn changed_meanwhile(now: i64) -> String {
    format!("the table in etcd {} after the hold was put, and is kept. {ANOTHER_WRITER}", rewritten(now))
}

/// What an operator must do about another writer's table.
const ANOTHER_WRITER: &str = "If it still holds the units, put a table that switches them or calls them off: \
                              past hold.max_time their writes are refused (503) until one does";

impl Put<'_> {
    /// The hold table with its holds called off, on the hold's revision `held`.
    async fn call_off(&self, held: i64, out: &mut impl Write) -> Result<bool, crate::source::etcd::EtcdError> {
        match self.client.put_if(self.key, &self.tables.off, held).await? {
            Ok(at) => {
                let _ = writeln!(out, "the hold table, its holds called off (phase: abort), put at revision {at}");
            }
            Err(now) => {
                let _ = writeln!(out, "not called off: {}", changed_meanwhile(now));
            }
        }
        Ok(false)
    }

    /// etcd failed once the hold may be in: the move ends as soon as etcd
    /// answers again (asked at least once, and again until `recover` has
    /// passed), by what the key holds: the switch (its put went through),
    /// the called-off table, the hold (called off now), the table read
    /// before (the hold never went in), or another writer's table (kept).
    async fn recover(
        &self,
        failed: crate::source::etcd::EtcdError,
        recover: Duration,
        out: &mut impl Write,
    ) -> Result<bool, crate::source::etcd::EtcdError> {
        let _ = writeln!(out, "etcd failed once the hold may be in ({failed}); asking again for up to {recover:?}");
        let until = Instant::now() + recover;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let failed = match self.ended(out).await {
                Ok(switched) => return Ok(switched),
                Err(e) => e,
            };
            if Instant::now() >= until {
                let _ = writeln!(
                    out,
                    "etcd did not answer: the hold may still be in. Put a table that switches the held units or \
                     calls them off (the hold table with phase: abort), or their writes wait and are refused (503)"
                );
                return Err(failed);
            }
        }
    }

    /// Ends the move by what the key holds now (one read, and a put when
    /// the hold is still there).
    async fn ended(&self, out: &mut impl Write) -> Result<bool, crate::source::etcd::EtcdError> {
        let kv = self.client.get(self.key).await?.0;
        let tables = self.tables;
        match kv {
            // Another writer's identical table cannot be told from this move's.
            Some(kv) if kv.value == tables.switch => {
                let _ = writeln!(out, "the switch is the table in etcd (revision {}); not confirmed", kv.mod_revision);
                Ok(true)
            }
            Some(kv) if kv.value == tables.off => {
                let _ = writeln!(out, "the hold table, its holds called off, is at revision {}", kv.mod_revision);
                Ok(false)
            }
            Some(kv) if kv.value == tables.hold.0 && kv.mod_revision > self.read => {
                self.call_off(kv.mod_revision, out).await
            }
            Some(kv) if kv.mod_revision == self.read => {
                let _ = writeln!(out, "not moved: the hold was never put; nothing changed");
                Ok(false)
            }
            other => {
                let now = rewritten(other.map_or(0, |kv| kv.mod_revision));
                let _ = writeln!(out, "not called off: the table in etcd {now} since it was read. {ANOTHER_WRITER}");
                Ok(false)
            }
        }
    }
}

/// Barrier, switch (or the hold called off), once the hold is put at
/// revision `held`; `fleet`: the reports' prefix, and the ones expected.
async fn after_hold(
    put: &Put<'_>,
    held: i64,
    (fleet, expected): (&str, &[String]),
    barrier: Duration,
    out: &mut impl Write,
) -> Result<bool, crate::source::etcd::EtcdError> {
    let client = put.client;
    match confirmed(client, fleet, expected, held, barrier).await? {
        Ok(n) => {
            let _ = writeln!(out, "{n} instances hold");
            let switched = match client.put_if(put.key, &put.tables.switch, held).await? {
                Ok(revision) => revision,
                Err(now) => {
                    let _ = writeln!(out, "not switched: {}", changed_meanwhile(now));
                    return Ok(false);
                }
            };
            let _ = writeln!(out, "switch put at revision {switched}");
            // Switched: a failure now only leaves the confirmation unread.
            match confirmed(client, fleet, expected, switched, barrier).await {
                Ok(Ok(n)) => {
                    let _ = writeln!(out, "{n} instances switched");
                }
                Ok(Err(behind)) => {
                    let _ = writeln!(out, "switched; not yet confirmed by: {}", behind.join(", "));
                }
                Err(e) => {
                    let _ = writeln!(out, "switched; its confirmation could not be read ({e})");
                }
            }
            Ok(true)
        }
        Err(behind) => {
            let _ = writeln!(out, "not confirmed in time by: {}; aborting", behind.join(", "));
            put.call_off(held, out).await
        }
    }
}

/// What became of the table key another writer changed: its revision now,
/// or its deletion (0).
fn rewritten(now: i64) -> String {
    match now {
        0 => "was deleted".into(),
        n => format!("changed (revision {n})"),
    }
}

/// Waits until every instance reports `revision` or later (those of
/// `expected`, by their report's key, among them): how many there are, or
/// the ones that did not within `within`.
async fn confirmed(
    client: &Client,
    fleet: &str,
    expected: &[String],
    revision: i64,
    within: Duration,
) -> Result<Result<usize, Vec<String>>, crate::source::etcd::EtcdError> {
    let deadline = Instant::now() + within;
    loop {
        let reports = client.list(fleet).await?;
        let mut behind: Vec<String> = reports
            .iter()
            .filter_map(|kv| {
                let v: serde_json::Value = serde_json::from_str(&kv.value).unwrap_or_default();
                let name = v["instance"].as_str().unwrap_or(&kv.key).to_string();
                (v["revision"].as_i64().unwrap_or(0) < revision).then_some(name)
            })
            .collect();
        let gone = expected.iter().filter(|k| !reports.iter().any(|kv| &kv.key == *k));
        behind.extend(gone.map(|k| format!("{} (no report)", k.rsplit('/').next().unwrap_or(k))));
        if behind.is_empty() && !reports.is_empty() {
            return Ok(Ok(reports.len()));
        }
        if Instant::now() > deadline {
            return Ok(Err(if reports.is_empty() { vec!["(no instance reports)".into()] } else { behind }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(unit: &str, phase: MovePhase, epoch: u64, to: &str) -> Named {
        let rule = MoveRule {
            unit: unit.into(),
            to: 0,
            phase,
            epoch,
            hold_all: false,
            max_requests: 10,
            max_time: Duration::from_secs(5),
            release_rate: 100,
        };
        Named { rule, to: to.into() }
    }

    const IN_ETCD: &str = r#"version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:1"] }
  us: { upstreams: ["http://127.0.0.1:2"] }
countries: { KZ: { id: 7, region: eu }, DE: { id: 49, region: us } }
entities: { Order: 3 }
moves: [{ unit: "country DE", to: us, phase: switch, epoch: 2 }]
"#;

    #[test]
    fn a_move_refuses_a_unit_split_out_of_a_moved_one_without_its_move() {
        let hold = IN_ETCD.replace(
            "moves: [",
            "overrides: [{ country: DE, entity: Order, region: us }]\n\
             moves: [{ unit: \"country KZ\", to: us, phase: hold, epoch: 5 }, ",
        );
        let given_up =
            fence_given_up(IN_ETCD, &hold, &InstanceFlags::default()).map(|u| u.to_string()).unwrap_or_default();
        assert_eq!(given_up, "override DE:Order, split out of country DE at epoch 2 (switch): it has no move");
        // With the move at DE's epoch, the override keeps the fence.
        let moved =
            hold.replace("moves: [", "moves: [{ unit: \"override DE:Order\", to: us, phase: switch, epoch: 2 }, ");
        assert_eq!(fence_given_up(IN_ETCD, &moved, &InstanceFlags::default()), None);
        assert_eq!(fence_given_up(&hold, &hold, &InstanceFlags::default()), None);
    }

    #[test]
    fn a_move_keeps_the_fences_earlier_moves_left() {
        let kept = mv("country DE", MovePhase::Switch, 2, "us");
        let (hold, switch) = (mv("country KZ", MovePhase::Hold, 5, "us"), mv("country KZ", MovePhase::Switch, 6, "us"));
        let both = |h: &[Named], s: &[Named]| pair(h, s);
        let fails_with = |r: Result<(), String>, why: &str| matches!(&r, Err(e) if e.contains(why));
        // DE's earlier switch kept in both tables, as the one in etcd has it,
        // whatever number each table gives its region.
        let hold_table = [kept.clone(), hold.clone()];
        assert!(both(&hold_table, &[kept.clone(), switch.clone()]).is_ok());
        assert!(refused(IN_ETCD, &hold_table, &InstanceFlags::default(), || None).is_none());
        let more_regions = IN_ETCD.replace("regions:\n", "regions:\n  ap: { upstreams: [\"http://127.0.0.1:3\"] }\n");
        assert!(refused(&more_regions, &hold_table, &InstanceFlags::default(), || None).is_none());
        // Left out of the switch table or set back there (as the tables'
        // texts show it), or changed there.
        let hold_text =
            IN_ETCD.replace("moves: [", "moves: [{ unit: \"country KZ\", to: us, phase: hold, epoch: 5 }, ");
        let switch_text = hold_text
            .replace("KZ: { id: 7, region: eu }", "KZ: { id: 7, region: us }")
            .replace("phase: hold, epoch: 5", "phase: switch, epoch: 6");
        let given_up = |a: &str, b: &str| {
            fence_given_up(a, b, &InstanceFlags::default()).map(|u| u.to_string()).unwrap_or_default()
        };
        assert_eq!(given_up(&hold_text, &switch_text), "");
        let gone = switch_text.replace(", { unit: \"country DE\", to: us, phase: switch, epoch: 2 }", "");
        assert_eq!(given_up(&hold_text, &gone), "country DE at epoch 2 (switch): its move is removed");
        let back = switch_text.replace("phase: switch, epoch: 2", "phase: switch, epoch: 1");
        assert_eq!(given_up(&hold_text, &back), "country DE at epoch 2 (switch): set back to epoch 1");
        // DE renamed with its move: the fence is the same, under a new name.
        let renamed = hold_text.replace("DE: { id: 49", "GER: { id: 49").replace("\"country DE\"", "\"country GER\"");
        assert_eq!(given_up(IN_ETCD, &renamed), "");
        // ... but a move renames nothing: that is a revision of its own.
        let why = refused(
            IN_ETCD,
            &[mv("country GER", MovePhase::Switch, 2, "us"), hold.clone()],
            &InstanceFlags::default(),
            || None,
        )
        .unwrap_or_default();
        assert!(why.contains("changes country DE's move in the table in etcd, or leaves it out"), "{why}");
        let elsewhere = [mv("country DE", MovePhase::Switch, 2, "eu"), switch.clone()];
        assert!(fails_with(both(&hold_table, &elsewhere), "changes country DE's move"));
        // The held unit called off instead of switched is no switch.
        let aborted = [kept.clone(), mv("country KZ", MovePhase::Abort, 6, "us")];
        assert!(fails_with(both(&hold_table, &aborted), "does not switch country KZ"));
        // Left out of the hold table, or changed there: the table in etcd refuses it.
        let without_de = hold_text.replace(", { unit: \"country DE\", to: us, phase: switch, epoch: 2 }", "");
        assert_eq!(given_up(IN_ETCD, &without_de), "country DE at epoch 2 (switch): its move is removed");
        let why = refused(
            IN_ETCD,
            &[mv("country DE", MovePhase::Switch, 2, "eu"), hold.clone()],
            &InstanceFlags::default(),
            || None,
        )
        .unwrap_or_default();
        assert!(why.contains("changes country DE's move in the table in etcd"), "{why}");
        // A switch of a unit the hold table has no move for.
        let extra = both(std::slice::from_ref(&hold), &[kept.clone(), switch.clone()]);
        assert!(fails_with(extra, "moves country DE, which the hold table has no move for"));
        // Holding DE again must raise its epoch.
        let why = refused(IN_ETCD, &[mv("country DE", MovePhase::Hold, 2, "us")], &InstanceFlags::default(), || None)
            .unwrap_or_default();
        assert!(why.contains("country DE is at epoch 2 in the table in etcd"), "{why}");
    }

    #[test]
    fn a_move_called_off_keeps_its_epochs_and_the_rest_of_its_text() -> Result<(), crate::config::ConfigErrors> {
        let hold = IN_ETCD.replace(
            "phase: switch, epoch: 2 }]",
            "phase: switch, epoch: 2 },\n  { unit: \"country KZ\", to: us, phase:  \"hold\", epoch: 5 }]\n# phase: hold",
        );
        let moves = named(&crate::config::load_str(&hold, "hold.yaml")?);
        let off = called_off(&hold, &moves, &InstanceFlags::default()).unwrap_or_default();
        assert_eq!(off, hold.replacen("phase:  \"hold\"", "phase:  \"abort\"", 1));
        let after = crate::config::load_str(&off, "off.yaml")?.moves;
        let phases: Vec<_> = after.iter().map(|m| (m.unit.as_str(), m.phase, m.epoch)).collect();
        assert_eq!(phases, [("country DE", MovePhase::Switch, 2), ("country KZ", MovePhase::Abort, 5)]);
        // A hold whose value is an alias is not where the text says: not guessed at.
        let aliased = IN_ETCD.replace(
            "moves: [{ unit: \"country DE\", to: us, phase: switch, epoch: 2 }]",
            "moves: [{ unit: \"country DE\", to: eu, phase: &p hold, epoch: 2 }, { unit: \"country KZ\", to: us, phase: *p, epoch: 5 }]",
        );
        let moves = named(&crate::config::load_str(&aliased, "aliased.yaml")?);
        assert_eq!(called_off(&aliased, &moves, &InstanceFlags::default()), None);
        Ok(())
    }
}
