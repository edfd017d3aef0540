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

/// What one name's lookup found: its addresses (`None`: failed, or none)
/// and how long until it is asked again.
type Found = (Option<Vec<IpAddr>>, Duration);

/// Discovery's state between rounds.
#[derive(Default)]
struct Discovery {
    /// The resolver, and the servers it asks.
    resolver: Option<(Vec<std::net::SocketAddr>, TokioResolver)>,
    /// When each name is asked again.
    due: HashMap<String, Instant>,
    /// The addresses found.
    resolved: Resolved,
    /// The lookups out, and each one's name by its task.
    lookups: tokio::task::JoinSet<Found>,
    out: HashMap<tokio::task::Id, String>,
}

impl Discovery {
    /// Starts a lookup of each of `names` that is due and not out already.
    fn ask(&mut self, names: &[String], r: &TokioResolver, policy: &DnsPolicy) {
        let now = Instant::now();
        let due: Vec<&String> = names.iter().filter(|n| self.due.get(*n).is_none_or(|t| *t <= now)).collect();
        for name in due {
            if self.out.values().any(|out| out == name) {
                continue;
            }
            let (r, asked, policy) = (r.clone(), name.clone(), policy.clone());
            let task = self.lookups.spawn(async move { lookup(&r, &asked, &policy).await });
            self.out.insert(task.id(), name.clone());
            // Not due again while it is out (its end sets when it is).
            self.due.insert(name.clone(), now + LOOKUP_TIMEOUT);
        }
    }

    /// Applies one lookup's end; whether a name of `names` has new addresses.
    fn answered(
        &mut self,
        done: Result<(tokio::task::Id, Found), tokio::task::JoinError>,
        names: &[String],
        (stats, min_ttl): (&DnsStats, Duration),
    ) -> bool {
        let id = done.as_ref().map_or_else(tokio::task::JoinError::id, |(id, _)| *id);
        let Some(name) = self.out.remove(&id) else { return false };
        let (addrs, ttl) = done.map_or((None, min_ttl), |(_, found)| found);
        self.due.insert(name.clone(), Instant::now() + ttl);
        if !names.contains(&name) {
            return false;
        }
        let Some(addrs) = addrs else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            return false;
        };
        stats.answered.fetch_add(1, Ordering::Relaxed);
        let changed = self.resolved.set(&name, addrs.clone());
        if changed {
            stats.changed.fetch_add(1, Ordering::Relaxed);
            tracing::info!(name = %name, addresses = ?addrs, "named endpoint resolved to new addresses");
        }
        changed
    }

    /// The resolver for `policy`'s servers, built anew when they changed.
    fn resolver(&mut self, policy: &DnsPolicy) -> Result<TokioResolver, String> {
        match &self.resolver {
            Some((servers, r)) if *servers == policy.servers => Ok(r.clone()),
            _ => {
                let r = build(policy)?;
                self.resolver = Some((policy.servers.clone(), r.clone()));
                Ok(r)
            }
        }
    }
}

/// Resolves the table's named endpoints until `shared` is dropped. Each
/// name is looked up on its own schedule, side by side with the others,
/// and its answer applied as it comes: a name whose server does not answer
/// (one region's resolver down) delays no other name's refresh.
pub fn spawn_discovery(shared: Weak<SharedTable>, stats: std::sync::Arc<DnsStats>) {
    tokio::spawn(async move {
        let mut d = Discovery::default();
        loop {
            let Some(table) = shared.upgrade() else { return };
            let snapshot = table.snapshot();
            let names = snapshot.table.names().to_vec();
            let policy = snapshot.table.settings().dns.clone();
            drop(snapshot);
            drop(table);
            if !names.is_empty() {
                match d.resolver(&policy) {
                    Ok(r) => d.ask(&names, &r, &policy),
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the DNS resolver; named endpoints are resolved as they are connected to");
                        tokio::time::sleep(policy.min_ttl.max(Duration::from_secs(1))).await;
                        continue;
                    }
                }
            }
            let before = d.resolved.clone();
            d.resolved.retain(&names);
            d.due.retain(|n, _| names.contains(n));
            let mut changed = before != d.resolved;
            let now = Instant::now();
            let next = d.due.values().min().copied().unwrap_or(now + Duration::from_secs(1));
            // New names in a reloaded table are looked at within a second.
            let wake = next.min(now + Duration::from_secs(1)).max(now + Duration::from_millis(50));
            let sleep = tokio::time::sleep_until(wake.into());
            tokio::pin!(sleep);
            // Until the next name is due, each answer as it comes.
            loop {
                if std::mem::take(&mut changed) {
                    let Some(table) = shared.upgrade() else { return };
                    // Compiled on a blocking thread: it may also wait for
                    // a reload's compile, which holds the addresses' lock.
                    let resolved = d.resolved.clone();
                    let _ = tokio::task::spawn_blocking(move || table.refresh_addresses(resolved)).await;
                }
                tokio::select! {
                    () = &mut sleep => break,
                    Some(done) = d.lookups.join_next_with_id() => {
                        changed = d.answered(done, &names, (&stats, policy.min_ttl));
                    }
                }
            }
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
