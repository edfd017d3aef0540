//! TLS on real sockets: the proxy listener (ALPN h2 and http/1.1,
//! certificate reload from disk), `https://` upstreams trusting a configured
//! CA with pooled connections, and a three-instance mesh over mutual TLS in
//! which only peers with a trusted client certificate may use the mesh
//! headers. Every certificate is generated here (rcgen); no key is committed.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use shardgate::ids::Iuid;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::support::{proxy, proxy_on, table, three_backends, three_listeners, BoxError, Got, TestResult};

/// A test certificate authority.
pub(crate) struct Ca {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A leaf certificate and its key, PEM and DER.
pub(crate) struct Leaf {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    der: CertificateDer<'static>,
}

impl Ca {
    pub(crate) fn new(name: &str) -> Result<Ca, BoxError> {
        let mut p = CertificateParams::new(Vec::<String>::new())?;
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        Ok(Ca { issuer: CertifiedIssuer::self_signed(p, KeyPair::generate()?)? })
    }

    pub(crate) fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A certificate for 127.0.0.1 and localhost, usable by a server and a client.
    pub(crate) fn leaf(&self, cn: &str) -> Result<Leaf, BoxError> {
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        p.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = p.signed_by(&key, &self.issuer)?;
        Ok(Leaf { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().clone() })
    }
}

/// Writes `text` to `dir/name` atomically (temporary file, then rename),
/// as certificate rotation tools do; returns the path.
pub(crate) fn write(dir: &Path, name: &str, text: &str) -> Result<String, BoxError> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path.to_str().ok_or("temporary path is not utf-8")?.to_string())
}

/// Paths of one instance's certificate and key, written under `dir`.
pub(crate) fn write_leaf(dir: &Path, stem: &str, leaf: &Leaf) -> Result<(String, String), BoxError> {
    Ok((write(dir, &format!("{stem}.crt"), &leaf.cert_pem)?, write(dir, &format!("{stem}.key"), &leaf.key_pem)?))
}

/// A client configuration trusting `ca`, presenting `client` when given, offering `alpn`.
pub(crate) fn client_config(ca: &Ca, client: Option<&Leaf>, alpn: &[&[u8]]) -> Result<ClientConfig, BoxError> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.issuer.der().clone())?;
    let builder = ClientConfig::builder_with_provider(shardgate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
    let mut cfg = match client {
        Some(l) => {
            builder.with_client_auth_cert(vec![l.der.clone()], PrivateKeyDer::from_pem_slice(l.key_pem.as_bytes())?)?
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(cfg)
}

/// A pooled hyper-util HTTPS client speaking HTTP/1.1 or (by ALPN) h2 only.
fn https_client(cfg: ClientConfig, h2: bool) -> Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
    let builder = HttpsConnectorBuilder::new().with_tls_config(cfg).https_only();
    let connector = if h2 { builder.enable_http2().build() } else { builder.enable_http1().build() };
    Client::builder(TokioExecutor::new()).http2_only(h2).build(connector)
}

async fn read_all(resp: Response<Incoming>) -> Result<Got, BoxError> {
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(Duration::from_secs(10), body.collect()).await??.to_bytes();
    Ok(Got { status: parts.status, headers: parts.headers, body })
}

/// GET `url` with `client`, checking the HTTP version of the answer.
async fn get_with(
    client: &Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: &str,
    headers: &[(&str, &str)],
) -> Result<(Version, Got), BoxError> {
    let mut req = Request::get(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp =
        tokio::time::timeout(Duration::from_secs(10), client.request(req.body(Full::new(Bytes::new()))?)).await??;
    let version = resp.version();
    Ok((version, read_all(resp).await?))
}

/// A TLS connection to `addr` (verified as 127.0.0.1).
pub(crate) async fn tls_connect(addr: SocketAddr, cfg: ClientConfig) -> Result<TlsStream<TcpStream>, BoxError> {
    let tcp = TcpStream::connect(addr).await?;
    let name = ServerName::IpAddress(addr.ip().into());
    Ok(tokio::time::timeout(Duration::from_secs(10), TlsConnector::from(Arc::new(cfg)).connect(name, tcp)).await??)
}

/// The leaf certificate the server presented on `s`.
fn server_cert(s: &TlsStream<TcpStream>) -> Option<CertificateDer<'static>> {
    s.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| c.clone().into_owned())
}

