//! Compiled table: placement for every strategy and its precedence, typed
//! "no owner", route matching; the file watcher picking up edits on a real
//! directory (rewritten in place, renamed over, a Kubernetes symlink swap,
//! polling without events); and snapshots never torn by a swap. Reloading
//! itself is in `reload.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::Method;
use shardgate::config::{self, ConfigErrors};
use shardgate::ids::{
    Decoded, Format, Instagram, InstagramLayout, Iuid, LocalityUuid, Params, Snowflake, SnowflakeLayout, Sonyflake,
    SonyflakeFlavor, UniqidShard, Uuid7,
};
use shardgate::routing::reload::watch_with;
use shardgate::routing::{
    IdSource, Missing, NoOwner, Placement, Reloader, Rule, SharedTable, Strategy, Table, WatchOptions,
};

use crate::support::reload::{mini, owner_of_kz, start};

const TABLE: &str = r#"
version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:9001"] }
  kz: { upstreams: ["http://127.0.0.1:9002"], failover: eu }
  us: { upstreams: ["http://127.0.0.1:9003"], peer: "http://127.0.0.1:8083" }
countries:
  KZ: { id: 7, region: kz }
  DE: { id: 49, region: eu }
  US: { id: 1, region: us }
entities: { IntercityOrder: 3, WalletAccount: 4 }
overrides:
  - { country: KZ, entity: WalletAccount, region: eu }
shards: { count: 16, regions: { eu: "0-5", kz: ["6-8", "9-10"], us: "11-15" } }
nodes:
  locality_mac: { "c110002": eu }
  locality_pid: { 4464: kz }
  snowflake_datacenter: { 1: eu }
  snowflake_worker: { 3: kz }
  sonyflake_machine: { 258: us }
  instagram_shard: { "0-4095": eu, "4096-8000": kz }
key_ranges:
  - { start: "0000000000000000", region: eu }
  - { start: "8000000000000000", region: kz }
hash: { regions: [eu, kz, us] }
time_ranges:
  - { until: "2024-01-01T00:00:00Z", region: us }
  - { until: 1800000000000, region: eu }
routes:
  - name: orders
    match: { path: "/v1/orders/{id}", methods: [GET, PUT] }
    id: { path_param: id, formats: [iuid, uniqid] }
  - name: orders-delete
    match: { path: "/v1/orders/{id}", methods: [DELETE] }
    id: { path_param: id, formats: [iuid] }
    placement: hash
  - name: wallet
    match: { path: "/v1/wallet" }
    id: { header: X-Entity-Id, formats: [iuid] }
  - name: events
    match: { path: "/v1/events/{*rest}" }
    id: { query: id, formats: [uuidv7] }
  - name: create
    match: { path: "/v1/orders", methods: [POST] }
    mint: { format: iuid, entity: IntercityOrder, country: { fixed: KZ } }
"#;

fn table(text: &str) -> Result<Table, ConfigErrors> {
    Ok(Table::compile(&config::load_str(text, "test.yaml")?))
}

fn name(t: &Table, p: &Placement) -> String {
    t.region(p.region).name.clone()
}

fn iuid(country: u8, entity: u8) -> Decoded {
    Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, country, entity, 42))
}

fn place(t: &Table, id: &Decoded, s: Strategy) -> Result<(String, Rule), NoOwner> {
    t.place(id, s).map(|p| (name(t, &p), p.rule))
}

#[test]
fn routing_iuid_override_beats_country() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    assert_eq!(place(&t, &iuid(7, 4), Strategy::Auto)?, ("eu".into(), Rule::Override { country: 7, entity: 4 }));
    assert_eq!(place(&t, &iuid(7, 3), Strategy::Auto)?, ("kz".into(), Rule::Country { country: 7 }));
    assert_eq!(place(&t, &iuid(7, 200), Strategy::Country)?, ("kz".into(), Rule::Country { country: 7 }));
    assert_eq!(place(&t, &iuid(1, 4), Strategy::Auto)?, ("us".into(), Rule::Country { country: 1 }));
    let p = t.place(&iuid(7, 4), Strategy::Auto)?;
    assert_eq!(t.explain(p.rule).to_string(), "override KZ/WalletAccount");
    assert_eq!(t.explain(Rule::Country { country: 7 }).to_string(), "country 7 (KZ)");
    assert_eq!(p.rule.kind(), "override");
    Ok(())
}

