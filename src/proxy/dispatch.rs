//! Dispatch: which endpoints a placed request goes to. The owner region's
//! backends, or its shardgate when the owner is another region (or has no
//! backends of its own); when none of those is usable, the owner's failover
//! region, and that one's, along the chain (reads always, writes only where
//! the route allows), never a region already in the chain; else 503.
//!
//! Pure but for the endpoints' health, which it reads.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use http::Uri;

use super::error::ProxyError;
use crate::routing::{Balance, Region, RegionId, Table, Upstream};
use crate::upstream::balance::Candidates;
use crate::upstream::{Health, Limits};

/// A request's failover chain, the owner first: a region or two, kept
/// inline (a `Vec` was an allocation on every request).
pub type Chain = smallvec::SmallVec<[RegionId; 8]>;

/// The endpoints a request is sent to.
#[derive(Debug)]
pub struct Target<'t> {
    /// The region that serves it.
    pub region: &'t Region,
    /// Its id.
    pub id: RegionId,
    /// Its backends, or its peer shardgate alone.
    pub endpoints: &'t [Upstream],
    /// Whether `endpoints` is the region's peer shardgate.
    pub via_peer: bool,
    /// Requests waiting at each backend (empty for a peer).
    pub loads: &'t [Arc<AtomicUsize>],
    /// The region's round-robin turn among `endpoints`.
    pub turn: &'t AtomicUsize,
    /// The region's limits per endpoint.
    pub limits: Limits,
}

impl<'t> Target<'t> {
    /// The endpoints as a request picks among them: a region's backends by
    /// its balance, a peer alone.
    pub fn candidates(&self) -> Candidates<'t> {
        if self.via_peer {
            let (weights, loads) = (&[], &[]);
            return Candidates {
                endpoints: self.endpoints,
                weights,
                loads,
                balance: Balance::RoundRobin,
                turn: self.turn,
            };
        }
        let (region, turn) = (self.region, self.turn);
        Candidates {
            endpoints: self.endpoints,
            weights: &region.weights,
            loads: self.loads,
            balance: region.balance,
            turn,
        }
    }

    /// What the trace says of attempt `number` at `endpoint` of this
    /// target; `retry_reason`: why the attempt before failed.
    pub fn attempt<'a>(
        &'a self,
        method: &'a http::Method,
        endpoint: &'a Uri,
        number: u32,
        retry_reason: Option<&'a str>,
    ) -> crate::telemetry::traces::Attempt<'a> {
        let region = self.region.name.as_str();
        crate::telemetry::traces::Attempt { method, endpoint, region, number, peer: self.via_peer, retry_reason }
    }
}

