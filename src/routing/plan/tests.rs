use super::*;
use crate::config::schema::MovePhase;
use crate::routing::rule::Rule;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const BASE: &str = r#"version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:1"] }
  kz: { upstreams: ["http://127.0.0.1:2"] }
  us: { upstreams: ["http://127.0.0.1:3"] }
default_region: eu
countries: { KZ: { id: 7, region: kz }, DE: { id: 49, region: eu }, US: { id: 1, region: us } }
entities: { Order: 3, Wallet: 4 }
overrides: [{ country: KZ, entity: Wallet, region: eu }]
shards: { count: 16, regions: { eu: "0-7", kz: "8-13", us: "14-15" } }
nodes:
  snowflake_datacenter: { 1: eu, 2: kz }
key_ranges: [{ start: "0000000000000000", region: eu }, { start: "8000000000000000", region: kz }]
hash: { regions: [eu, kz, us] }
time_ranges: [{ until: "2024-01-01T00:00:00Z", region: us }, { region: eu }]
"#;

fn table(text: &str) -> Result<Table, crate::config::ConfigErrors> {
    Ok(Table::compile(&crate::config::load_str(text, "t.yaml")?))
}

type Moved = (String, Option<String>, Option<String>);

fn moves(old: &str, new: &str) -> Result<Vec<Moved>, crate::config::ConfigErrors> {
    let plan = Plan::between(&table(old)?, &table(new)?, None);
    Ok(plan.moves.into_iter().map(|m| (m.unit, m.from, m.to)).collect())
}

fn mv(unit: &str, from: &str, to: &str) -> Moved {
    (unit.to_string(), Some(from.to_string()), Some(to.to_string()))
}

#[test]
fn the_same_table_moves_nothing() -> TestResult {
    assert_eq!(moves(BASE, BASE)?, vec![]);
    // Reordering and restating is not a move.
    let restated = BASE.replace(r#"eu: "0-7""#, r#"eu: ["0-3", "4-7"]"#);
    assert_eq!(moves(BASE, &restated)?, vec![]);
    Ok(())
}

#[test]
fn a_moved_country_and_not_its_overridden_entity() -> TestResult {
    let new = BASE.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: us }");
    assert_eq!(moves(BASE, &new)?, vec![mv("country KZ", "kz", "us")]);
    // The override now sends Wallet where the country goes: it moves too.
    let new = new.replace("overrides: [{ country: KZ, entity: Wallet, region: eu }]", "overrides: []");
    assert_eq!(moves(BASE, &new)?, vec![mv("country KZ", "kz", "us"), mv("override KZ:Wallet", "eu", "us")]);
    Ok(())
}

#[test]
fn a_country_added_or_removed_is_one_move_not_an_override_per_entity() -> TestResult {
    let new = BASE.replace("US: { id: 1, region: us }", "US: { id: 1, region: us }, FR: { id: 33, region: eu }");
    assert_eq!(moves(BASE, &new)?, vec![("country FR".to_string(), None, Some("eu".to_string()))]);
    assert_eq!(moves(&new, BASE)?, vec![("country FR".to_string(), Some("eu".to_string()), None)]);
    Ok(())
}

#[test]
fn an_override_added_or_changed() -> TestResult {
    let new = BASE.replace(
        "overrides: [{ country: KZ, entity: Wallet, region: eu }]",
        "overrides: [{ country: KZ, entity: Wallet, region: us }, { country: DE, entity: Order, region: kz }]",
    );
    assert_eq!(moves(BASE, &new)?, vec![mv("override KZ:Wallet", "eu", "us"), mv("override DE:Order", "eu", "kz")]);
    Ok(())
}

