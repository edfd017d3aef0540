//! The regional mesh: hop, loop and failover headers between shardgate peers.
//!
//! When the owner of an entity is another region, this instance forwards the
//! request to that region's shardgate, appending `Forwarded: by=_<instance>`
//! (RFC 7239, an obfuscated node name) and incrementing
//! `X-Shardgate-Hops`. A request that already names this instance in
//! `Forwarded`, or that would exceed the hop limit, is answered 508.
//!
//! When a region is down and fails over to a region served by another
//! shardgate, the request goes there with `X-Shardgate-Failover: <chain>`:
//! the owner first, then every failover region tried, the last one being the
//! region asked to serve. That shardgate serves it from its own backends, or
//! follows its region's `failover` on, never back to a region in the chain.
//!
//! A fan-out or search sends one leg to each region; a leg that goes to a
//! region's shardgate carries `X-Shardgate-Leg: <region>`: that shardgate
//! serves it from the region's own backends, as it is, and never fans it out,
//! searches for it or fails it over again (the asking instance merges, and
//! counts each region once).
//!
//! These headers, and the minted id a peer relays on a create route, are
//! honoured only from an authenticated peer ([`crate::server::ConnInfo::is_mesh_peer`]);
//! from anyone else they are removed before routing.

use http::{HeaderMap, HeaderName, HeaderValue};

/// The path on the proxy listener that a shardgate answers itself, for
/// its peers' health checks (the admin listener is usually loopback-only).
/// Requests to it never reach a backend.
pub const READY_PATH: &str = "/.shardgate/ready";

/// The hop counter header.
pub const HOPS: HeaderName = HeaderName::from_static("x-shardgate-hops");
/// Set by a peer that failed a region over to the receiving instance's
/// region: the failover chain (owner first, the region to serve last);
/// serve from here, do not place again.
pub const FAILOVER: HeaderName = HeaderName::from_static("x-shardgate-failover");
/// Set on a fan-out or search leg sent to a region's shardgate: the region
/// it is asked to serve from its own backends.
pub const LEG: HeaderName = HeaderName::from_static("x-shardgate-leg");
/// RFC 7239 `Forwarded`.
pub const FORWARDED: HeaderName = HeaderName::from_static("forwarded");
/// The epoch of the request's placement unit in the sender's table, when
/// the unit is being (or was) re-homed (`moves`).
pub const EPOCH: HeaderName = HeaderName::from_static("x-shardgate-epoch");
/// On a `421` from a peer whose table has a newer epoch for the unit: the
/// region that owns it now (the epoch goes in [`EPOCH`]).
pub const OWNER: HeaderName = HeaderName::from_static("x-shardgate-owner");
/// Every field the mesh sets, none of which a client may receive.
const MESH_FIELDS: [HeaderName; 6] = [HOPS, FORWARDED, FAILOVER, LEG, EPOCH, OWNER];

/// Mesh state of an incoming request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hops {
    /// Peer hops the request has taken so far.
    pub count: u32,
    /// Whether `Forwarded` already names this instance.
    pub seen_self: bool,
}

/// What an incoming request says about its way through the mesh.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Relay {
    /// Hops so far, and whether this instance is among them.
    pub hops: Hops,
    /// The failover chain a peer relayed (owner first; empty when none).
    pub chain: Vec<String>,
    /// The region a peer asked this instance to serve a fan-out or search leg from.
    pub leg: Option<String>,
    /// The epoch of the request's unit in the sender's table (0: none sent).
    pub epoch: u64,
}

impl Relay {
    /// Reads the hop headers and takes the failover and leg marks off
    /// `headers` (they are never passed on as they came).
    pub fn take(headers: &mut HeaderMap, node: &str) -> Relay {
        if !has_mesh_field(headers) {
            return Relay::default();
        }
        let leg = headers.remove(LEG).and_then(|v| v.to_str().ok().map(|s| s.trim().to_string()));
        let epoch = headers.remove(EPOCH).and_then(|v| crate::ids::parse_canonical_u64(v.to_str().ok()?)).unwrap_or(0);
        Relay { hops: inspect(headers, node), chain: take_failover(headers), leg, epoch }
    }

    /// The region a peer asked this instance to serve the request from: the
    /// chain's last region, when it is the one this instance serves. Such a
    /// request comes back legitimately (this instance may have sent it to
    /// the owner, whose backends are down).
    pub fn served_here(&self, table: &crate::routing::Table) -> Option<crate::routing::RegionId> {
        let last = table.region_by_name(self.chain.last()?)?;
        (Some(last) == table.local_region()).then_some(last)
    }
}

/// The `by=` node name for an instance: `_` + the name with characters
/// outside RFC 7239's obfnode alphabet replaced by `-`.
pub fn node_name(instance: &str) -> String {
    let mut out = String::with_capacity(instance.len() + 1);
    out.push('_');
    out.extend(
        instance.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '-' }),
    );
    out
}

/// Reads the hop count and looks for `by=<node>` in every `Forwarded` element.
/// A malformed hop count counts as the maximum (fail closed).
pub fn inspect(headers: &HeaderMap, node: &str) -> Hops {
    let count = match headers.get(&HOPS) {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(crate::ids::parse_canonical_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(u32::MAX),
    };
    let seen_self = headers
        .get_all(&FORWARDED)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split([',', ';']))
        .filter_map(|pair| pair.trim().split_once('='))
        .any(|(k, v)| k.trim().eq_ignore_ascii_case("by") && v.trim().trim_matches('"').eq_ignore_ascii_case(node));
    Hops { count, seen_self }
}

