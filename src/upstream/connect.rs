//! How the proxy connects to upstreams and peers: TCP (no Nagle) for
//! `http://` and `h2c://` (HTTP/2 with prior knowledge), rustls over it for
//! `https://` (ALPN `http/1.1`) and `h2://` (ALPN `h2`, which the server
//! must agree to), the server name from the URI, within the connect
//! timeout; settings fixed at start-up.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::Uri;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

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

/// Opens connections to upstreams and peers; cheap to clone.
#[derive(Clone)]
pub struct Connector {
    timeout: Duration,
    tls: TlsConnector,
    /// The same, offering `h2` alone.
    tls_h2: TlsConnector,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").field("timeout", &self.timeout).finish_non_exhaustive()
    }
}

/// The connector for `settings`: every scheme's endpoints alike.
pub fn connector(settings: &ClientSettings) -> Connector {
    let mut tls = match &settings.tls {
        Some(c) => (**c).clone(),
        None => crate::tls::client_config_or_closed(&crate::config::schema::UpstreamTls::default()),
    };
    let mut h2 = tls.clone();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    h2.alpn_protocols = vec![b"h2".to_vec()];
    Connector {
        timeout: settings.connect_timeout,
        tls: TlsConnector::from(Arc::new(tls)),
        tls_h2: TlsConnector::from(Arc::new(h2)),
    }
}

/// An open connection: TCP, or TLS over TCP.
#[derive(Debug)]
pub enum Stream {
    /// `http://`, `h2c://`.
    Tcp(TcpStream),
    /// `https://`, `h2://`.
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connector {
    /// Connects to the endpoint `uri` names (scheme, host and port; the
    /// default port of the scheme when it has none); TLS asks for
    /// `server_name` when the URI holds an address its name resolved to. The
    /// error is the whole story in one line ("tcp connect error: Connection
    /// refused (os error 111)").
    pub async fn connect(&self, uri: &Uri, server_name: Option<&str>) -> Result<Stream, String> {
        let (tls, alpn_h2) = match uri.scheme_str() {
            Some("https") => (true, false),
            Some("h2") => (true, true),
            Some("http" | "h2c") | None => (false, false),
            Some(other) => return Err(format!("unsupported scheme {other:?}")),
        };
        let host = uri.host().ok_or_else(|| format!("no host in {uri}"))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        // `[::1]` in a URI is `::1` to the resolver and to TLS.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let tcp = tokio::time::timeout(self.timeout, tcp(bare, port))
            .await
            .map_err(|_| format!("tcp connect error: timed out after {:?}", self.timeout))??;
        if !tls {
            return Ok(Stream::Tcp(tcp));
        }
        let asked = server_name.unwrap_or(bare);
        let name =
            ServerName::try_from(asked.to_owned()).map_err(|e| format!("invalid tls server name {asked:?}: {e}"))?;
        let handshake = if alpn_h2 { &self.tls_h2 } else { &self.tls }.connect(name, tcp);
        match tokio::time::timeout(self.timeout, handshake).await {
            Ok(Ok(s)) if alpn_h2 && s.get_ref().1.alpn_protocol() != Some(b"h2") => {
                Err("tls handshake error: the server did not agree to HTTP/2 (ALPN h2)".into())
            }
            Ok(Ok(s)) => Ok(Stream::Tls(Box::new(s))),
            Ok(Err(e)) => Err(format!("tls handshake error: {e}")),
            Err(_) => Err(format!("tls handshake error: timed out after {:?}", self.timeout)),
        }
    }
}

/// A TCP connection to `host:port`: an IP literal directly, a name through
/// the resolver, each address in turn until one answers.
async fn tcp(host: &str, port: u16) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host, port)).await.map_err(|e| format!("dns error: {host}: {e}"))?.collect(),
    };
    let mut last = format!("dns error: {host}: no addresses");
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("tcp connect error: {e}"),
        }
    }
    Err(last)
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
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