#[test]
fn routing_unowned_country_and_shard_are_typed_no_owner() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    let e = t.place(&iuid(99, 3), Strategy::Auto).err().ok_or("placed an unowned country")?;
    assert_eq!(e, NoOwner { strategy: Strategy::Country, detail: Missing::Country { country: 99, entity: 3 } });
    assert_eq!(e.to_string(), "no region owns country 99 (entity 3)");
    // A uniqid shard beyond the table (the id itself is valid: route on its prefix).
    let u = UniqidShard::from_fields(40, 0x1234, 1_700_000_000, 5).ok_or("uniqid")?;
    let e = t.place(&Decoded::Uniqid(u), Strategy::Auto).err().ok_or("placed shard 40")?;
    assert_eq!(e.detail, Missing::Shard { shard: 40 });
    assert_eq!(e.to_string(), "no region owns shard 40");
    // A strategy that cannot read the format.
    let v7 = Decoded::Uuidv7(Uuid7::from_fields(1_700_000_000_000, 1, 2));
    let e = t.place(&v7, Strategy::Country).err().ok_or("country placed a uuidv7")?;
    assert_eq!(e.detail, Missing::Unsupported { format: Format::Uuidv7 });
    Ok(())
}

#[test]
fn routing_explicit_entry_beats_default_region() -> Result<(), Box<dyn std::error::Error>> {
    let text = TABLE.replace("version: 1\n", "version: 1\ndefault_region: us\n");
    let t = table(&text)?;
    assert_eq!(place(&t, &iuid(7, 3), Strategy::Auto)?, ("kz".into(), Rule::Country { country: 7 }));
    assert_eq!(place(&t, &iuid(99, 3), Strategy::Auto)?, ("us".into(), Rule::Default));
    let u = UniqidShard::from_fields(40, 1, 1_700_000_000, 5).ok_or("uniqid")?;
    assert_eq!(place(&t, &Decoded::Uniqid(u), Strategy::Auto)?, ("us".into(), Rule::Default));
    Ok(())
}

#[test]
fn routing_shards() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    for (shard, want) in [(0, "eu"), (5, "eu"), (6, "kz"), (10, "kz"), (11, "us"), (15, "us")] {
        let u = UniqidShard::from_fields(shard, 7, 1_700_000_000, 1).ok_or("uniqid")?;
        assert_eq!(place(&t, &Decoded::Uniqid(u), Strategy::Auto)?, (want.into(), Rule::Shard { shard }));
    }
    Ok(())
}

