//! The addresses the host names of a table's endpoints resolved to (DNS
//! discovery): a table compiled with them has one endpoint per address of
//! a named backend or peer ([`super::Table::compile_with`]); a name not
//! (yet) resolved stays one endpoint, which the connector resolves when it
//! connects.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::config::values::Upstream;

/// Addresses by host name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    by_name: BTreeMap<String, Vec<IpAddr>>,
}

impl Resolved {
    /// No names resolved.
    pub fn none() -> Resolved {
        Resolved::default()
    }

    /// The addresses of `name`, sorted, when it resolved to any.
    pub fn get(&self, name: &str) -> Option<&[IpAddr]> {
        self.by_name.get(name).map(Vec::as_slice).filter(|a| !a.is_empty())
    }

    /// Sets `name`'s addresses; whether they changed.
    pub fn set(&mut self, name: &str, mut addrs: Vec<IpAddr>) -> bool {
        addrs.sort_unstable();
        addrs.dedup();
        if self.by_name.get(name) == Some(&addrs) {
            return false;
        }
        self.by_name.insert(name.to_string(), addrs);
        true
    }

    /// Keeps only the names in `names` (a reload dropped the rest).
    pub fn retain(&mut self, names: &[String]) {
        self.by_name.retain(|n, _| names.contains(n));
    }

    /// `endpoint` as the endpoints it stands for: one per address of its
    /// name, or itself (an address, or a name not resolved).
    pub fn expand(&self, endpoint: &Upstream) -> Vec<Upstream> {
        if !endpoint.is_named() {
            return vec![endpoint.clone()];
        }
        match self.get(endpoint.bare_host()) {
            Some(addrs) => addrs.iter().filter_map(|&ip| endpoint.at(ip)).collect(),
            None => vec![endpoint.clone()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_endpoint_stands_for_each_of_its_addresses() -> Result<(), String> {
        let named = Upstream::parse("https://api.internal:8443")?;
        let mut r = Resolved::none();
        assert_eq!(r.expand(&named), std::slice::from_ref(&named));
        assert!(
            r.set("api.internal", vec!["10.0.0.2".parse().map_err(|_| "ip")?, "10.0.0.1".parse().map_err(|_| "ip")?])
        );
        assert!(
            !r.set("api.internal", vec!["10.0.0.1".parse().map_err(|_| "ip")?, "10.0.0.2".parse().map_err(|_| "ip")?])
        );
        let each = r.expand(&named);
        let uris: Vec<String> = each.iter().map(|e| e.uri.to_string()).collect();
        assert_eq!(uris, ["https://10.0.0.1:8443/", "https://10.0.0.2:8443/"]);
        assert!(each.iter().all(|e| e.host == "api.internal:8443" && e.server_name.as_deref() == Some("api.internal")));
        let literal = Upstream::parse("http://10.9.9.9:80")?;
        assert_eq!(r.expand(&literal), [literal]);
        Ok(())
    }
}
