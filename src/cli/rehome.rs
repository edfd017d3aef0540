//! `shardgate move --source etcd://…/KEY --hold HOLD.yaml --switch SWITCH.yaml
//! [--barrier 3s]`: re-homes a placement unit across a fleet that follows
//! one etcd key, phase by phase.
//!
//! 1. Both tables are checked here first: the hold table must hold a move
//!    and the switch table switch it; each keeps the moves earlier moves
//!    left as they are, as neither may give up a fence the table before it
//!    keeps. Nothing is put when either is invalid, or when the hold table
//!    gives up a fence of the table in etcd, changes another unit's move
//!    there, or does not raise its unit's epoch.
//! 2. The hold table is put; then every instance of the fleet (each one's
//!    report under `KEY/fleet/`) must report that it runs it, or a later
//!    revision, within the barrier: each holds the unit's requests.
//! 3. Only then is the switch table put, and its application awaited.
//!    When an instance does not confirm the hold in time (down, frozen,
//!    rejecting the table), the hold table is put again with its holds
//!    called off (`phase: abort`): the move is aborted, every held request
//!    goes to the source, and no unit's epoch goes down.
//!
//! Exit 0 when switched, 1 when aborted or refused, 69 when etcd cannot be
//! reached, 78 when a table is invalid.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::exit;
use crate::config::model::MoveRule;
use crate::config::schema::MovePhase;
use crate::routing::plan::unfenced;
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
    /// With etcd authentication: the user (the password from SHARDGATE_ETCD_PASSWORD).
    #[arg(long, env = "SHARDGATE_ETCD_USER")]
    pub etcd_user: Option<String>,
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
    let (hold, switch) = match (checked(&args.hold, MovePhase::Hold), checked(&args.switch, MovePhase::Switch)) {
        (Ok(h), Ok(s)) => (h, s),
        (Err(e), _) | (_, Err(e)) => {
            let _ = writeln!(err, "{e}");
            return exit::CONFIG;
        }
    };
    if let Err(e) = pair(&hold.1, &switch.1, args.barrier) {
        let _ = writeln!(err, "shardgate move: {e}");
        return exit::CONFIG;
    }
    let (hold, hold_moves, switch) = (hold.0, hold.1, switch.0);
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            let _ = writeln!(err, "shardgate move: {e}");
            return exit::FAILURE;
        }
    };

    let user = args.etcd_user.clone().map(|u| (u, std::env::var("SHARDGATE_ETCD_PASSWORD").unwrap_or_default()));
    let client = Client::new(&target, None, user);
    match rt.block_on(drive(&client, &target, (&hold, &hold_moves), &switch, args.barrier, out)) {
        Ok(true) => exit::OK,
        Ok(false) => exit::FAILURE,
        Err(e) => {
            let _ = writeln!(err, "shardgate move: {}: {e}", target.name());
            exit::UNAVAILABLE
        }
    }
}

/// The text of the table at `path` and its moves: valid, with a move in
/// `phase`. Its other moves are what earlier moves left (a switch kept as
/// its unit's fence, an abort); a switch table holds nothing.
fn checked(path: &std::path::Path, phase: MovePhase) -> Result<(String, Vec<MoveRule>), String> {
    let (cfg, text) = crate::config::load_file(path).map_err(|e| format!("{e}\n{}: invalid", path.display()))?;
    let moving = cfg.moves.iter().any(|m| m.phase == phase);
    let holding = phase == MovePhase::Switch && held(&cfg.moves).next().is_some();
    if !moving || holding {
        let none_held = if phase == MovePhase::Switch { ", and none in phase hold" } else { "" };
        let name = phase.name();
        return Err(format!("{}: this table must have a move in phase {name}{none_held}", path.display()));
    }
    Ok((text, cfg.moves))
}

/// The units a table holds: its moves in phase `hold`.
fn held(moves: &[MoveRule]) -> impl Iterator<Item = &MoveRule> {
    moves.iter().filter(|m| m.phase == MovePhase::Hold)
}

/// The switch moves the units the hold holds, to the same regions, each at
/// a higher epoch, and keeps the hold table's other moves as they are (the
/// fences of earlier moves); and the barrier ends before a held request
/// gives up.
fn pair(hold: &[MoveRule], switch: &[MoveRule], barrier: Duration) -> Result<(), String> {
    for h in held(hold) {
        let Some(s) = switch.iter().find(|s| s.unit == h.unit && s.phase == MovePhase::Switch) else {
            return Err(format!("the switch table does not switch {}", h.unit));
        };
        if s.to != h.to || s.epoch <= h.epoch {
            return Err(format!(
                "{}: the switch must go to the hold's region at a higher epoch than {}",
                h.unit, h.epoch
            ));
        }
        if barrier >= h.max_time {
            return Err(format!(
                "--barrier {barrier:?} is not shorter than {}'s hold.max_time {:?}: held requests would give up first",
                h.unit, h.max_time
            ));
        }
    }
    if let Some(s) = switch.iter().find(|s| !hold.iter().any(|h| h.unit == s.unit)) {
        return Err(format!("the switch table moves {}, which the hold table does not hold", s.unit));
    }
    if let Some(u) = unfenced(hold, switch).first() {
        return Err(format!("the switch table gives up a fence the hold table keeps: {u}"));
    }
    match changed(hold.iter().filter(|h| h.phase != MovePhase::Hold), switch) {
        Some(unit) => {
            Err(format!("the switch table changes {unit}'s move, which the hold table keeps from an earlier move"))
        }
        None => Ok(()),
    }
}

