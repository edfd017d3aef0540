//! Reloading a table that changes what only a restart can change: every
//! other change applies, every restart-only key keeps its running value
//! and is listed in `needs_restart`, for each key alone and all at once,
//! and a later edit still applies (the table never freezes).

use std::sync::Arc;

use shardgate::config::{self, restart::RESTART_ONLY};
use shardgate::ids::Iuid;
use shardgate::routing::{Reloader, SharedTable, Strategy, Table};

use crate::support::TestResult;

/// Each restart-only key: the top-level section it is in, its value in
/// the base table (`None`: left out) and a change of it. A value of a
/// mapping section is one `key: value` entry of that mapping.
const CHANGES: &[(&str, &str, Option<&str>, &str)] = &[
    ("listen", "listen", Some("127.0.0.1:18080"), "127.0.0.1:18081"),
    ("admin", "admin", Some("127.0.0.1:19901"), "127.0.0.1:19902"),
    ("region", "region", Some("kz"), "eu"),
    ("instance", "instance", Some("gw-a"), "gw-b"),
    ("ids.locality", "ids", Some("locality: { pid: 1 }"), "locality: { pid: 2 }"),
    ("server.tls", "server", None, "tls: { cert: gw.pem, key: gw.key }"),
    ("server.header_read_timeout", "server", None, "header_read_timeout: 11s"),
    ("server.idle_timeout", "server", None, "idle_timeout: 61s"),
    ("server.max_header_bytes", "server", None, "max_header_bytes: 20000"),
    ("server.max_headers", "server", None, "max_headers: 101"),
    ("server.max_connections", "server", None, "max_connections: 10001"),
    ("server.admin_max_connections", "server", None, "admin_max_connections: 65"),
    ("upstream.tls", "upstream", None, "tls: { ca: ca.pem }"),
    ("upstream.connect_timeout", "upstream", None, "connect_timeout: 3s"),
    ("upstream.pool_idle_timeout", "upstream", None, "pool_idle_timeout: 91s"),
    ("search_cache.capacity", "search_cache", None, "capacity: 5"),
    ("telemetry", "telemetry", None, "sample_ratio: 0.5"),
];

/// Sections whose values are mappings (the others are scalars).
const MAPPINGS: [&str; 5] = ["ids", "server", "upstream", "search_cache", "telemetry"];

/// A table serving kz with KZ owned by `kz_owner`, the keys in `changed`
/// changed and every other restart-only key at its base value.
fn table(kz_owner: &str, changed: &[&str]) -> String {
    let mut sections: Vec<(&str, Vec<&str>)> = Vec::new();
    for (key, section, base, new) in CHANGES {
        let value = if changed.contains(key) { Some(*new) } else { *base };
        let Some(value) = value else { continue };
        match sections.iter_mut().find(|(s, _)| s == section) {
            Some((_, values)) => values.push(value),
            None => sections.push((section, vec![value])),
        }
    }
    let mut text = String::from("version: 1\n");
    for (section, values) in sections {
        if MAPPINGS.contains(&section) {
            text.push_str(&format!("{section}: {{ {} }}\n", values.join(", ")));
        } else {
            text.push_str(&format!("{section}: {}\n", values.join("")));
        }
    }
    text.push_str(&format!(
        "regions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9001\"] }}\n  kz: {{ upstreams: [\"http://127.0.0.1:9002\"] }}\n\
         countries:\n  KZ: {{ id: 7, region: {kz_owner} }}\n\
         routes:\n  - {{ name: orders, match: {{ path: \"/v1/orders/{{id}}\" }}, id: {{ path_param: id, formats: [iuid] }} }}\n"
    ));
    text
}

fn owner_of_kz(shared: &SharedTable) -> String {
    let snap = shared.snapshot();
    let id = shardgate::ids::Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, 7, 3, 1));
    snap.table.place(&id, Strategy::Auto).map(|p| snap.table.region(p.region).name.clone()).unwrap_or_default()
}

#[test]
fn every_restart_only_key_is_kept_and_reported_while_the_rest_applies() -> TestResult {
    let keys: Vec<&str> = CHANGES.iter().map(|(k, ..)| *k).collect();
    assert_eq!(keys, RESTART_ONLY, "the test's changes and config::restart::RESTART_ONLY differ");
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("table.yaml");
    std::fs::write(&file, table("kz", &[]))?;
    let (cfg, text) = config::load_file(&file)?;
    let shared = Arc::new(SharedTable::new(Table::compile(&cfg), text));
    let running = shared.snapshot().table.settings().restart.clone();
    let r = Reloader::new(&file, Arc::clone(&shared));
    // Each key alone, with KZ moved each time: the move applies, the key is kept.
    for (i, key) in keys.iter().enumerate() {
        let owner = if i % 2 == 0 { "eu" } else { "kz" };
        std::fs::write(&file, table(owner, &[key]))?;
        let outcome = r.reload_now().map_err(|e| format!("{key}: {e}"))?;
        assert_eq!(outcome.needs_restart, [*key], "{key}");
        assert_eq!(owner_of_kz(&shared), owner, "{key}: the country move did not apply");
        assert_eq!(shared.snapshot().table.settings().restart, running, "{key}: the running value was not kept");
    }
    // Every key at once, and a move.
    std::fs::write(&file, table("eu", &keys))?;
    let outcome = r.reload_now()?;
    assert_eq!(outcome.needs_restart, RESTART_ONLY);
    assert_eq!(owner_of_kz(&shared), "eu");
    assert_eq!(shared.snapshot().table.settings().restart, running);
    // The next edit still applies (nothing froze): the move back.
    std::fs::write(&file, table("kz", &keys))?;
    assert_eq!(r.reload_now()?.needs_restart, RESTART_ONLY);
    assert_eq!(owner_of_kz(&shared), "kz");
    Ok(())
}