#[test]
fn routing_node_tables() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    let ts = 1_700_000_000_000;
    let mac = Decoded::Locality(LocalityUuid::from_fields(1, 4464, 0xc110002, ts));
    assert_eq!(place(&t, &mac, Strategy::Auto)?, ("eu".into(), Rule::LocalityMac { fragment: 0xc110002 }));
    let pid = Decoded::Locality(LocalityUuid::from_fields(1, 4464, 0xabcdef0, ts));
    assert_eq!(place(&t, &pid, Strategy::Node)?, ("kz".into(), Rule::LocalityPid { pid: 4464 }));
    let none = Decoded::Locality(LocalityUuid::from_fields(1, 1, 0xabcdef0, ts));
    assert_eq!(
        t.place(&none, Strategy::Auto).err().map(|e| e.detail),
        Some(Missing::LocalityNode { fragment: 0xabcdef0, pid: 1 })
    );

    let layout = SnowflakeLayout::default();
    let sf = |dc: u64, worker: u64| -> Result<Decoded, Box<dyn std::error::Error>> {
        let v = (1_000_000u64 << 22) | (dc << 17) | (worker << 12) | 7;
        Ok(Decoded::Snowflake(Snowflake::parse_with(&v.to_string(), layout)?))
    };
    assert_eq!(place(&t, &sf(1, 3)?, Strategy::Auto)?, ("eu".into(), Rule::SnowflakeDatacenter { id: 1 }));
    assert_eq!(place(&t, &sf(2, 3)?, Strategy::Auto)?, ("kz".into(), Rule::SnowflakeWorker { id: 3 }));
    assert!(t.place(&sf(2, 4)?, Strategy::Auto).is_err());

    let sony = (1_000_000u64 << 24) | (5 << 16) | 258;
    let sony = Decoded::Sonyflake(Sonyflake::parse_with(&sony.to_string(), SonyflakeFlavor::V1)?);
    assert_eq!(place(&t, &sony, Strategy::Auto)?, ("us".into(), Rule::SonyflakeMachine { id: 258 }));

    let ig = |shard: u64| -> Result<Decoded, Box<dyn std::error::Error>> {
        let v = (1_000_000u64 << 23) | (shard << 10) | 1;
        Ok(Decoded::Instagram(Instagram::parse_with(&v.to_string(), InstagramLayout::default())?))
    };
    assert_eq!(place(&t, &ig(17)?, Strategy::Auto)?, ("eu".into(), Rule::InstagramShard { shard: 17 }));
    assert_eq!(place(&t, &ig(5000)?, Strategy::Auto)?, ("kz".into(), Rule::InstagramShard { shard: 5000 }));
    assert_eq!(
        t.place(&ig(8100)?, Strategy::Auto).err().map(|e| e.detail),
        Some(Missing::InstagramShard { shard: 8100 })
    );
    Ok(())
}

#[test]
fn routing_key_ranges_hash_and_time() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    // Key ranges: the owner follows the split point of the id's key hash.
    let mut seen = [false; 2];
    for i in 0..64u64 {
        let id = Decoded::Uuidv7(Uuid7::from_fields(1_700_000_000_000 + i, 0, i));
        let (region, rule) = place(&t, &id, Strategy::KeyRange)?;
        let want = if id.key_hash() < 0x8000_0000_0000_0000 { ("eu", 0) } else { ("kz", 1) };
        assert_eq!((region.as_str(), rule), (want.0, Rule::KeyRange { index: want.1 }));
        seen[want.1] = true;
    }
    assert_eq!(seen, [true, true]);

    // Hash: deterministic, every region gets keys, and removing a region
    // only moves that region's keys (rendezvous property).
    let ids: Vec<Decoded> = (0..3000u64).map(|i| Decoded::Uuidv7(Uuid7::from_fields(i, 0, i * 7919))).collect();
    let before: Vec<String> =
        ids.iter().map(|id| place(&t, id, Strategy::Hash).map(|p| p.0)).collect::<Result<_, _>>()?;
    for r in ["eu", "kz", "us"] {
        let n = before.iter().filter(|b| *b == r).count();
        assert!((700..1300).contains(&n), "{r}: {n} of 3000");
    }
    let fewer = table(&TABLE.replace("hash: { regions: [eu, kz, us] }", "hash: { regions: [eu, kz] }"))?;
    for (id, was) in ids.iter().zip(&before) {
        let now = place(&fewer, id, Strategy::Hash)?.0;
        if was != "us" {
            assert_eq!(&now, was);
        }
    }

    // Weighted hash: a region with weight 3 gets about three times the keys.
    let weighted =
        table(&TABLE.replace("hash: { regions: [eu, kz, us] }", "hash: { regions: [eu, kz], weights: { eu: 3 } }"))?;
    let eu = ids
        .iter()
        .filter(|id| weighted.place(id, Strategy::Hash).map(|p| name(&weighted, &p) == "eu").unwrap_or(false))
        .count();
    assert!((2000..2500).contains(&eu), "eu got {eu} of 3000 with weight 3:1");

    // Time ranges: until is exclusive; past the last range there is no owner.
    let at = |ms: u64| Decoded::Uuidv7(Uuid7::from_fields(ms, 0, 0));
    assert_eq!(place(&t, &at(1_704_067_199_999), Strategy::Auto)?, ("us".into(), Rule::TimeRange { index: 0 }));
    assert_eq!(place(&t, &at(1_704_067_200_000), Strategy::Auto)?, ("eu".into(), Rule::TimeRange { index: 1 }));
    assert_eq!(
        t.place(&at(1_800_000_000_000), Strategy::Auto).err().map(|e| e.detail),
        Some(Missing::Time { unix_ms: 1_800_000_000_000 })
    );
    Ok(())
}