/// The first of `kept` (moves earlier moves left) that `next` records
/// otherwise (another phase, region or epoch). A move changes only the
/// units it holds.
fn changed<'a>(kept: impl IntoIterator<Item = &'a MoveRule>, next: &[MoveRule]) -> Option<&'a str> {
    let same = |k: &MoveRule, n: &MoveRule| (n.phase, n.to, n.epoch) == (k.phase, k.to, k.epoch);
    kept.into_iter().find(|k| next.iter().any(|n| n.unit == k.unit && !same(k, n))).map(|k| k.unit.as_str())
}

/// The hold table with its holds called off: each `phase: hold` made
/// `phase: abort`, at its epoch, which sends held requests to the source
/// as the table from before the hold would, without setting the units'
/// epochs back (and with them the fences of earlier switches). `None` when
/// the text does not say `phase: hold` plainly for each held move.
fn called_off(hold: &str, moves: &[MoveRule]) -> Option<String> {
    let text = ["", "\"", "'"]
        .iter()
        .fold(hold.to_string(), |t, q| t.replace(&format!("phase: {q}hold{q}"), &format!("phase: {q}abort{q}")));
    let cfg = crate::config::load_str(&text, "the hold table, called off").ok()?;
    let aborted =
        |h: &MoveRule| cfg.moves.iter().any(|m| m.unit == h.unit && m.phase == MovePhase::Abort && m.epoch == h.epoch);
    (held(&cfg.moves).next().is_none() && held(moves).all(aborted)).then_some(text)
}

/// Why the table in etcd refuses the hold table, or that table's problems
/// when it does not load (its epochs cannot be checked):
/// - a unit the hold holds that it moves at the hold's epoch or a later
///   one: each move of a unit must raise its epoch, or a forward from an
///   instance still on an older table would win the fence;
/// - a fence it keeps that the hold table gives up (an earlier move's
///   switch left out, or its epoch set back);
/// - a move of another unit that the hold table changes.
fn refused(running: &str, hold: &[MoveRule]) -> Option<String> {
    let cfg = match crate::config::load_str(running, "the table in etcd") {
        Ok(cfg) => cfg,
        Err(e) => return Some(format!("the table in etcd does not load, so its units' epochs are unknown:\n{e}")),
    };
    let stale = held(hold).find_map(|h| {
        let m = cfg.moves.iter().find(|m| m.unit == h.unit && m.epoch >= h.epoch)?;
        Some(format!(
            "{} is at epoch {} in the table in etcd: the hold must raise it (epoch {} or more)",
            h.unit,
            m.epoch,
            m.epoch.saturating_add(1)
        ))
    });
    stale
        .or_else(|| {
            let u = unfenced(&cfg.moves, hold).into_iter().next()?;
            Some(format!("the hold table gives up a fence the table in etcd keeps: {u}; keep that move in both tables"))
        })
        .or_else(|| {
            let kept = cfg.moves.iter().filter(|m| !held(hold).any(|h| h.unit == m.unit));
            let unit = changed(kept, hold)?;
            Some(format!(
                "the hold table changes {unit}'s move in the table in etcd: a move changes only the units it holds"
            ))
        })
}