/// One GET on an HTTP/1.1 connection that stays open.
async fn h1_get(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    path: &str,
) -> Result<Got, BoxError> {
    let req = Request::get(path).header("host", "127.0.0.1").body(Full::new(Bytes::new()))?;
    let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req)).await??;
    read_all(resp).await
}

fn order(country: u8) -> String {
    format!("/v1/orders/{}", Iuid::from_fields(1_700_000_000_000, country, 3, 1))
}

#[tokio::test]
async fn https_listener_answers_over_http1_and_h2() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("shardgate test ca")?;
    let (cert, key) = write_leaf(dir.path(), "proxy", &ca.leaf("proxy")?)?;
    let [eu, kz, us] = three_backends().await?;
    let extra = format!("server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\" }} }}");
    let p = proxy(&table(eu.addr, kz.addr, us.addr, &extra)).await?;

    for (h2, version) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
        let client = https_client(client_config(&ca, None, &[])?, h2);
        for (country, region) in [(7u8, "kz"), (49, "eu"), (1, "us")] {
            let (v, got) = get_with(&client, &p.https_url(&order(country)), &[]).await?;
            assert_eq!(v, version, "h2 {h2}");
            assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some(region));
            // The upstream learns the client came over TLS.
            assert_eq!(got.json()?["headers"]["x-forwarded-proto"], "https");
        }
    }
    // ALPN: offered both, the proxy picks h2; offered only http/1.1, that.
    for (offer, picked) in [(vec![&b"h2"[..], b"http/1.1"], &b"h2"[..]), (vec![&b"http/1.1"[..]], b"http/1.1")] {
        let s = tls_connect(p.addr, client_config(&ca, None, &offer)?).await?;
        assert_eq!(s.get_ref().1.alpn_protocol(), Some(picked));
    }
    // A client that does not trust the proxy's CA cannot complete the handshake.
    let stranger = Ca::new("another ca")?;
    assert!(tls_connect(p.addr, client_config(&stranger, None, &[])?).await.is_err());
    // Plain HTTP on the TLS port is told so, in plain HTTP, and closed.
    let plain = crate::support::get(&p.url(&order(7))).await?;
    assert_eq!((plain.status.as_u16(), plain.header("connection")), (400, Some("close")));
    let problem = plain.json()?;
    assert_eq!(problem["reason"], "plain_http_to_tls");
    assert!(problem["detail"].as_str().is_some_and(|d| d.contains("https://")), "{problem}");
    Ok(())
}

#[tokio::test]
async fn header_rules_give_the_same_fields_over_http1_and_h2() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("shardgate test ca")?;
    let (cert, key) = write_leaf(dir.path(), "proxy", &ca.leaf("proxy")?)?;
    let [eu, kz, us] = three_backends().await?;
    let extra = format!(
        "server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\" }} }}\n\
         headers:\n  request: {{ set: {{ X-Tenant: \"{{country}}\" }} }}\n  \
         response: {{ set: {{ X-Served-By: \"{{region}}\" }}, add: {{ X-Backend-Region: also }}, remove: [Content-Type] }}"
    );
    let p = proxy(&table(eu.addr, kz.addr, us.addr, &extra)).await?;
    for (h2, version) in [(false, Version::HTTP_11), (true, Version::HTTP_2)] {
        let client = https_client(client_config(&ca, None, &[])?, h2);
        let (v, got) = get_with(&client, &p.https_url(&order(7)), &[]).await?;
        assert_eq!((v, got.status.as_u16()), (version, 200));
        assert_eq!(got.header("x-served-by"), Some("kz"), "h2 {h2}");
        assert_eq!(got.header("content-type"), None, "h2 {h2}");
        let regions: Vec<&str> =
            got.headers.get_all("x-backend-region").iter().filter_map(|v| v.to_str().ok()).collect();
        assert_eq!(regions, ["kz", "also"], "h2 {h2}");
        assert_eq!(got.json()?["headers"]["x-tenant"], "KZ", "h2 {h2}");
    }
    Ok(())
}