#[test]
fn routing_uuidv7_auto_prefers_time_then_key_then_hash() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    assert_eq!(t.natural_strategy(Format::Uuidv7), Strategy::TimeRange);
    let no_time = TABLE.split("time_ranges:").next().unwrap_or("").to_owned()
        + &TABLE.split("routes:").nth(1).map(|r| format!("routes:{r}")).unwrap_or_default();
    let t = table(&no_time)?;
    assert_eq!(t.natural_strategy(Format::Uuidv7), Strategy::KeyRange);
    Ok(())
}

#[test]
fn routing_match_route_by_method_and_path() -> Result<(), Box<dyn std::error::Error>> {
    let t = table(TABLE)?;
    let m = t.match_route(&Method::GET, "/v1/orders/abc").ok_or("no match")?;
    assert_eq!(m.route.name, "orders");
    assert_eq!(m.params.get("id"), Some("abc"));
    assert_eq!(m.route.id.as_ref().map(|i| i.formats.clone()), Some(vec![Format::Iuid, Format::Uniqid]));
    let m = t.match_route(&Method::HEAD, "/v1/orders/abc").ok_or("HEAD")?;
    assert_eq!(m.route.name, "orders");
    let m = t.match_route(&Method::DELETE, "/v1/orders/abc").ok_or("DELETE")?;
    assert_eq!((m.route.name.as_str(), m.route.strategy), ("orders-delete", Strategy::Hash));
    assert!(t.match_route(&Method::PATCH, "/v1/orders/abc").is_none());
    let m = t.match_route(&Method::POST, "/v1/wallet").ok_or("wallet")?;
    assert!(matches!(m.route.id.as_ref().map(|i| &i.source), Some(IdSource::Header(h)) if h == "x-entity-id"));
    let m = t.match_route(&Method::GET, "/v1/events/a/b").ok_or("catch-all")?;
    assert_eq!(m.params.get("rest"), Some("a/b"));
    let m = t.match_route(&Method::POST, "/v1/orders").ok_or("create")?;
    let mint = m.route.mint.as_ref().ok_or("mint rule")?;
    assert_eq!((mint.format, mint.entity, mint.header.as_str()), (Format::Iuid, Some(3), "x-entity-id"));
    assert!(t.match_route(&Method::GET, "/v2/orders/abc").is_none());
    assert_eq!(t.country_by_name("KZ"), Some(7));
    assert_eq!(t.region_by_name("kz").and_then(|r| t.failover(r)), t.region_by_name("eu"));
    assert_eq!(t.id_params(), &Params::default());
    assert_eq!(t.settings().restart.instance, "shardgate");
    Ok(())
}

// ---------------------------------------------------------------------------
// The file watcher on a real directory.

/// Polls `cond` every 20 ms until it holds or `limit` passes.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

struct Watching {
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Watching {
    fn new(r: &Arc<Reloader>, options: WatchOptions) -> Result<Watching, Box<dyn std::error::Error>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(WATCHER_THREAD)
            .enable_all()
            .build()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = runtime.spawn(watch_with(Arc::clone(r), options, async move {
            let _ = rx.await;
        }));
        // Let the watcher register before the test starts changing files.
        std::thread::sleep(Duration::from_millis(200));
        Ok(Watching { runtime, stop: Some(tx), task: Some(task) })
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = self.runtime.block_on(async { tokio::time::timeout(Duration::from_secs(5), task).await });
        }
    }
}

