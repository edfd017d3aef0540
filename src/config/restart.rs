//! The keys a reload cannot change: read once at start-up (listeners, TLS,
//! connection limits, the upstream connector, the minting node, the trace
//! exporter, the search cache's size), or naming this instance. A reload
//! that changes one applies everything else, keeps the running value of
//! these and reports them as "needs restart".
//!
//! [`RestartOnly`] holds their values, typed; the list of keys, the
//! comparison and the keeping of running values are all derived from its
//! one declaration below, so none can drift from another (and
//! `docs/config.md` is compared with [`RESTART_ONLY`] by a test).

use std::net::SocketAddr;
use std::time::Duration;

use super::schema::{ServerTls, Telemetry, UpstreamTls};
use crate::ids::{LocalityMode, NodeIdentity};

/// How minted Locality UUIDs name their node (`ids.locality`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Locality {
    /// The node identity written into minted ids, when configured.
    pub node: Option<NodeIdentity>,
    /// The counter mode.
    pub mode: LocalityMode,
}

/// Declares [`RestartOnly`], one field per key, and everything derived
/// from that one list.
macro_rules! restart_only {
    ($($(#[doc = $doc:literal])* $field:ident: $ty:ty => $key:literal,)*) => {
        /// The values of every restart-only key, as the table gives them.
        #[derive(Clone, Debug, PartialEq)]
        pub struct RestartOnly {
            $($(#[doc = $doc])* pub $field: $ty,)*
        }

        /// Every restart-only key, as a YAML path, in declaration order.
        pub const RESTART_ONLY: &[&str] = &[$($key),*];

        impl RestartOnly {
            /// The keys whose values differ between `self` (running) and `new`.
            pub fn changed(&self, new: &RestartOnly) -> Vec<&'static str> {
                let mut keys = Vec::new();
                $(if self.$field != new.$field {
                    keys.push($key);
                })*
                keys
            }
        }
    };
}

restart_only! {
    /// The proxy listener.
    listen: SocketAddr => "listen",
    /// The admin listener.
    admin: SocketAddr => "admin",
    /// The region this instance serves, by name.
    region: Option<String> => "region",
    /// This instance's name (resolved: a default changes nothing).
    instance: String => "instance",
    /// The node of minted Locality UUIDs.
    locality: Locality => "ids.locality",
    /// TLS on the proxy listener.
    server_tls: Option<ServerTls> => "server.tls",
    /// Time to receive a request head.
    header_read_timeout: Duration => "server.header_read_timeout",
    /// Client connection idle timeout.
    idle_timeout: Duration => "server.idle_timeout",
    /// The rate a client must take what is sent to it.
    answer_min_rate: u64 => "server.answer_min_rate",
    /// Largest request head.
    max_header_bytes: usize => "server.max_header_bytes",
    /// Most request header fields.
    max_headers: usize => "server.max_headers",
    /// Most client connections.
    max_connections: usize => "server.max_connections",
    /// Most admin connections.
    admin_max_connections: usize => "server.admin_max_connections",
    /// The proxy listener's pending-connection queue.
    backlog: u32 => "server.backlog",
    /// Room for the answers fan-outs hold.
    fanout_buffer_bytes: usize => "server.fanout_buffer_bytes",
    /// TLS to upstreams and peers.
    upstream_tls: UpstreamTls => "upstream.tls",
    /// Upstream connect timeout.
    connect_timeout: Duration => "upstream.connect_timeout",
    /// How long idle upstream connections are kept.
    pool_idle_timeout: Duration => "upstream.pool_idle_timeout",
    /// Most ids the search cache holds.
    search_cache_capacity: usize => "search_cache.capacity",
    /// Traces.
    telemetry: Telemetry => "telemetry",
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(extra: &str) -> Result<RestartOnly, crate::config::ConfigErrors> {
        let text =
            format!("version: 1\nregions: {{ eu: {{ upstreams: [\"http://127.0.0.1:1\"] }} }}\n{extra}routes: []\n");
        Ok(crate::config::load_str(&text, "t.yaml")?.settings.restart)
    }

    #[test]
    fn changes_to_restart_only_keys_are_found() -> Result<(), crate::config::ConfigErrors> {
        let base = load("")?;
        assert!(base.changed(&base).is_empty());
        for (extra, key) in [
            ("listen: 127.0.0.1:1234\n", "listen"),
            ("instance: gw\n", "instance"),
            ("region: eu\ninstance: shardgate\n", "region"),
            ("server: { idle_timeout: 5s }\n", "server.idle_timeout"),
            ("server: { tls: { cert: a, key: b } }\n", "server.tls"),
            ("server: { backlog: 100 }\n", "server.backlog"),
            ("upstream: { connect_timeout: 1s }\n", "upstream.connect_timeout"),
            ("ids: { locality: { pid: 7 } }\n", "ids.locality"),
            ("search_cache: { capacity: 5 }\n", "search_cache.capacity"),
            ("telemetry: { sample_ratio: 0.5 }\n", "telemetry"),
        ] {
            assert_eq!(base.changed(&load(extra)?), [key], "{extra}");
        }
        // Naming the default instance name changes nothing; reloadable keys are not reported.
        assert!(base.changed(&load("instance: shardgate\n")?).is_empty());
        assert!(base.changed(&load("server: { max_uri_bytes: 100 }\nlog: { ids: true }\n")?).is_empty());
        Ok(())
    }
}
