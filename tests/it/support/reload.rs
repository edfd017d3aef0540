//! A small table file on disk and the reloader over it, as the reload and
//! file-watcher tests edit it: KZ's owner is the one thing that changes.

use std::path::Path;
use std::sync::Arc;

use shardgate::config;
use shardgate::ids::{Decoded, Iuid};
use shardgate::routing::{Reloader, SharedTable, Strategy, Table};

/// Two regions, eu and kz, and one route; KZ is owned by `REGION`.
pub const MINI: &str = "version: 1\nlisten: 127.0.0.1:8080\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:9001\"] }\n  kz: { upstreams: [\"http://127.0.0.1:9002\"] }\ncountries:\n  KZ: { id: 7, region: REGION }\nroutes:\n  - name: orders\n    match: { path: \"/v1/orders/{id}\" }\n    id: { path_param: id, formats: [iuid] }\n";

/// The small table with KZ owned by `region`.
pub fn mini(region: &str) -> String {
    MINI.replace("REGION", region)
}

/// The region that places a KZ id in the table in force.
pub fn owner_of_kz(shared: &SharedTable) -> String {
    let snap = shared.snapshot();
    let id = Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, 7, 1, 42));
    snap.table.place(&id, Strategy::Auto).map(|p| snap.table.region(p.region).name.clone()).unwrap_or_default()
}

/// Writes `text` to `file` and starts a reloader over the table it holds.
pub fn start(dir: &Path, file: &Path, text: &str) -> Result<Arc<Reloader>, Box<dyn std::error::Error>> {
    let _ = dir;
    std::fs::write(file, text)?;
    let (cfg, text) = config::load_file(file)?;
    let shared = Arc::new(SharedTable::new(Table::compile(&cfg), text));
    Ok(Arc::new(Reloader::new(file, shared)))
}
