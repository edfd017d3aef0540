//! DNS discovery: every backend and peer the table names by host is
//! resolved, and resolved again when its answer's TTL runs out (kept
//! between `upstream.dns.min_ttl` and `max_ttl`); each address becomes an
//! endpoint of its own (a Kubernetes headless Service's pods, say). When
//! the addresses change the running table is compiled again with them and
//! swapped in ([`SharedTable::refresh_addresses`]): requests in flight keep
//! the table and connections they have, so an address that went away is
//! drained, never cut; its idle connections close with the pool's sweep. A
//! failed lookup keeps the addresses last found and is tried again after
//! `min_ttl`. Until a name's first answer, its one endpoint is resolved
//! where it is connected to.
//!
//! The resolver is hickory's (`upstream.dns.servers`, or the system's
//! `/etc/resolv.conf`), asked directly, its own cache off: the answer's
//! TTL is what schedules the next question.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Weak;
use std::time::{Duration, Instant};

use hickory_resolver::config::{NameServerConfigGroup, ResolverConfig, ResolverOpts};
use hickory_resolver::name_server::TokioConnectionProvider;
use hickory_resolver::TokioResolver;

use crate::config::settings::DnsPolicy;
use crate::routing::{Resolved, SharedTable};

/// What discovery did, for the metrics.
#[derive(Debug, Default)]
pub struct DnsStats {
    /// Answers with addresses.
    pub answered: AtomicU64,
    /// Lookups that failed or found no address (the last addresses kept).
    pub failed: AtomicU64,
    /// Times a name's addresses changed.
    pub changed: AtomicU64,
}

/// Longest one lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// Resolves the table's named endpoints until `shared` is dropped.
pub fn spawn_discovery(shared: Weak<SharedTable>, stats: std::sync::Arc<DnsStats>) {
    tokio::spawn(async move {
        let mut resolver: Option<(Vec<std::net::SocketAddr>, TokioResolver)> = None;
        let mut due: HashMap<String, Instant> = HashMap::new();
        let mut resolved = Resolved::none();
        loop {
            let Some(table) = shared.upgrade() else { return };
            let snapshot = table.snapshot();
            let names = snapshot.table.names().to_vec();
            let policy = snapshot.table.settings().dns.clone();
            drop(snapshot);
            drop(table);
            if names.is_empty() {
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            let r = match &resolver {
                Some((servers, r)) if *servers == policy.servers => r.clone(),
                _ => match build(&policy) {
                    Ok(r) => {
                        resolver = Some((policy.servers.clone(), r.clone()));
                        r
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the DNS resolver; named endpoints are resolved as they are connected to");
                        tokio::time::sleep(policy.min_ttl.max(Duration::from_secs(1))).await;
                        continue;
                    }
                },
            };
            let now = Instant::now();
            let mut changed = false;
            let asked: Vec<&String> = names.iter().filter(|n| due.get(*n).is_none_or(|t| *t <= now)).collect();
            for name in asked {
                let (addrs, ttl) = lookup(&r, name, &policy).await;
                match addrs {
                    Some(addrs) => {
                        stats.answered.fetch_add(1, Ordering::Relaxed);
                        if resolved.set(name, addrs.clone()) {
                            stats.changed.fetch_add(1, Ordering::Relaxed);
                            tracing::info!(name = %name, addresses = ?addrs, "named endpoint resolved to new addresses");
                            changed = true;
                        }
                    }
                    None => {
                        stats.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                due.insert(name.clone(), Instant::now() + ttl);
            }
            let before = resolved.clone();
            resolved.retain(&names);
            due.retain(|n, _| names.contains(n));
            if changed || before != resolved {
                if let Some(table) = shared.upgrade() {
                    table.refresh_addresses(resolved.clone());
                }
            }
            let next = due.values().min().copied().unwrap_or(now + Duration::from_secs(1));
            // New names in a reloaded table are looked at within a second.
            let wake =
                next.min(Instant::now() + Duration::from_secs(1)).max(Instant::now() + Duration::from_millis(50));
            tokio::time::sleep_until(wake.into()).await;
        }
    });
}

/// The resolver `policy` names.
fn build(policy: &DnsPolicy) -> Result<TokioResolver, String> {
    let mut builder = if policy.servers.is_empty() {
        TokioResolver::builder_tokio().map_err(|e| format!("system resolver configuration: {e}"))?
    } else {
        let mut group = NameServerConfigGroup::new();
        for s in &policy.servers {
            group.merge(NameServerConfigGroup::from_ips_clear(&[s.ip()], s.port(), true));
        }
        let config = ResolverConfig::from_parts(None, Vec::new(), group);
        TokioResolver::builder_with_config(config, TokioConnectionProvider::default())
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.cache_size = 0;
    opts.timeout = Duration::from_secs(2);
    opts.attempts = 2;
    Ok(builder.build())
}

/// `name`'s addresses (`None`: failed, or none) and how long until it is
/// asked again.
async fn lookup(r: &TokioResolver, name: &str, policy: &DnsPolicy) -> (Option<Vec<IpAddr>>, Duration) {
    // A fully qualified name: no search domains tried after it.
    let fqdn = if name.ends_with('.') { name.to_string() } else { format!("{name}.") };
    match tokio::time::timeout(LOOKUP_TIMEOUT, r.lookup_ip(fqdn)).await {
        Ok(Ok(found)) => {
            let addrs: Vec<IpAddr> = found.iter().collect();
            let ttl = found.valid_until().saturating_duration_since(Instant::now());
            let ttl = ttl.clamp(policy.min_ttl, policy.max_ttl);
            if addrs.is_empty() {
                return (None, policy.min_ttl);
            }
            (Some(addrs), ttl)
        }
        Ok(Err(e)) => {
            tracing::warn!(name = %name, error = %e, "DNS lookup failed; keeping the last addresses");
            (None, policy.min_ttl)
        }
        Err(_) => {
            tracing::warn!(name = %name, "DNS lookup timed out; keeping the last addresses");
            (None, policy.min_ttl)
        }
    }
}