#[test]
fn a_shard_range_split() -> TestResult {
    let new = BASE.replace(r#"eu: "0-7", kz: "8-13""#, r#"eu: "0-5", kz: "6-13""#);
    assert_eq!(moves(BASE, &new)?, vec![mv("shards 6-7", "eu", "kz")]);
    let new = BASE.replace(r#"us: "14-15""#, r#"us: "14", eu: ["0-7", "15"]"#).replace(r#"eu: "0-7", "#, "");
    assert_eq!(moves(BASE, &new)?, vec![mv("shard 15", "us", "eu")]);
    Ok(())
}

#[test]
fn a_key_range_split_with_its_key_space() -> TestResult {
    let new = BASE.replace(
        r#"{ start: "8000000000000000", region: kz }]"#,
        r#"{ start: "8000000000000000", region: kz }, { start: "c000000000000000", region: us }]"#,
    );
    let plan = Plan::between(&table(BASE)?, &table(&new)?, None);
    assert_eq!(plan.moves.len(), 1, "{plan}");
    let m = &plan.moves[0];
    assert_eq!(
        (m.unit.as_str(), m.from.as_deref(), m.to.as_deref()),
        ("key_range c000000000000000..end", Some("kz"), Some("us"))
    );
    assert_eq!(m.key_share, Some(0.25));
    Ok(())
}

#[test]
fn a_hash_weight_change_moves_its_share_of_the_key_space() -> TestResult {
    // eu from a third of the keys to a half: a sixth of the key space moves to it.
    let new = BASE.replace("hash: { regions: [eu, kz, us] }", "hash: { regions: [eu, kz, us], weights: { eu: 2 } }");
    let plan = Plan::between(&table(BASE)?, &table(&new)?, None);
    let to_eu: f64 = plan
        .moves
        .iter()
        .filter(|m| m.unit == "hash")
        .filter(|m| m.to.as_deref() == Some("eu"))
        .filter_map(|m| m.key_share)
        .sum();
    assert!((to_eu - 1.0 / 6.0).abs() < 0.01, "{plan}");
    assert!(plan.moves.iter().all(|m| m.unit != "hash" || m.to.as_deref() == Some("eu")), "{plan}");
    Ok(())
}

#[test]
fn node_entries_time_ranges_and_the_default() -> TestResult {
    let new = BASE
        .replace("snowflake_datacenter: { 1: eu, 2: kz }", "snowflake_datacenter: { 1: eu, 2: us }")
        .replace(r#"until: "2024-01-01T00:00:00Z""#, r#"until: "2025-01-01T00:00:00Z""#)
        .replace("default_region: eu", "default_region: kz");
    assert_eq!(
        moves(BASE, &new)?,
        vec![
            mv("snowflake_datacenter 2", "kz", "us"),
            mv("time_range 2024-01-01T00:00:00Z..2025-01-01T00:00:00Z", "eu", "us"),
            mv("default", "eu", "kz"),
        ]
    );
    Ok(())
}

#[test]
fn traffic_shares_from_the_running_units() -> TestResult {
    let running = table(BASE)?;
    let units = running.units();
    let (kz, eu) = (RegionId(1), RegionId(0));
    for _ in 0..30 {
        units.count(Rule::Country { country: 7 }, kz);
    }
    for _ in 0..10 {
        units.count(Rule::Override { country: 7, entity: 4 }, eu);
    }
    for _ in 0..40 {
        units.count(Rule::Shard { shard: 1 }, eu);
    }
    for _ in 0..20 {
        units.count(Rule::KeyRange { index: 1 }, kz);
    }
    let window = Window { seconds: 60.0, total: 100, units: units.counts().map(|(n, c)| (n.to_string(), c)).collect() };
    let new = BASE
        .replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: us }")
        .replace(r#"eu: "0-7", kz: "8-13""#, r#"eu: "0-5", kz: "6-13""#)
        .replace(
            r#"{ start: "8000000000000000", region: kz }]"#,
            r#"{ start: "8000000000000000", region: kz }, { start: "c000000000000000", region: us }]"#,
        );
    let plan = Plan::between(&running, &table(&new)?, Some(&window));
    let traffic = |unit: &str| plan.moves.iter().find(|m| m.unit == unit).and_then(|m| m.traffic.clone());
    assert_eq!(traffic("country KZ"), Some(Traffic { requests: 30.0, share: 0.3, measure: Measure::Exact }));
    // Two of the range's eight shards.
    assert_eq!(traffic("shards 6-7"), Some(Traffic { requests: 10.0, share: 0.1, measure: Measure::Estimated }));
    // Half of the range's key space.
    assert_eq!(
        traffic("key_range c000000000000000..end"),
        Some(Traffic { requests: 10.0, share: 0.1, measure: Measure::Estimated })
    );
    let text = plan.to_string();
    assert!(text.contains("3 placement units move"), "{text}");
    assert!(text.contains("30.00% of traffic"), "{text}");
    assert!(text.contains("over the last 60 s: 100 placed requests, 50.00%"), "{text}");
    Ok(())
}

#[test]
fn a_table_that_forgets_a_moves_epoch_or_sets_it_back_gives_up_its_fence() -> TestResult {
    let in_eu = BASE.replace("KZ: { id: 7, region: kz }", "KZ: { id: 7, region: eu }");
    let switched = format!("{in_eu}moves: [{{ unit: \"country KZ\", to: eu, phase: switch, epoch: 5 }}]\n");
    let unfenced = |old: &str, new: &str| -> Result<Vec<Unfenced>, crate::config::ConfigErrors> {
        Ok(Plan::between(&table(old)?, &table(new)?, None).unfenced)
    };
    let given_up = |phase, next| vec![Unfenced { unit: "country KZ".into(), within: None, phase, epoch: 5, next }];
    // Kept, or raised by the unit's next move: the fence holds.
    assert_eq!(unfenced(&switched, &switched)?, vec![]);
    assert_eq!(unfenced(&switched, &switched.replace("epoch: 5", "epoch: 6"))?, vec![]);
    // Removed: nothing moves, and yet the plan is not empty; it says so first.
    let plan = Plan::between(&table(&switched)?, &table(&in_eu)?, None);
    assert_eq!((plan.moves.len(), &plan.unfenced), (0, &given_up(MovePhase::Switch, None)));
    assert!(!plan.is_empty());
    let text = plan.to_string();
    assert!(text.starts_with("fences given up:"), "{text}");
    assert!(text.contains("  country KZ at epoch 5 (switch): its move is removed\n"), "{text}");
    // Set back to a lower epoch.
    assert_eq!(unfenced(&switched, &switched.replace("epoch: 5", "epoch: 3"))?, given_up(MovePhase::Switch, Some(3)));
    // A hold that took the epoch over (the unit moving back) removed: two
    // tables cannot tell it from a first move's, so it is listed too; called
    // off with `abort` at its epoch, nothing is given up.
    let back = format!("{in_eu}moves: [{{ unit: \"country KZ\", to: kz, phase: hold, epoch: 5 }}]\n");
    assert_eq!(unfenced(&back, &in_eu)?, given_up(MovePhase::Hold, None));
    assert_eq!(unfenced(&back, &back.replace("phase: hold", "phase: abort"))?, vec![]);
    Ok(())
}

#[test]
fn a_unit_split_out_of_a_moved_one_without_the_move_gives_up_its_fence() -> TestResult {
    let kz = "moves: [{ unit: \"country KZ\", to: kz, phase: switch, epoch: 5 }]\n";
    let switched =
        format!("{}{kz}", BASE.replace("overrides: [{ country: KZ, entity: Wallet, region: eu }]", "overrides: []"));
    let unfenced = |old: &str, new: &str| -> Result<Vec<Unfenced>, crate::config::ConfigErrors> {
        Ok(Plan::between(&table(old)?, &table(new)?, None).unfenced)
    };
    let split = |unit: &str, within: &str, next| Unfenced {
        unit: unit.into(),
        within: Some(within.into()),
        phase: MovePhase::Switch,
        epoch: 5,
        next,
    };
    // An override under the moved country, in the region the country went
    // to: nothing moves, and yet Wallet ids have lost the country's epoch.
    let order = "overrides: [{ country: KZ, entity: Order, region: kz }]";
    let with_override = switched.replace("overrides: []", order);
    let plan = Plan::between(&table(&switched)?, &table(&with_override)?, None);
    assert_eq!((plan.moves.len(), &plan.unfenced), (0, &vec![split("override KZ:Order", "country KZ", None)]));
    let text = plan.to_string();
    assert!(
        text.contains("  override KZ:Order, split out of country KZ at epoch 5 (switch): it has no move\n"),
        "{text}"
    );
    // Given the move at the country's epoch (or a higher one), it keeps the fence; at a lower one, not.
    let moved_too = |epoch: u64| {
        with_override.replace(
            "phase: switch, epoch: 5 }]",
            &format!(
                "phase: switch, epoch: 5 }}, {{ unit: \"override KZ:Order\", to: kz, phase: switch, epoch: {epoch} }}]"
            ),
        )
    };
    assert_eq!(unfenced(&switched, &moved_too(5))?, vec![]);
    assert_eq!(unfenced(&switched, &moved_too(6))?, vec![]);
    assert_eq!(unfenced(&switched, &moved_too(3))?, vec![split("override KZ:Order", "country KZ", Some(3))]);
    // A moved key range split in two: the new part has no move.
    let ranges =
        BASE.to_string() + "moves: [{ unit: \"key_range 8000000000000000\", to: kz, phase: switch, epoch: 5 }]\n";
    let halves = ranges.replace(
        "{ start: \"8000000000000000\", region: kz }]",
        "{ start: \"8000000000000000\", region: kz }, { start: \"c000000000000000\", region: kz }]",
    );
    let within = "key_range 8000000000000000";
    assert_eq!(
        unfenced(&ranges, &halves)?,
        vec![Unfenced { unit: "key_range c000000000000000".into(), ..split("", within, None) }]
    );
    // Time ranges added: UUIDv7 ids under `auto` leave the key ranges for them.
    let time_ranges = "time_ranges: [{ until: \"2024-01-01T00:00:00Z\", region: us }, { region: eu }]\n";
    let by_key = ranges.replace(time_ranges, "");
    assert_ne!(by_key, ranges);
    let by_time = Unfenced { unit: "uuidv7 ids placed by time_range (auto)".into(), ..split("", within, None) };
    assert_eq!(unfenced(&by_key, &ranges)?, vec![by_time]);
    // A moved country's id changed, its name and move kept: its old ids
    // land in the default region, which has no move.
    let recoded = switched.replace("KZ: { id: 7", "KZ: { id: 8");
    assert_eq!(unfenced(&switched, &recoded)?, vec![split("default", "country KZ", None)]);
    // A moved shard range split, its move given to one part: the old
    // range's move is gone by name, and that one entry covers both parts.
    let shards = BASE.to_string() + "moves: [{ unit: \"shards 8-13\", to: eu, phase: hold, epoch: 2 }]\n";
    let split_shards =
        shards.replace("kz: \"8-13\"", "kz: [\"8-9\", \"10-13\"]").replace("shards 8-13", "shards 10-13");
    let listed = unfenced(&shards, &split_shards)?;
    let named = Unfenced { unit: "shards 8-13".into(), within: None, phase: MovePhase::Hold, epoch: 2, next: None };
    assert_eq!(listed, vec![named]);
    // An override that had a move, removed: listed once, by its name (the
    // country it falls back to has no move of its own).
    let wallet = BASE.to_string() + "moves: [{ unit: \"override KZ:Wallet\", to: eu, phase: switch, epoch: 5 }]\n";
    let merged = BASE.replace("overrides: [{ country: KZ, entity: Wallet, region: eu }]", "overrides: []");
    let listed = unfenced(&wallet, &merged)?;
    assert_eq!(
        listed.iter().map(|u| (u.unit.as_str(), u.within.is_some())).collect::<Vec<_>>(),
        [("override KZ:Wallet", false)]
    );
    // A country renamed with its move at the same epoch: every id lands in
    // a unit at that epoch, so nothing is given up; at a lower one, the
    // old name's move is.
    let renamed = switched.replace("KZ: { id: 7", "KAZ: { id: 7").replace("\"country KZ\"", "\"country KAZ\"");
    assert_eq!(unfenced(&switched, &renamed)?, vec![]);
    let lower = renamed.replace("epoch: 5", "epoch: 4");
    let named = Unfenced { unit: "country KZ".into(), within: None, phase: MovePhase::Switch, epoch: 5, next: None };
    assert_eq!(unfenced(&switched, &lower)?, vec![named]);
    Ok(())
}