/// Where a request whose failover `chain` (the owner first) ends in the
/// region to try goes. Endpoints in `tried` (by their
/// [`Upstream::pool_key`]: failed earlier for this request) do not count.
/// When the last region of the chain has no usable endpoint, its failover
/// region is appended and tried in turn, if `can_fail_over`.
pub fn dispatch<'t>(
    table: &'t Table,
    health: &Health,
    chain: &mut Chain,
    can_fail_over: bool,
    tried: &[&str],
) -> Result<Target<'t>, ProxyError> {
    let owner = chain.first().copied().unwrap_or(RegionId(0));
    let usable = |u: &Upstream| !tried.contains(&&*u.pool_key) && health.usable(&u.pool_key);
    while let Some(&id) = chain.last() {
        let region = table.region(id);
        let limits = table.upstream_of(id).limits;
        let remote = table.local_region().is_some_and(|local| local != id);
        let peers = table.peers(id);
        if (remote || region.upstreams.is_empty()) && peers.iter().any(usable) {
            let turn = table.turn(id, true);
            return Ok(Target { region, id, endpoints: peers, via_peer: true, loads: &[], turn, limits });
        }
        if region.upstreams.iter().any(usable) {
            let (loads, turn) = (table.loads(id), table.turn(id, false));
            return Ok(Target { region, id, endpoints: &region.upstreams, via_peer: false, loads, turn, limits });
        }
        match table.failover(id) {
            Some(next) if can_fail_over && !chain.contains(&next) => chain.push(next),
            _ => break,
        }
    }
    Err(ProxyError::RegionUnavailable { region: table.region(owner).name.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    /// kz → eu → us, each with one backend and a peer; `region` served here.
    fn table(region: &str) -> Result<Table, crate::config::ConfigErrors> {
        let text = format!(
            r#"version: 1
region: {region}
regions:
  eu: {{ upstreams: ["http://10.0.0.1:80"], peer: "http://10.1.0.1:80", failover: us }}
  kz: {{ upstreams: ["http://10.0.0.2:80"], peer: "http://10.1.0.2:80", failover: eu }}
  us: {{ upstreams: ["http://10.0.0.3:80"], peer: "http://10.1.0.3:80" }}
routes: []
"#
        );
        Ok(Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    fn id(t: &Table, name: &str) -> Result<RegionId, String> {
        t.region_by_name(name).ok_or_else(|| format!("no region {name}"))
    }

    /// A health state that knows `t`'s endpoints, with those in `down` ejected.
    fn health(t: &Table, down: &[&str]) -> Health {
        let h = Health::default();
        h.track_table(t);
        for key in down {
            h.record(key, true, false, 1, Duration::from_secs(60));
        }
        h
    }

    #[test]
    fn local_backends_then_peers_then_the_failover_chain() -> TestResult {
        let t = table("kz")?;
        let (kz, eu, us) = (id(&t, "kz")?, id(&t, "eu")?, id(&t, "us")?);
        // The owner is local: its backends.
        let target = dispatch(&t, &health(&t, &[]), &mut Chain::from_slice(&[kz]), true, &[])?;
        assert_eq!((target.region.name.as_str(), target.via_peer), ("kz", false));
        // The owner is remote: its peer.
        let target = dispatch(&t, &health(&t, &[]), &mut Chain::from_slice(&[us]), true, &[])?;
        assert_eq!((target.region.name.as_str(), target.via_peer), ("us", true));
        // kz's backend is down: eu's peer, and the chain says so.
        let mut chain = Chain::from_slice(&[kz]);
        let target = dispatch(&t, &health(&t, &["http://10.0.0.2:80"]), &mut chain, true, &[])?;
        assert_eq!((target.region.name.as_str(), target.via_peer), ("eu", true));
        assert_eq!(chain.as_slice(), [kz, eu]);
        // Tried endpoints count as down; a write that may not fail over gets 503.
        let tried = [&*t.region(kz).upstreams[0].pool_key];
        let err = dispatch(&t, &health(&t, &[]), &mut Chain::from_slice(&[kz]), false, &tried);
        assert!(matches!(err, Err(ProxyError::RegionUnavailable { region }) if region == "kz"));
        Ok(())
    }

    #[test]
    fn a_chain_never_comes_back_to_a_region_in_it() -> TestResult {
        let t = table("eu")?;
        let (kz, eu, us) = (id(&t, "kz")?, id(&t, "eu")?, id(&t, "us")?);
        // Relayed to eu as [kz, eu]; eu's backend is down: on to us's peer.
        let h = health(&t, &["http://10.0.0.1:80"]);
        let mut chain = Chain::from_slice(&[kz, eu]);
        let target = dispatch(&t, &h, &mut chain, true, &[])?;
        assert_eq!((target.region.name.as_str(), target.via_peer), ("us", true));
        // us's peer down too: us has its own backend listed, which serves.
        let h = health(&t, &["http://10.0.0.1:80", "http://10.1.0.3:80"]);
        let target = dispatch(&t, &h, &mut Chain::from_slice(&[kz, eu]), true, &[])?;
        assert_eq!((target.region.name.as_str(), target.via_peer), ("us", false));
        // Everything down: 503 naming the owner, after trying each region once.
        let all = ["http://10.0.0.1:80", "http://10.0.0.3:80", "http://10.1.0.3:80"];
        let mut chain = Chain::from_slice(&[kz, eu]);
        let err = dispatch(&t, &health(&t, &all), &mut chain, true, &[]);
        assert!(matches!(err, Err(ProxyError::RegionUnavailable { region }) if region == "kz"));
        assert_eq!(chain.as_slice(), [kz, eu, us]);
        Ok(())
    }
}