/// The name of the watcher runtime's threads.
const WATCHER_THREAD: &str = "table-watcher";

/// CPU time (user and system, in clock ticks) used so far by this process's
/// threads named `name` (Linux `/proc`).
fn cpu_ticks_of_threads(name: &str) -> Result<u64, Box<dyn std::error::Error>> {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task")? {
        let dir = task?.path();
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else { continue };
        if comm.trim_end() != name {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
        // Fields after the parenthesised name: state is the 3rd field, utime the 14th, stime the 15th.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or("stat without a name")?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        ticks +=
            fields.get(11).ok_or("no utime")?.parse::<u64>()? + fields.get(12).ok_or("no stime")?.parse::<u64>()?;
    }
    Ok(ticks)
}

const DEADLINE: Duration = Duration::from_secs(20);
const FAST: WatchOptions = WatchOptions { debounce: Duration::from_millis(50), poll_interval: None, events: true };

#[test]
fn routing_watch_rewrite_in_place_and_rename_on_save() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    let r = start(dir.path(), &file, &mini("kz"))?;
    let _w = Watching::new(&r, FAST)?;

    std::fs::write(&file, mini("eu"))?;
    assert!(eventually(DEADLINE, || owner_of_kz(r.shared()) == "eu"), "rewrite in place not picked up");

    // Editor style: write a temporary file, then rename it over the table.
    let tmp = dir.path().join(".table.yaml.swp");
    std::fs::write(&tmp, mini("kz"))?;
    std::fs::rename(&tmp, &file)?;
    assert!(eventually(DEADLINE, || owner_of_kz(r.shared()) == "kz"), "rename-on-save not picked up");

    // Invalid: reported and counted, the table stays.
    std::fs::write(&file, "version: 1\nregions: [\n")?;
    assert!(eventually(DEADLINE, || r.failures() >= 1), "invalid file not reported");
    assert_eq!(owner_of_kz(r.shared()), "kz");

    // Deleted, then recreated.
    std::fs::remove_file(&file)?;
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(owner_of_kz(r.shared()), "kz");
    std::fs::write(&file, mini("eu"))?;
    assert!(eventually(DEADLINE, || owner_of_kz(r.shared()) == "eu"), "recreated file not picked up");
    Ok(())
}

#[cfg(unix)]
#[test]
fn routing_watch_kubernetes_symlink_swap() -> Result<(), Box<dyn std::error::Error>> {
    use std::os::unix::fs::symlink;
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    // The ConfigMap layout: table.yaml -> ..data/table.yaml, ..data -> ..<timestamp>/
    std::fs::create_dir(d.join("..2024_01_01_00_00_00.1"))?;
    std::fs::write(d.join("..2024_01_01_00_00_00.1/table.yaml"), mini("kz"))?;
    symlink("..2024_01_01_00_00_00.1", d.join("..data"))?;
    symlink("..data/table.yaml", d.join("table.yaml"))?;
    let file = d.join("table.yaml");
    let (cfg, text) = config::load_file(&file)?;
    let r = Arc::new(Reloader::new(&file, Arc::new(SharedTable::new(Table::compile(&cfg), text))));
    let _w = Watching::new(&r, FAST)?;

    // kubelet: new timestamped dir, new `..data_tmp` symlink, atomic rename over `..data`.
    std::fs::create_dir(d.join("..2024_01_01_00_01_00.2"))?;
    std::fs::write(d.join("..2024_01_01_00_01_00.2/table.yaml"), mini("eu"))?;
    symlink("..2024_01_01_00_01_00.2", d.join("..data_tmp"))?;
    std::fs::rename(d.join("..data_tmp"), d.join("..data"))?;
    std::fs::remove_dir_all(d.join("..2024_01_01_00_00_00.1"))?;
    assert!(eventually(DEADLINE, || owner_of_kz(r.shared()) == "eu"), "symlink swap not picked up");
    Ok(())
}