/// Marks a request that this instance forwards to a peer.
pub fn mark_forwarded(headers: &mut HeaderMap, node: &str, hops: u32) {
    if let Ok(v) = HeaderValue::from_str(&format!("by={node}")) {
        headers.append(FORWARDED, v);
    }
    headers.insert(HOPS, HeaderValue::from(hops));
}

/// Removes the mesh headers (`X-Shardgate-Hops`, `X-Shardgate-Failover`,
/// `X-Shardgate-Leg` and, unless `keep_forwarded`, every `Forwarded` field) from a request
/// whose connection is not an authenticated peer, so it is routed as a fresh
/// client request. `Forwarded` is kept from a `server.trusted_hops` proxy in
/// front, as `X-Forwarded-For` is. Returns whether any were present.
pub fn strip_from_request(headers: &mut HeaderMap, keep_forwarded: bool) -> bool {
    if !has_mesh_field(headers) {
        return false;
    }
    let hops = headers.remove(HOPS).is_some();
    let forwarded = !keep_forwarded && headers.remove(FORWARDED).is_some();
    let failover = headers.remove(FAILOVER).is_some();
    let leg = headers.remove(LEG).is_some();
    let epoch = headers.remove(EPOCH).is_some();
    let owner = headers.remove(OWNER).is_some();
    hops || forwarded || failover || leg || epoch || owner
}

/// Marks a fan-out or search leg to `region`'s shardgate: serve it there, as it is.
pub fn mark_leg(headers: &mut HeaderMap, region: &str) {
    if let Ok(v) = HeaderValue::from_str(region) {
        headers.insert(LEG, v);
    }
}

/// Marks a request failed over through a peer with the failover `chain`
/// (the owner first, the region the peer is asked to serve from last): the
/// peer serves it from its own backends, or follows the chain on, instead of
/// placing it again.
pub fn mark_failover<'a>(headers: &mut HeaderMap, chain: impl IntoIterator<Item = &'a str>) {
    let text = chain.into_iter().collect::<Vec<_>>().join(", ");
    if let Ok(v) = HeaderValue::from_str(&text) {
        headers.insert(FAILOVER, v);
    }
}

/// Removes the failover mark and returns its chain of region names (empty
/// when there was none; a single name is a chain of one).
pub fn take_failover(headers: &mut HeaderMap) -> Vec<String> {
    let Some(v) = headers.remove(FAILOVER) else { return Vec::new() };
    let Ok(text) = v.to_str() else { return Vec::new() };
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// Whether any mesh field is present: a look at each name, much cheaper
/// than the hashed removals it spares on the common request, which has none.
fn has_mesh_field(headers: &HeaderMap) -> bool {
    headers.keys().any(|n| MESH_FIELDS.contains(n))
}

/// Whether `name` (as sent, any case) is a mesh field, which a peer's
/// response must not carry to a client.
pub fn is_mesh_field(name: &[u8]) -> bool {
    MESH_FIELDS.iter().any(|m| name.eq_ignore_ascii_case(m.as_str().as_bytes()))
}

/// Marks a forward with the epoch of its unit in this instance's table.
pub fn mark_epoch(headers: &mut HeaderMap, epoch: u64) {
    headers.insert(EPOCH, HeaderValue::from(epoch));
}

/// Removes mesh headers a peer put on its response before it reaches a client.
pub fn strip_from_response(headers: &mut HeaderMap) {
    if !has_mesh_field(headers) {
        return;
    }
    for name in MESH_FIELDS {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_itself_in_forwarded() {
        let mut h = HeaderMap::new();
        h.append(FORWARDED, HeaderValue::from_static("for=1.2.3.4;by=_gw-kz"));
        h.append(FORWARDED, HeaderValue::from_static("by=\"_gw-eu\", for=5.6.7.8"));
        h.insert(HOPS, HeaderValue::from_static("2"));
        assert_eq!(inspect(&h, "_gw-eu"), Hops { count: 2, seen_self: true });
        assert_eq!(inspect(&h, "_gw-us"), Hops { count: 2, seen_self: false });
        h.insert(HOPS, HeaderValue::from_static("+1"));
        assert_eq!(inspect(&h, "_gw-us").count, u32::MAX);
    }

    #[test]
    fn failover_chains_round_trip() {
        let mut h = HeaderMap::new();
        assert!(take_failover(&mut h).is_empty());
        mark_failover(&mut h, ["kz", "eu"]);
        assert_eq!(h.get(FAILOVER).map(|v| v.as_bytes()), Some(&b"kz, eu"[..]));
        assert_eq!(take_failover(&mut h), ["kz", "eu"]);
        assert!(h.get(FAILOVER).is_none());
        h.insert(FAILOVER, HeaderValue::from_static("eu"));
        assert_eq!(take_failover(&mut h), ["eu"]);
    }

    #[test]
    fn node_names_are_obfuscated_tokens() {
        assert_eq!(node_name("gw eu/1"), "_gw-eu-1");
    }
}