/// Hold, barrier, switch (or back to the table before): whether it switched.
async fn drive(
    client: &Client,
    target: &Target,
    (hold, hold_moves): (&str, &[MoveRule]),
    switch: &str,
    barrier: Duration,
    out: &mut impl Write,
) -> Result<bool, crate::source::etcd::EtcdError> {
    let Some(before) = client.get(&target.key).await?.0 else {
        let _ = writeln!(out, "no table at {}: nothing to move", target.key);
        return Ok(false);
    };
    if let Some(why) = refused(&before.value, hold_moves) {
        let _ = writeln!(out, "not moved: {why}");
        return Ok(false);
    }
    // Every instance that reports now must confirm: one that drops out
    // (its lease gone) does not leave the barrier open.
    let fleet = format!("{}/fleet/", target.key);
    let expected: Vec<String> = client.list(&fleet).await?.iter().map(|kv| kv.key.clone()).collect();
    let held = client.put(&target.key, hold, 0).await?;
    let _ = writeln!(out, "hold put at revision {held}; waiting up to {barrier:?} for every instance");
    match confirmed(client, &fleet, &expected, held, barrier).await? {
        Ok(n) => {
            let _ = writeln!(out, "{n} instances hold");
            let switched = client.put(&target.key, switch, 0).await?;
            let _ = writeln!(out, "switch put at revision {switched}");
            match confirmed(client, &fleet, &expected, switched, barrier).await? {
                Ok(n) => {
                    let _ = writeln!(out, "{n} instances switched");
                }
                Err(behind) => {
                    let _ = writeln!(out, "switched; not yet confirmed by: {}", behind.join(", "));
                }
            }
            Ok(true)
        }
        Err(behind) => {
            let _ = writeln!(out, "not confirmed in time by: {}; aborting", behind.join(", "));
            let (back, what) = match called_off(hold, hold_moves) {
                Some(text) => (text, "the hold table, its holds called off (phase: abort),"),
                None => (before.value.clone(), "the table from before the hold"),
            };
            let at = client.put(&target.key, &back, 0).await?;
            let _ = writeln!(out, "{what} put at revision {at}");
            Ok(false)
        }
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

    fn mv(unit: &str, phase: MovePhase, epoch: u64) -> MoveRule {
        MoveRule {
            unit: unit.into(),
            to: 1,
            phase,
            epoch,
            hold_all: false,
            max_requests: 10,
            max_time: Duration::from_secs(5),
            release_rate: 100,
        }
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
    fn a_move_keeps_the_fences_earlier_moves_left() {
        let barrier = Duration::from_secs(3);
        let kept = mv("country DE", MovePhase::Switch, 2);
        let (hold, switch) = (mv("country KZ", MovePhase::Hold, 5), mv("country KZ", MovePhase::Switch, 6));
        let both = |h: &[MoveRule], s: &[MoveRule]| pair(h, s, barrier);
        let fails_with = |r: Result<(), String>, why: &str| matches!(&r, Err(e) if e.contains(why));
        // DE's earlier switch kept in both tables, as the one in etcd has it.
        let hold_table = [kept.clone(), hold.clone()];
        assert_eq!(both(&hold_table, &[kept.clone(), switch.clone()]), Ok(()));
        assert_eq!(refused(IN_ETCD, &hold_table), None);
        // Left out of the switch table, set back there, or changed there.
        let gone = "gives up a fence the hold table keeps: country DE at epoch 2 (switch): its move is removed";
        assert!(fails_with(both(&hold_table, std::slice::from_ref(&switch)), gone));
        let back = [mv("country DE", MovePhase::Switch, 1), switch.clone()];
        assert!(fails_with(both(&hold_table, &back), "country DE at epoch 2 (switch): set back to epoch 1"));
        let elsewhere = [MoveRule { to: 0, ..kept.clone() }, switch.clone()];
        assert!(fails_with(both(&hold_table, &elsewhere), "changes country DE's move"));
        // The held unit called off instead of switched is no switch.
        let aborted = [kept.clone(), mv("country KZ", MovePhase::Abort, 6)];
        assert!(fails_with(both(&hold_table, &aborted), "does not switch country KZ"));
        // Left out of the hold table, or changed there: the table in etcd refuses it.
        let why = refused(IN_ETCD, std::slice::from_ref(&hold)).unwrap_or_default();
        assert!(why.contains("gives up a fence the table in etcd keeps: country DE at epoch 2 (switch)"), "{why}");
        let why = refused(IN_ETCD, &[MoveRule { to: 0, ..kept.clone() }, hold.clone()]).unwrap_or_default();
        assert!(why.contains("changes country DE's move in the table in etcd"), "{why}");
        // A switch of a unit the hold table has no move for.
        let extra = both(std::slice::from_ref(&hold), &[kept.clone(), switch.clone()]);
        assert!(fails_with(extra, "moves country DE, which the hold table does not hold"));
        // Holding DE again must raise its epoch.
        let why = refused(IN_ETCD, &[mv("country DE", MovePhase::Hold, 2)]).unwrap_or_default();
        assert!(why.contains("country DE is at epoch 2 in the table in etcd"), "{why}");
    }

    #[test]
    fn a_move_called_off_keeps_its_epochs() -> Result<(), crate::config::ConfigErrors> {
        let hold = IN_ETCD.replace(
            "phase: switch, epoch: 2 }]",
            "phase: switch, epoch: 2 }, { unit: \"country KZ\", to: us, phase: \"hold\", epoch: 5 }]",
        );
        let moves = crate::config::load_str(&hold, "hold.yaml")?.moves;
        let off = called_off(&hold, &moves).unwrap_or_default();
        let after = crate::config::load_str(&off, "off.yaml")?.moves;
        let phases: Vec<_> = after.iter().map(|m| (m.unit.as_str(), m.phase, m.epoch)).collect();
        assert_eq!(phases, [("country DE", MovePhase::Switch, 2), ("country KZ", MovePhase::Abort, 5)]);
        // A hold written some other way is not guessed at.
        let other = hold.replace("phase: \"hold\"", "phase:  hold");
        assert_eq!(called_off(&other, &moves), None);
        Ok(())
    }
}