#[test]
fn routing_poll_fallback_picks_up_changes() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let sub = dir.path().join("real");
    std::fs::create_dir(&sub)?;
    let file = sub.join("table.yaml");
    let r = start(&sub, &file, &mini("kz"))?;
    // No file-system events (as on NFS): polling alone must see the change.
    let options = WatchOptions {
        debounce: Duration::from_millis(50),
        poll_interval: Some(Duration::from_millis(50)),
        events: false,
    };
    let _w = Watching::new(&r, options)?;
    std::fs::write(&file, mini("eu"))?;
    assert!(eventually(DEADLINE, || owner_of_kz(r.shared()) == "eu"), "poll did not pick up the change");
    // Between polls the watcher sleeps: over a second its thread uses a few
    // ticks (100 a second is one core's whole time), not a core.
    let before = cpu_ticks_of_threads(WATCHER_THREAD)?;
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_ticks_of_threads(WATCHER_THREAD)? - before;
    assert!(used < 20, "the watcher's thread used {used} clock ticks in a second of polling every 50 ms");
    Ok(())
}

// ---------------------------------------------------------------------------
// Snapshots while tables are swapped.

#[test]
fn routing_snapshots_never_torn_during_1000_swaps() -> Result<(), Box<dyn std::error::Error>> {
    // Invariant per table: country KZ and shard 0 belong to the same region,
    // and the table's source text names that region.
    let text = |r: &str| {
        format!(
            "version: 1\nregions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9001\"] }}\n  kz: {{ upstreams: [\"http://127.0.0.1:9002\"] }}\ncountries:\n  KZ: {{ id: 7, region: {r} }}\nshards: {{ count: 2, regions: {{ {r}: \"0-1\" }} }}\nroutes:\n  - name: orders\n    match: {{ path: \"/o/{{id}}\" }}\n    id: {{ path_param: id, formats: [iuid] }}\n"
        )
    };
    let tables: Vec<(Table, String)> = ["eu", "kz"]
        .iter()
        .map(|r| config::load_str(&text(r), "t.yaml").map(|c| (Table::compile(&c), text(r))))
        .collect::<Result<_, _>>()?;
    let shared =
        Arc::new(SharedTable::new(Table::compile(&config::load_str(&tables[0].1, "t.yaml")?), tables[0].1.clone()));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (shared, done) = (Arc::clone(&shared), Arc::clone(&done));
        std::thread::spawn(move || -> Result<u64, String> {
            let u = UniqidShard::from_fields(0, 1, 1_700_000_000, 1).ok_or("uniqid")?;
            let mut reads = 0u64;
            let mut last_version = 0;
            while !done.load(Ordering::Acquire) || reads == 0 {
                let snap = shared.snapshot();
                let t = &snap.table;
                let a = t.place(&iuid(7, 0), Strategy::Auto).map_err(|e| e.to_string())?;
                let b = t.place(&Decoded::Uniqid(u), Strategy::Auto).map_err(|e| e.to_string())?;
                let region = &t.region(a.region).name;
                if a.region != b.region || !snap.source_text.contains(&format!("region: {region} }}")) {
                    return Err(format!("torn table at version {}", snap.version));
                }
                if snap.version < last_version {
                    return Err("version went backwards".into());
                }
                last_version = snap.version;
                reads += 1;
            }
            Ok(reads)
        })
    };
    for i in 0..1000 {
        let (_, src) = &tables[i % 2];
        let cfg = config::load_str(src, "t.yaml")?;
        shared.publish(Table::compile(&cfg), src.clone());
    }
    done.store(true, Ordering::Release);
    let reads = reader.join().map_err(|_| "reader panicked")??;
    assert!(reads > 0);
    assert_eq!(shared.snapshot().version, 1001);
    Ok(())
}
