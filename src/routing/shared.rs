//! The live table: one atomic pointer that requests snapshot and reloads swap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use arc_swap::ArcSwap;
use sha2::{Digest, Sha256};

use super::table::Table;

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
}

/// The current table; readers take an owned snapshot, writers swap atomically.
///
/// A request calls [`SharedTable::snapshot`] once and uses that `Arc` to the
/// end, so it never sees a mix of two tables; a reload never blocks readers.
#[derive(Debug)]
pub struct SharedTable {
    current: ArcSwap<Loaded>,
    next_version: AtomicU64,
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

impl SharedTable {
    /// Starts with `table` (version 1).
    pub fn new(table: Table, source_text: impl Into<String>) -> Self {
        let source_text = source_text.into();
        let loaded =
            Loaded { table, sha256: sha256_hex(&source_text), version: 1, loaded_at: SystemTime::now(), source_text };
        SharedTable { current: ArcSwap::from_pointee(loaded), next_version: AtomicU64::new(2) }
    }

    /// The current table, owned: keep it for the whole request.
    pub fn snapshot(&self) -> Arc<Loaded> {
        self.current.load_full()
    }

    /// Replaces the table in one atomic swap; returns the new version.
    pub fn publish(&self, table: Table, source_text: impl Into<String>) -> u64 {
        let source_text = source_text.into();
        let version = self.next_version.fetch_add(1, Ordering::Relaxed);
        let loaded =
            Loaded { table, sha256: sha256_hex(&source_text), version, loaded_at: SystemTime::now(), source_text };
        self.current.store(Arc::new(loaded));
        version
    }
}
