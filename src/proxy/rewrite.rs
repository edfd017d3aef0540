//! Rewrite: the request target the upstream is asked for, when the route
//! says it is not the client's (`rewrite`). Routing, the access log and the
//! trace keep what the client sent; only what is forwarded changes.
//!
//! ```text
//!  strip_prefix: /api     /api/v1/orders/7?x=1  ─►  /v1/orders/7?x=1
//!  path: /v2/{id}         /v1/orders/7?x=1      ─►  /v2/7?x=1
//!  query: drop            /v1/orders/7?x=1      ─►  /v1/orders/7
//! ```
//!
//! The path is the one routing matched (dot segments already removed) and
//! a parameter goes in as it was sent, percent-encoding and all. Only the
//! backends are asked for the rewritten target: a peer shardgate is sent
//! the client's, which it routes (and rewrites) itself.

use http::uri::{PathAndQuery, Uri};
use http::Method;

use super::error::ProxyError;
use crate::routing::{Rewrite, RewritePath, Table};

/// The target `rule` makes of a request for `uri` with `method`; a
/// template's parameters are the route's match of the path in `table`.
pub fn target(table: &Table, rule: &Rewrite, method: &Method, uri: &Uri) -> Result<PathAndQuery, ProxyError> {
    let path = uri.path();
    let mut target = match &rule.path {
        RewritePath::Same => path.to_string(),
        RewritePath::StripPrefix(prefix) => match path.strip_prefix(prefix.as_str()) {
            Some("") => "/".to_string(),
            Some(rest) if rest.starts_with('/') => rest.to_string(),
            // Not under the prefix (a path route's path): as it is.
            _ => path.to_string(),
        },
        RewritePath::Template(template) => {
            let matched = table.match_route(method, path);
            template.fill(|name| matched.as_ref().and_then(|m| m.params.get(name)))
        }
    };
    if let (true, Some(query)) = (rule.keep_query, uri.query()) {
        target.push('?');
        target.push_str(query);
    }
    PathAndQuery::try_from(target.as_str())
        .map_err(|_| ProxyError::Rewrite { detail: format!("{} is not a path", super::error::quote(&target)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(routes: &str) -> Result<Table, crate::config::ConfigErrors> {
        let text = format!(
            "version: 1\nregions: {{ eu: {{ upstreams: [\"http://127.0.0.1:1\"] }} }}\ndefault_region: eu\nroutes:\n{routes}"
        );
        Ok(Table::compile(&crate::config::load_str(&text, "t.yaml")?))
    }

    fn rewritten(t: &Table, uri: &str) -> Result<String, Box<dyn std::error::Error>> {
        let uri: Uri = uri.parse()?;
        let route = t.match_route(&Method::GET, uri.path()).ok_or("no route")?.route;
        let rule = route.rewrite.as_ref().ok_or("no rewrite")?;
        Ok(target(t, rule, &Method::GET, &uri)?.to_string())
    }

    #[test]
    fn prefixes_are_stripped_templates_filled_and_queries_kept_or_dropped() -> Result<(), Box<dyn std::error::Error>> {
        let t = table(
            r#"  - { name: api, match: { prefix: "/api/" }, to: local, rewrite: { strip_prefix: /api } }
  - { name: v2, match: { path: "/v1/orders/{id}" }, to: local, rewrite: { path: "/v2/{id}/x", query: drop } }
  - { name: files, match: { prefix: "/files/" }, to: local, rewrite: { path: "/blobs/{rest}" } }
"#,
        )?;
        assert_eq!(rewritten(&t, "/api/v1/orders/7?x=1")?, "/v1/orders/7?x=1");
        assert_eq!(rewritten(&t, "/api")?, "/");
        assert_eq!(rewritten(&t, "/api/")?, "/");
        assert_eq!(rewritten(&t, "/v1/orders/a%2Fb?x=1")?, "/v2/a%2Fb/x");
        assert_eq!(rewritten(&t, "/files/a/b%20c.txt?v=2")?, "/blobs/a/b%20c.txt?v=2");
        assert_eq!(rewritten(&t, "/files/")?, "/blobs/");
        Ok(())
    }
}
