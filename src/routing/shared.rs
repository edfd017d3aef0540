//! The live table: one atomic pointer that requests snapshot and reloads
//! swap. What is published is serialised (one lock, never taken by a
//! request): a reload compiles with the addresses DNS discovery holds, and
//! new addresses recompile the running table's text, so neither undoes
//! the other.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::resolved::Resolved;
use super::table::Table;
use crate::config::Config;

/// A table together with where it came from.
#[derive(Debug)]
pub struct Loaded {
    /// The compiled table.
    pub table: Table,
    /// Lowercase hex SHA-256 of the source text.
    pub sha256: String,
    /// 1 for the first table, +1 per successful reload.
    pub version: u64,
    /// When it was published.
    pub loaded_at: SystemTime,
    /// The YAML it was compiled from (for `/config`).
    pub source_text: String,
    /// What it was compiled from, as this instance loaded it (its flags put
    /// over it), compiled again when the addresses of named endpoints
    /// change; `None` for a table published compiled ([`SharedTable::publish`]).
    pub config: Option<Arc<Config>>,
}

impl Loaded {
    /// `table`, compiled from `source_text` (and `config`), published now as `version`.
    fn new(table: Table, source_text: String, version: u64, config: Option<Arc<Config>>) -> Loaded {
        Loaded { table, sha256: sha256_hex(&source_text), version, loaded_at: SystemTime::now(), source_text, config }
    }
}

/// The current table; readers take an owned snapshot, writers swap atomically.
///
/// A request calls [`SharedTable::snapshot`] once and uses that `Arc` to the
/// end, so it never sees a mix of two tables; a reload never blocks readers.
#[derive(Debug)]
pub struct SharedTable {
    current: ArcSwap<Loaded>,
    next_version: AtomicU64,
    /// The addresses of named endpoints, as discovery last found them.
    resolved: Mutex<Resolved>,
    /// Told of every table published (held requests wait on it).
    changes: tokio::sync::watch::Sender<u64>,
}

/// Lowercase hex SHA-256 of `text`.
pub fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        out.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    out
}

/// `t` as ISO 8601 UTC with `digits` of fractional seconds (a load, a
/// reload, an audit line, a fleet report).
pub fn iso_time(t: SystemTime, digits: u8) -> Option<String> {
    let micros = t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros());
    crate::ids::clock::iso8601(u64::try_from(micros).unwrap_or(u64::MAX), digits).map(|t| t.to_string())
}

impl SharedTable {
    /// Starts with `table` (version 1).
    pub fn new(table: Table, source_text: impl Into<String>) -> Self {
        SharedTable::starting(Loaded::new(table, source_text.into(), 1, None))
    }

    /// Starts with `cfg` (from `source_text`), compiled (version 1).
    pub fn from_config(cfg: &Config, source_text: impl Into<String>) -> Self {
        let config = Some(Arc::new(cfg.clone()));
        SharedTable::starting(Loaded::new(Table::compile(cfg), source_text.into(), 1, config))
    }

    fn starting(loaded: Loaded) -> Self {
        SharedTable {
            current: ArcSwap::from_pointee(loaded),
            next_version: AtomicU64::new(2),
            resolved: Mutex::new(Resolved::none()),
            changes: tokio::sync::watch::channel(1).0,
        }
    }

    /// The current table, owned: keep it for the whole request.
    pub fn snapshot(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// Compiles `cfg` (from `source_text`) with the addresses discovery
    /// holds, keeps the running restart-only values, and publishes it: the
    /// new version and the restart-only keys that changed, or why the
    /// running instance cannot take it. What `check` would warn of in the
    /// new table is logged, as at start-up.
    pub fn publish_config(&self, cfg: &Config, source_text: String) -> Result<(u64, Vec<&'static str>), String> {
        let resolved = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        let mut table = Table::compile_with(cfg, &resolved);
        let running = self.snapshot();
        let needs_restart = table.keep_restart_only(&running.table)?;
        table.carry(&running.table);
        // Warned of as it runs: with the restart-only values it keeps.
        let mut running_as = cfg.clone();
        running_as.settings.restart = table.settings().restart.clone();
        let version = self.publish_loaded(table, source_text, Some(Arc::new(cfg.clone())));
        for warning in running_as.warnings() {
            tracing::warn!(version, "{warning}");
        }
        Ok((version, needs_restart))
    }

    /// Takes `resolved` as the addresses of named endpoints and, when they
    /// changed, republishes the running table's text with them (same
    /// version: the table as written did not change); whether it did.
    pub fn refresh_addresses(&self, resolved: Resolved) -> bool {
        let mut held = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if *held == resolved {
            return false;
        }
        *held = resolved;
        let running = self.snapshot();
        // A table published compiled: its text was valid when it was.
        let parsed = || crate::config::load_str(&running.source_text, "the running table").ok().map(Arc::new);
        let Some(cfg) = running.config.clone().or_else(parsed) else { return false };
        let mut table = Table::compile_with(&cfg, &held);
        if table.keep_restart_only(&running.table).is_err() {
            return false;
        }
        table.carry(&running.table);
        let loaded = Loaded {
            table,
            sha256: running.sha256.clone(),
            version: running.version,
            loaded_at: running.loaded_at,
            source_text: running.source_text.clone(),
            config: Some(cfg),
        };
        self.current.store(Arc::new(loaded));
        self.changes.send_replace(running.version);
        true
    }

    /// Changes whenever a table is published.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Replaces the table in one atomic swap; returns the new version.
    pub fn publish(&self, table: Table, source_text: impl Into<String>) -> u64 {
        self.publish_loaded(table, source_text.into(), None)
    }

    /// Publishes `table`, compiled from `config` when it is known.
    fn publish_loaded(&self, table: Table, source_text: String, config: Option<Arc<Config>>) -> u64 {
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        self.current.store(Arc::new(Loaded::new(table, source_text, version, config)));
        self.changes.send_replace(version);
        version
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::instance::tests::SHARED;
    use crate::config::instance::InstanceFlags;
    use crate::config::model::CountrySource;

    #[test]
    fn new_addresses_are_compiled_into_the_table_as_this_instance_loaded_it() -> Result<(), String> {
        let flags = InstanceFlags { region: Some("kz".into()), ..InstanceFlags::default() };
        let cfg = flags.load(SHARED, "shared.yaml").map_err(|e| e.to_string())?;
        let shared = SharedTable::from_config(&cfg, SHARED);
        let mut found = Resolved::none();
        found.set("backend.internal", vec![std::net::Ipv4Addr::LOCALHOST.into()]);
        assert!(shared.refresh_addresses(found), "the addresses were not taken");
        let snap = shared.snapshot();
        let country = snap.table.routes().iter().find_map(|r| r.mint.as_ref()?.country.clone());
        assert!(matches!(country, Some(CountrySource::Local(7))), "{country:?}");
        assert_eq!(snap.table.local_region().map(|r| snap.table.region(r).name.clone()).as_deref(), Some("kz"));
        Ok(())
    }
}
