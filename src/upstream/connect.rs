//! How the proxy connects to upstreams and peers: plain TCP for `http://`,
//! rustls for `https://` (HTTP/1.1 by ALPN), with the settings fixed at
//! start-up.

use std::sync::Arc;
use std::time::Duration;

use http::Uri;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;

/// The connector of every upstream and peer client: plain TCP for
/// `http://`, rustls for `https://` (HTTP/1.1 by ALPN).
pub type Connector = HttpsConnector<HttpConnector>;

/// Client settings fixed at start-up (changing them needs a restart).
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// How long idle pooled connections are kept.
    pub pool_idle_timeout: Duration,
    /// TLS for `https://` endpoints; `None`: the system roots, no client certificate.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// The connector for `settings`: `http://` and `https://` endpoints alike.
pub fn connector(settings: &ClientSettings) -> Connector {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(settings.connect_timeout));
    http.set_nodelay(true);
    // The TLS layer sees `https://` URIs only if the TCP layer lets them through.
    http.enforce_http(false);
    let tls = match &settings.tls {
        Some(c) => (**c).clone(),
        None => crate::tls::client_config_or_closed(&crate::config::schema::UpstreamTls::default()),
    };
    HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().wrap_connector(http)
}

/// `endpoint` (scheme and authority) joined with the request's path and query.
pub(crate) fn upstream_uri(endpoint: &Uri, path_and_query: &str) -> Result<Uri, http::Error> {
    let mut b = Uri::builder();
    if let Some(s) = endpoint.scheme() {
        b = b.scheme(s.clone());
    }
    if let Some(a) = endpoint.authority() {
        b = b.authority(a.clone());
    }
    b.path_and_query(path_and_query).build()
}
