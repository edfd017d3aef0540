//! Tasks that follow the published table, off the request path: the
//! access log's file, and the HTTP/2 connections of endpoints it no
//! longer names.

use std::sync::Weak;
use std::time::Duration;

use crate::routing::shared::SharedTable;
use crate::telemetry::access::ACCESS_FILE;
use crate::upstream::Upstreams;

/// Points the access log at each published table's `log.access_file`, on
/// a blocking thread: opening it, or waiting for the log's writing thread
/// stalled on a slow disk, never holds a request's worker.
pub(super) fn access_file(table: Weak<SharedTable>) {
    let Some(mut changes) = table.upgrade().map(|t| t.changes()) else { return };
    tokio::spawn(async move {
        loop {
            let Some(shared) = table.upgrade() else { return };
            let loaded = shared.snapshot();
            let (path, version) = (loaded.table.settings().log.access_file.clone(), loaded.version);
            drop((shared, loaded));
            let followed = tokio::task::spawn_blocking(move || ACCESS_FILE.follow(path.as_ref(), version));
            // Not awaited past a change: a follow stuck on a stalled disk
            // does not keep the next table's from being asked for.
            tokio::select! {
                _ = followed => {}
                _ = changes.changed() => continue,
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Lets go of the HTTP/2 connections of endpoints the running table no
/// longer names, at each published table and every ten seconds (a request
/// still on an older table may have opened one again).
pub(super) fn gone_endpoints(table: Weak<SharedTable>, upstreams: Weak<Upstreams>) {
    let Some(mut changes) = table.upgrade().map(|t| t.changes()) else { return };
    tokio::spawn(async move {
        loop {
            let (Some(shared), Some(upstreams)) = (table.upgrade(), upstreams.upgrade()) else { return };
            upstreams.keep_only(&shared.snapshot().table);
            drop((shared, upstreams));
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = tokio::time::sleep(Duration::from_secs(10)) => {}
            }
        }
    });
}
