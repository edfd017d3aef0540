//! The keys a reload cannot change: read once at start-up (listeners, TLS,
//! connection limits, the upstream connector, the minting node), or naming
//! this instance. A reload that changes one reports it as "needs restart"
//! and keeps the running value; this list is the one the code, `/reload`'s
//! `needs_restart` and `docs/config.md` go by (a test compares them).

use serde_json::Value;

use super::model::Config;

/// Every restart-only key, as a YAML path.
pub const RESTART_ONLY: [&str; 17] = [
    "listen",
    "admin",
    "region",
    "instance",
    "ids.locality",
    "server.tls",
    "server.header_read_timeout",
    "server.idle_timeout",
    "server.max_header_bytes",
    "server.max_headers",
    "server.max_connections",
    "server.admin_max_connections",
    "upstream.tls",
    "upstream.connect_timeout",
    "upstream.pool_idle_timeout",
    "search_cache.capacity",
    "telemetry",
];

/// The values of [`RESTART_ONLY`] in `cfg`, in that order (`instance` as
/// resolved, so leaving out a key that names its default changes nothing).
pub fn values(cfg: &Config) -> Vec<Value> {
    let file = serde_json::to_value(&cfg.file).unwrap_or(Value::Null);
    RESTART_ONLY
        .iter()
        .map(|key| match *key {
            "instance" => Value::String(cfg.instance.clone()),
            _ => file.pointer(&format!("/{}", key.replace('.', "/"))).cloned().unwrap_or(Value::Null),
        })
        .collect()
}

/// The restart-only keys whose values differ between `running` and `new`
/// (both from [`values`]).
pub fn changed(running: &[Value], new: &[Value]) -> Vec<&'static str> {
    RESTART_ONLY.iter().zip(running.iter().zip(new)).filter(|(_, (a, b))| a != b).map(|(k, _)| *k).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(extra: &str) -> Result<Config, crate::config::ConfigErrors> {
        let text =
            format!("version: 1\nregions: {{ eu: {{ upstreams: [\"http://127.0.0.1:1\"] }} }}\n{extra}routes: []\n");
        crate::config::load_str(&text, "t.yaml")
    }

    #[test]
    fn changes_to_restart_only_keys_are_found() -> Result<(), crate::config::ConfigErrors> {
        let base = values(&load("")?);
        assert!(changed(&base, &base).is_empty());
        for (extra, key) in [
            ("listen: 127.0.0.1:1234\n", "listen"),
            ("instance: gw\n", "instance"),
            ("server: { idle_timeout: 5s }\n", "server.idle_timeout"),
            ("server: { tls: { cert: a, key: b } }\n", "server.tls"),
            ("upstream: { connect_timeout: 1s }\n", "upstream.connect_timeout"),
            ("ids: { locality: { pid: 7 } }\n", "ids.locality"),
        ] {
            assert_eq!(changed(&base, &values(&load(extra)?)), [key], "{extra}");
        }
        // Reloadable keys are not reported.
        assert!(changed(&base, &values(&load("server: { max_uri_bytes: 100 }\nlog: { ids: true }\n")?)).is_empty());
        Ok(())
    }
}