#[tokio::test]
async fn certificate_files_are_reloaded_without_dropping_connections() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("shardgate test ca")?;
    let old = ca.leaf("proxy-old")?;
    let (cert, key) = write_leaf(dir.path(), "proxy", &old)?;
    let [eu, kz, us] = three_backends().await?;
    let extra = format!("server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\" }} }}");
    let p = proxy(&table(eu.addr, kz.addr, us.addr, &extra)).await?;
    let h1 = [&b"http/1.1"[..]];

    // A keep-alive connection opened before the rotation.
    let stream = tls_connect(p.addr, client_config(&ca, None, &h1)?).await?;
    assert_eq!(server_cert(&stream).as_ref(), Some(&old.der));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    let conn = tokio::spawn(conn);
    assert_eq!(h1_get(&mut sender, &order(7)).await?.status, 200);

    // Rotate: the key first, then the certificate (between the two writes
    // the pair does not match; that state is refused, the old pair stays).
    let new = ca.leaf("proxy-new")?;
    write(dir.path(), "proxy.key", &new.key_pem)?;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let s = tls_connect(p.addr, client_config(&ca, None, &h1)?).await?;
    assert_eq!(server_cert(&s).as_ref(), Some(&old.der), "a mismatched pair must not be used");
    write(dir.path(), "proxy.crt", &new.cert_pem)?;
    let started = Instant::now();
    loop {
        let s = tls_connect(p.addr, client_config(&ca, None, &h1)?).await?;
        if server_cert(&s).as_ref() == Some(&new.der) {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "the new certificate was not picked up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // New connections get answers with the new certificate ...
    let client = https_client(client_config(&ca, None, &[])?, false);
    assert_eq!(get_with(&client, &p.https_url(&order(49)), &[]).await?.1.status, 200);
    // ... and the connection opened before the rotation still works.
    let again = h1_get(&mut sender, &order(1)).await?;
    assert_eq!((again.status.as_u16(), again.header("x-backend-region")), (200, Some("us")));
    assert!(!conn.is_finished());

    // A broken file is refused: the current certificate stays in use.
    write(dir.path(), "proxy.crt", "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n")?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s = tls_connect(p.addr, client_config(&ca, None, &h1)?).await?;
    assert_eq!(server_cert(&s).as_ref(), Some(&new.der));
    assert_eq!(get_with(&client, &p.https_url(&order(7)), &[]).await?.1.status, 200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_file_whose_read_never_ends_stops_no_request_on_one_thread() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("shardgate test ca")?;
    let (cert, key) = write_leaf(dir.path(), "proxy", &ca.leaf("proxy")?)?;
    let [eu, kz, us] = three_backends().await?;
    let extra = format!("server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\" }} }}");
    let text = table(eu.addr, kz.addr, us.addr, &extra);
    let serving = crate::support::binary::spawn_serving(dir.path(), &text, None, None, &["--threads", "1"]);
    let (_child, port, _) = serving.await?;
    // The certificate becomes a pipe no one writes to: opening it to read waits forever.
    std::fs::remove_file(&cert)?;
    assert!(std::process::Command::new("mkfifo").arg(&cert).status()?.success(), "mkfifo failed");
    // The check (every second) has found it changed and is waiting on it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let client = https_client(client_config(&ca, None, &[])?, false);
    for country in [7, 49, 1] {
        let url = format!("https://127.0.0.1:{port}{}", order(country));
        let got = tokio::time::timeout(Duration::from_secs(5), get_with(&client, &url, &[])).await;
        let (_, got) = got.map_err(|_| "not answered: the certificate check holds the only worker")??;
        assert_eq!(got.status, 200);
    }
    Ok(())
}

/// An echo backend behind TLS; counts the connections it accepted.
struct TlsBackend {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tls_backend(region: &'static str, leaf: &Leaf) -> Result<TlsBackend, BoxError> {
    let mut cfg = ServerConfig::builder_with_provider(shardgate::tls::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der.clone()], PrivateKeyDer::from_pem_slice(leaf.key_pem.as_bytes())?)?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(cfg));
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let connections = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&connections);
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let Ok((tcp, _)) = listener.accept().await else { continue };
            count.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            conns.spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else { return };
                let svc = service_fn(|req| async move {
                    Ok::<_, std::convert::Infallible>(shardgate::cli::backend::answer(region, req).await)
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(TlsBackend { addr, connections, task })
}

#[tokio::test]
async fn https_upstreams_are_verified_against_the_configured_ca_and_pooled() -> TestResult {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("backend ca")?;
    let ca_path = write(dir.path(), "ca.pem", &ca.pem())?;
    let secure = tls_backend("eu", &ca.leaf("backend-eu")?).await?;
    let [_, kz, us] = three_backends().await?;
    let yaml = |tls: &str| {
        table(secure.addr, kz.addr, us.addr, &format!("upstream: {{ health: {{ interval: 0s }}{tls} }}"))
            .replace(&format!("http://{}", secure.addr), &format!("https://{}", secure.addr))
    };
    let p = proxy(&yaml(&format!(", tls: {{ ca: \"{ca_path}\" }}"))).await?;
    for _ in 0..5 {
        let got = crate::support::get(&p.url(&order(49))).await?;
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        assert_eq!(got.header("x-backend-region"), Some("eu"));
    }
    // Plain upstreams still work beside it.
    assert_eq!(crate::support::get(&p.url(&order(7))).await?.header("x-backend-region"), Some("kz"));
    // Five requests, one pooled TLS connection.
    assert_eq!(secure.connections.load(Ordering::SeqCst), 1);

    // Without the CA (system roots only) the backend's certificate is not trusted.
    let untrusting = proxy(&yaml("")).await?;
    let got = crate::support::get(&untrusting.url(&order(49))).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    Ok(())
}

const REGIONS: [&str; 3] = ["eu", "kz", "us"];

/// A mesh table for `instance` serving `local`; peers are `https://`.
/// `server` and `upstream_tls` are the instance's TLS settings (YAML flow
/// mappings); `kz_backend: false` leaves region kz with its peer only.
#[allow(clippy::too_many_arguments)]
fn mesh_table(
    local: &str,
    instance: &str,
    gw: &[SocketAddr; 3],
    be: &[SocketAddr; 3],
    server: &str,
    upstream_tls: &str,
    health: &str,
    kz_backend: bool,
) -> String {
    let kz_upstreams = if kz_backend { format!("upstreams: [\"http://{}\"], ", be[1]) } else { String::new() };
    format!(
        r#"version: 1
region: {local}
instance: {instance}
{server}
upstream: {{ health: {health}, tls: {upstream_tls} }}
regions:
  eu: {{ upstreams: ["http://{be0}"], peer: "https://{gw0}" }}
  kz: {{ {kz_upstreams}peer: "https://{gw1}" }}
  us: {{ upstreams: ["http://{be2}"], peer: "https://{gw2}" }}
countries:
  KZ: {{ id: 7, region: kz }}
  DE: {{ id: 49, region: eu }}
  US: {{ id: 1, region: us }}
entities: {{ IntercityOrder: 3 }}
routes:
  - name: orders
    match: {{ path: "/v1/orders/{{id}}", methods: [GET] }}
    id: {{ path_param: id, formats: [iuid] }}
"#,
        gw0 = gw[0],
        gw1 = gw[1],
        gw2 = gw[2],
        be0 = be[0],
        be2 = be[2],
    )
}

/// The hop count and `Forwarded` header the backend received.
fn mesh_headers_seen(got: &Got) -> Result<(Option<String>, Option<String>), BoxError> {
    let body = got.json()?;
    let h = &body["headers"];
    Ok((h["x-shardgate-hops"].as_str().map(str::to_string), h["forwarded"].as_str().map(str::to_string)))
}

#[tokio::test]
async fn mesh_over_mutual_tls_trusts_only_peers_with_certificates() -> TestResult {
    let dir = tempfile::tempdir()?;
    let d = dir.path();
    let mesh_ca = Ca::new("mesh ca")?;
    let ca = write(d, "mesh-ca.pem", &mesh_ca.pem())?;
    let backends = three_backends().await?;
    let be = [backends[0].addr, backends[1].addr, backends[2].addr];
    let (listeners, gw) = three_listeners().await?;
    let health = "{ interval: 100ms, timeout: 500ms, fall: 1, rise: 1 }";
    let mut gateways = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let name = format!("gw-{}", REGIONS[i]);
        let (cert, key) = write_leaf(d, &name, &mesh_ca.leaf(&name)?)?;
        let server = format!("server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\", client_ca: \"{ca}\" }} }}");
        let upstream = format!("{{ ca: \"{ca}\", cert: \"{cert}\", key: \"{key}\" }}");
        gateways.push(proxy_on(l, &mesh_table(REGIONS[i], &name, &gw, &be, &server, &upstream, health, true)).await?);
    }
    // Peers check each other's readiness over mutual TLS: all stay up.
    tokio::time::sleep(Duration::from_millis(400)).await;
    for g in &gateways {
        let report = g.proxy.as_ref().ok_or("proxy")?.shared().health.report();
        assert!(report.iter().all(|(_, _, up, ejected)| *up && !ejected), "{report:?}");
    }

    // A client with no certificate (TLS server-verified only).
    let anonymous = https_client(client_config(&mesh_ca, None, &[])?, false);
    // 1. Requests reach the owner through its peer, which trusts the forwarding gateway.
    for (i, g) in gateways.iter().enumerate() {
        for (country, owner) in [(7u8, 1usize), (49, 0), (1, 2)] {
            let (_, got) = get_with(&anonymous, &g.https_url(&order(country)), &[]).await?;
            assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
            assert_eq!(got.header("x-backend-region"), Some(REGIONS[owner]));
            let (hops, forwarded) = mesh_headers_seen(&got)?;
            if i == owner {
                assert_eq!((hops, forwarded), (None, None));
            } else {
                assert_eq!(hops.as_deref(), Some("1"), "via {}", REGIONS[i]);
                assert_eq!(forwarded, Some(format!("by=_gw-{}", REGIONS[i])));
            }
            assert!(got.header("x-shardgate-hops").is_none() && got.header("forwarded").is_none());
        }
    }

    // 2. A client without a trusted certificate forging the mesh headers is
    // routed as a fresh request: no 508, and the forged values are gone.
    let forged = [("forwarded", "by=_gw-eu"), ("x-shardgate-hops", "9")];
    for country in [49u8, 7] {
        let (_, got) = get_with(&anonymous, &gateways[0].https_url(&order(country)), &forged).await?;
        assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
        let (hops, forwarded) = mesh_headers_seen(&got)?;
        if country == 49 {
            assert_eq!((hops, forwarded), (None, None));
        } else {
            // Forwarded to kz with this gateway's own, fresh mesh headers.
            assert_eq!((hops.as_deref(), forwarded.as_deref()), (Some("1"), Some("by=_gw-eu")));
        }
    }
    // The same headers from a holder of a mesh certificate are honoured:
    // the gateway finds itself in `Forwarded` and answers 508.
    let mesh_client = https_client(client_config(&mesh_ca, Some(&mesh_ca.leaf("gw-other")?), &[])?, false);
    let (_, got) = get_with(&mesh_client, &gateways[0].https_url(&order(49)), &forged).await?;
    assert_eq!(got.status, 508);

    // 3. A gateway without a client certificate cannot use the mesh path:
    // kz takes its request as a fresh client request.
    let no_cert = {
        let upstream = format!("{{ ca: \"{ca}\" }}");
        proxy(&mesh_table("eu", "gw-rogue", &gw, &be, "", &upstream, "{ interval: 0s }", false)).await?
    };
    let got = crate::support::get(&no_cert.url(&order(7))).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(got.header("x-backend-region"), Some("kz"));
    assert_eq!(mesh_headers_seen(&got)?, (None, None), "mesh headers from an unauthenticated peer were honoured");

    // A gateway whose certificate another CA signed is refused at the handshake.
    let rogue_ca = Ca::new("rogue ca")?;
    let (cert, key) = write_leaf(d, "gw-rogue", &rogue_ca.leaf("gw-rogue")?)?;
    let wrong_cert = {
        let upstream = format!("{{ ca: \"{ca}\", cert: \"{cert}\", key: \"{key}\" }}");
        proxy(&mesh_table("eu", "gw-rogue", &gw, &be, "", &upstream, "{ interval: 0s }", false)).await?
    };
    let kz_hits = backends[1].hits();
    let got = crate::support::get(&wrong_cert.url(&order(7))).await?;
    assert_eq!(got.status, 502, "{}", String::from_utf8_lossy(&got.body));
    assert_eq!(backends[1].hits(), kz_hits);
    Ok(())
}
