//! TLS with rustls (the `ring` provider).
//!
//! * [`ServerTls`]: the proxy listener's configuration from `server.tls`.
//!   The certificate is served by [`CertResolver`], an `ArcSwap` that
//!   [`CertReloader`] refreshes when the certificate or key file changes on
//!   disk (checked every [`RELOAD_CHECK_INTERVAL`]); new handshakes get the
//!   new certificate, established connections keep their session. With
//!   `client_ca`, client certificates are verified against it (and required
//!   with `require_client_cert`). The protocol versions, cipher suites,
//!   key-exchange groups and ALPN list are the table's; sessions resume
//!   from a cache of `session_cache` entries or from stateless tickets
//!   whose keys rotate (`tickets`).
//! * [`client_config`]: the configuration for `https://` upstreams and
//!   peers from `upstream.tls`: the system roots or a CA file, and an
//!   optional client certificate (mutual TLS to peers).
//!
//! Every error names the file and what is wrong with it.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerSessionMemoryCache, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite};
use tokio_rustls::TlsAcceptor;

use crate::config::schema as raw;
use crate::config::tls as names;

mod tickets;

use tickets::TicketKeys;

/// How often the certificate and key files are checked for changes.
pub const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A TLS setup problem, naming the offending file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// The crypto provider every config uses.
pub fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

fn read(path: &str, what: &str) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError(format!("cannot read {what} file {path}: {e}")))
}

/// Every certificate in the PEM file at `path` (at least one).
pub fn read_certs(path: &str, what: &str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError(format!("invalid pem in {what} file {path}: {e}")))?;
    if certs.is_empty() {
        return Err(TlsError(format!("no certificate found in {what} file {path}")));
    }
    Ok(certs)
}

/// The first private key in the PEM file at `path` (PKCS#8, PKCS#1 or SEC1).
pub fn read_key(path: &str) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path, "tls key")?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError(format!("no private key found in tls key file {path}")),
        e => TlsError(format!("invalid pem in tls key file {path}: {e}")),
    })
}

/// A root store holding every certificate of the PEM file at `path`.
fn read_roots(path: &str, what: &str) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path, what)? {
        roots.add(cert).map_err(|e| TlsError(format!("unusable ca certificate in {what} file {path}: {e}")))?;
    }
    Ok(roots)
}

/// The certificate chain at `cert` with the key at `key`, checked to match.
pub fn load_certified_key(cert: &str, key: &str) -> Result<CertifiedKey, TlsError> {
    let chain = read_certs(cert, "tls certificate")?;
    let der = read_key(key)?;
    CertifiedKey::from_der(chain, der, &provider())
        .map_err(|e| TlsError(format!("tls certificate {cert} cannot be used with key {key}: {e}")))
}

/// Serves the current certificate to every handshake; swapped on reload.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
}

impl CertResolver {
    /// A resolver serving `key`.
    pub fn new(key: CertifiedKey) -> CertResolver {
        CertResolver { current: ArcSwap::from_pointee(key) }
    }

    /// The certificate handshakes get now.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current.load_full()
    }

    /// Replaces the certificate for new handshakes.
    pub fn set(&self, key: CertifiedKey) {
        self.current.store(Arc::new(key));
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// What identifies one version of a file on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    #[cfg(unix)]
    inode: (u64, u64),
}

fn stamp(path: &str) -> Option<Stamp> {
    // `metadata` follows symlinks, so a Kubernetes secret's `..data` swap is seen.
    let m = std::fs::metadata(Path::new(path)).ok()?;
    #[cfg(unix)]
    let inode = {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    };
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        #[cfg(unix)]
        inode,
    })
}

/// Reloads the certificate and key files into a [`CertResolver`] when they change.
#[derive(Debug)]
pub struct CertReloader {
    cert: String,
    key: String,
    resolver: Arc<CertResolver>,
    /// The listener's cipher suites: a new pair must have one it can use.
    suites: Vec<SupportedCipherSuite>,
    /// Stamps of the last (cert, key) pair tried, so a bad pair is reported once.
    tried: Mutex<(Option<Stamp>, Option<Stamp>)>,
}

impl CertReloader {
    /// Checks the files; when either changed since the last check, loads the
    /// pair and swaps it in. `Ok(true)`: a new certificate is in use. On an
    /// error the previous certificate stays in use; the same files are not
    /// tried again until they change (a rotation that writes the certificate
    /// and the key one after the other succeeds on the second change).
    pub fn check(&self) -> Result<bool, TlsError> {
        let now = (stamp(&self.cert), stamp(&self.key));
        {
            let mut tried = self.tried.lock().map_err(|_| TlsError("tls reload state poisoned".into()))?;
            if *tried == now {
                return Ok(false);
            }
            *tried = now;
        }
        self.reload_now().map(|()| true)
    }

    /// Loads the files now and swaps the pair in, when one of the
    /// listener's cipher suites can use its key.
    pub fn reload_now(&self) -> Result<(), TlsError> {
        let key = load_certified_key(&self.cert, &self.key)?;
        usable_suites(&self.suites, &self.cert, &key)?;
        self.resolver.set(key);
        Ok(())
    }

    /// The resolver this reloader feeds.
    pub fn resolver(&self) -> &Arc<CertResolver> {
        &self.resolver
    }
}

/// Aborts the certificate watcher when dropped.
#[derive(Debug)]
pub struct WatchGuard(tokio::task::JoinHandle<()>);

impl Drop for WatchGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The proxy listener's TLS: acceptor, certificate reloader, client-certificate policy.
pub struct ServerTls {
    acceptor: TlsAcceptor,
    reloader: Arc<CertReloader>,
    client_auth: bool,
    /// Whether `alpn` lists `h2`: a connection that negotiated no protocol
    /// may speak HTTP/2 only then.
    h2: bool,
    tickets: Option<Arc<TicketKeys>>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.reloader.cert)
            .field("key", &self.reloader.key)
            .field("client_auth", &self.client_auth)
            .finish()
    }
}

impl ServerTls {
    /// Reads `server.tls`'s files and builds the listener configuration.
    pub fn load(cfg: &raw::ServerTls) -> Result<ServerTls, TlsError> {
        let key = load_certified_key(&cfg.cert, &cfg.key)?;
        let suited = listener_provider(cfg)?;
        usable_suites(&suited.cipher_suites, &cfg.cert, &key)?;
        let suites = suited.cipher_suites.clone();
        let resolver = Arc::new(CertResolver::new(key));
        let builder = ServerConfig::builder_with_provider(suited)
            .with_protocol_versions(cfg.min_version.versions())
            .map_err(|e| TlsError(format!("server.tls cannot be used: {e}")))?;
        let builder = match &cfg.client_ca {
            Some(ca) => {
                let roots = read_roots(ca, "tls client_ca")?;
                let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider());
                let verifier = if cfg.require_client_cert { verifier } else { verifier.allow_unauthenticated() };
                let verifier =
                    verifier.build().map_err(|e| TlsError(format!("cannot use tls client_ca file {ca}: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = cfg.alpn.iter().map(|p| p.as_bytes().to_vec()).collect();
        config.session_storage = match cfg.session_cache {
            0 => Arc::new(NoServerSessionStorage {}),
            n => ServerSessionMemoryCache::new(n),
        };
        // The table's order of suites, not the client's.
        config.ignore_client_order = !cfg.cipher_suites.is_empty();
        let tickets = cfg.session_tickets.then(|| TicketKeys::new(cfg.ticket_key_rotation.0)).transpose()?;
        if let Some(keys) = &tickets {
            config.ticketer = Arc::clone(keys) as Arc<dyn rustls::server::ProducesTickets>;
        }
        let reloader = CertReloader {
            cert: cfg.cert.clone(),
            key: cfg.key.clone(),
            resolver,
            suites,
            tried: Mutex::new((stamp(&cfg.cert), stamp(&cfg.key))),
        };
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
            reloader: Arc::new(reloader),
            client_auth: cfg.client_ca.is_some(),
            h2: cfg.alpn.iter().any(|p| p == "h2"),
            tickets,
        })
    }

    /// The acceptor for new connections.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// Whether client certificates are verified (`client_ca` is set): then
    /// only connections with a verified certificate may carry mesh headers.
    pub fn client_auth(&self) -> bool {
        self.client_auth
    }

    /// Whether a connection may speak HTTP/2, given the protocol its
    /// handshake negotiated: the one negotiated, or, where none was (the
    /// client offered no ALPN), whether the table's `alpn` lists `h2`.
    pub fn h2_allowed(&self, negotiated: Option<&[u8]>) -> bool {
        negotiated.map_or(self.h2, |p| p == b"h2")
    }

    /// The certificate reloader.
    pub fn reloader(&self) -> &Arc<CertReloader> {
        &self.reloader
    }

    /// Checks the certificate and key files, and rolls the ticket keys,
    /// every `interval` until the returned guard is dropped (or this
    /// `ServerTls` is).
    pub fn watch(&self, interval: Duration) -> WatchGuard {
        let weak: Weak<CertReloader> = Arc::downgrade(&self.reloader);
        let tickets = self.tickets.as_ref().map(Arc::downgrade);
        WatchGuard(tokio::spawn(async move {
            // The files are read on a blocking thread, one check at a time:
            // a stalled mount (a secret volume) holds no worker, and the
            // ticket keys still roll while a check waits on it.
            let mut checking: Option<tokio::task::JoinHandle<()>> = None;
            // Whether a check still out has been told of.
            let mut told = false;
            loop {
                tokio::time::sleep(interval).await;
                // Ticket keys are erased on time on an idle listener too.
                if let Some(keys) = tickets.as_ref().and_then(Weak::upgrade) {
                    keys.roll();
                }
                let Some(reloader) = weak.upgrade() else { return };
                if checking.as_ref().is_some_and(|c| !c.is_finished()) {
                    if !std::mem::replace(&mut told, true) {
                        tracing::warn!(cert = %reloader.cert, key = %reloader.key,
                            "the certificate check has not returned: the files' volume may be stalled; the current certificate stays in use");
                    }
                    continue;
                }
                told = false;
                checking = Some(tokio::task::spawn_blocking(move || match reloader.check() {
                    Ok(true) => tracing::info!(cert = %reloader.cert, "tls certificate reloaded"),
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(error = %e, "tls certificate not reloaded; the previous one stays in use")
                    }
                }));
            }
        }))
    }
}

/// With only TLS 1.2 suites (`cipher_suites` listing no TLS 1.3 one), one
/// of them must suit the certificate's key (ECDSA or RSA), or every
/// handshake would fail: an error naming both, before the listener starts.
fn usable_suites(suites: &[SupportedCipherSuite], cert: &str, key: &CertifiedKey) -> Result<(), TlsError> {
    let alg = key.key.algorithm();
    if suites.iter().any(|s| names::is_tls13(*s) || s.usable_for_signature_algorithm(alg)) {
        return Ok(());
    }
    Err(TlsError(format!(
        "server.tls.cipher_suites has no suite for the {alg:?} key of {cert}: list a TLS 1.3 suite or a \
         TLS 1.2 one for that key"
    )))
}

/// The provider with only the cipher suites and key-exchange groups
/// `server.tls` names, in its order (validated names; one unknown here is
/// an error, not a silent default).
fn listener_provider(cfg: &raw::ServerTls) -> Result<Arc<CryptoProvider>, TlsError> {
    let mut p = rustls::crypto::ring::default_provider();
    if !cfg.cipher_suites.is_empty() {
        p.cipher_suites = named(&cfg.cipher_suites, names::cipher_suite, "cipher suite")?;
    }
    if !cfg.groups.is_empty() {
        p.kx_groups = named(&cfg.groups, names::kx_group, "key exchange group")?;
    }
    Ok(Arc::new(p))
}

/// What each of `list`'s names is, by `find`; an unknown one is an error.
fn named<T>(list: &[String], find: impl Fn(&str) -> Option<T>, what: &str) -> Result<Vec<T>, TlsError> {
    list.iter().map(|n| find(n).ok_or_else(|| TlsError(format!("unknown {what} {n:?}")))).collect()
}

/// The system's trust roots (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else the
/// distribution's bundle such as /etc/ssl/certs/ca-certificates.crt),
/// loaded once.
pub fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for e in &found.errors {
            tracing::warn!(error = %e, "problem loading the system's tls roots");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(ignored, "no system tls roots found; https upstreams need upstream.tls.ca");
        }
        Arc::new(roots)
    }))
}

/// The client configuration for `https://` upstreams and peers from
/// `upstream.tls` (ALPN is left to the connector).
pub fn client_config(cfg: &raw::UpstreamTls) -> Result<ClientConfig, TlsError> {
    let roots = match &cfg.ca {
        Some(ca) => Arc::new(read_roots(ca, "upstream tls ca")?),
        None => system_roots(),
    };
    let builder = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("tls protocol versions: {e}")))?
        .with_root_certificates(roots);
    match (&cfg.cert, &cfg.key) {
        (Some(cert), Some(key)) => {
            let chain = read_certs(cert, "upstream tls certificate")?;
            let der = read_key(key)?;
            builder
                .with_client_auth_cert(chain, der)
                .map_err(|e| TlsError(format!("upstream tls certificate {cert} cannot be used with key {key}: {e}")))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// [`client_config`], or on error (logged) one that trusts no server at
/// all, so `https://` endpoints fail closed. `shardgate serve` refuses to
/// start on that error instead; this fallback serves library callers that
/// cannot fail.
pub fn client_config_or_closed(cfg: &raw::UpstreamTls) -> ClientConfig {
    client_config(cfg).unwrap_or_else(|e| {
        tracing::error!(error = %e, "upstream tls not usable: https upstreams will fail");
        ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map(|b| b.with_root_certificates(RootCertStore::empty()).with_no_client_auth())
            // Unreachable with ring's protocol versions; `ring` is the only
            // provider compiled in, so `builder()` finds it.
            .unwrap_or_else(|_| {
                ClientConfig::builder().with_root_certificates(RootCertStore::empty()).with_no_client_auth()
            })
    })
}

/// Checks every TLS file the configuration names; returns the listener's
/// TLS when `server.tls` is set. What `shardgate serve` runs before starting.
pub fn load(cfg: &crate::config::Config) -> Result<Option<ServerTls>, TlsError> {
    let fixed = &cfg.settings.restart;
    client_config(&fixed.upstream_tls)?;
    fixed.server_tls.as_ref().map(ServerTls::load).transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "version: 1\nregions:\n  eu: { upstreams: [\"https://127.0.0.1:8443\"] }\n";

    fn errors(extra: &str) -> Vec<String> {
        match crate::config::load_str(&format!("{BASE}{extra}"), "t.yaml") {
            Ok(_) => Vec::new(),
            Err(e) => e.errors.iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn tls_keys_are_validated() {
        assert!(errors("server: { tls: { cert: a.pem, key: a.key, client_ca: ca.pem } }").is_empty());
        assert!(errors("upstream: { tls: { ca: ca.pem, cert: a.pem, key: a.key } }").is_empty());
        let e = errors("server: { tls: { cert: a.pem, key: a.key, require_client_cert: true } }");
        assert!(e.iter().any(|m| m.contains("server.tls.require_client_cert") && m.contains("needs")), "{e:?}");
        let e = errors("server: { tls: { cert: a.pem } }");
        assert!(e.iter().any(|m| m.contains("missing field `key`")), "{e:?}");
        let e = errors("server: { tls: { cert: \"\", key: a.key } }");
        assert!(e.iter().any(|m| m.contains("server.tls.cert is an empty path")), "{e:?}");
        let e = errors("upstream: { tls: { cert: a.pem } }");
        assert!(e.iter().any(|m| m.contains("upstream.tls.cert needs upstream.tls.key")), "{e:?}");
        let e = errors("upstream: { tls: { ca: ca.pem, crt: a.pem } }");
        assert!(e.iter().any(|m| m.contains("upstream.tls.crt")), "{e:?}");
    }

    #[test]
    fn listener_settings_are_validated_with_their_line() {
        let tls = |s: &str| errors(&format!("server:\n  tls:\n    cert: a.pem\n    key: a.key\n{s}"));
        for ok in [
            "    min_version: 1.3\n",
            "    min_version: \"1.2\"\n",
            "    cipher_suites: [TLS13_AES_256_GCM_SHA384, TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
            "    groups: [X25519, secp256r1]\n    alpn: [http/1.1]\n    session_cache: 0\n",
            "    session_tickets: false\n    ticket_key_rotation: 24h\n",
        ] {
            assert!(tls(ok).is_empty(), "{ok}: {:?}", tls(ok));
        }
        for (bad, want) in [
            ("    min_version: 1.1\n", "8:18: unsupported TLS version \"1.1\""),
            ("    cipher_suites: [TLS13_AES_128_GCM_SHA256, RC4]\n", "8:47: unknown cipher suite \"RC4\""),
            (
                "    min_version: 1.3\n    cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n",
                "9:20: min_version is 1.3 but cipher_suites has no TLS 1.3 suite",
            ),
            ("    groups: [x448]\n", "8:14: unknown key exchange group \"x448\""),
            ("    alpn: []\n", "8:11: alpn is empty"),
            ("    alpn: [h2, h3]\n", "8:16: unknown ALPN protocol \"h3\""),
            ("    alpn: [h2, h2]\n", "8:16: ALPN protocol \"h2\" is listed twice"),
            ("    session_cache: 2000000\n", "8:20: session_cache 2000000 is above 1000000"),
            ("    ticket_key_rotation: 2d\n", "8:26: "),
            ("    ticket_key_rotation: 25h\n", "8:26: ticket_key_rotation 25h is not between 1s and 24h"),
        ] {
            let e = tls(bad);
            let (at, message) = want.split_once(": ").unwrap_or((want, ""));
            assert!(e.iter().any(|m| m.starts_with(at) && m.contains(message)), "{bad}: {e:?}");
        }
        let e = errors("server: { backlog: 0 }\n");
        assert!(e.iter().any(|m| m.contains("backlog must be positive")), "{e:?}");
    }

    #[test]
    fn tls12_suites_must_suit_the_certificates_key() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let key = rcgen::KeyPair::generate()?; // ECDSA P-256
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])?.self_signed(&key)?;
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&c, cert.pem())?;
        std::fs::write(&k, key.serialize_pem())?;
        let tls = |suites: &[&str]| raw::ServerTls {
            cert: c.display().to_string(),
            key: k.display().to_string(),
            cipher_suites: suites.iter().map(|s| (*s).to_string()).collect(),
            ..Default::default()
        };
        let e = ServerTls::load(&tls(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"])).err().map(|e| e.0);
        assert!(e.as_deref().is_some_and(|e| e.contains("no suite for the ECDSA key")), "{e:?}");
        assert!(ServerTls::load(&tls(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"])).is_ok());
        assert!(ServerTls::load(&tls(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"])).is_ok());

        // A rotation to an RSA pair, which the listener's ECDSA suite cannot
        // use, is refused; the ECDSA pair stays. With a TLS 1.3 suite
        // beside it, the RSA pair is taken.
        let served = ServerTls::load(&tls(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"]))?;
        let both = ServerTls::load(&tls(&["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "TLS13_AES_128_GCM_SHA256"]))?;
        assert_eq!(both.reloader().resolver().current().key.algorithm(), rustls::SignatureAlgorithm::ECDSA);
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tls");
        std::fs::copy(fixtures.join("rsa-cert.pem"), &c)?;
        std::fs::copy(fixtures.join("rsa-key.pem"), &k)?;
        let e = served.reloader().reload_now().err().map(|e| e.0);
        assert!(e.as_deref().is_some_and(|e| e.contains("no suite for the RSA key")), "{e:?}");
        let kept = served.reloader().resolver().current().key.algorithm();
        assert_eq!(kept, rustls::SignatureAlgorithm::ECDSA);
        both.reloader().reload_now()?;
        assert_eq!(both.reloader().resolver().current().key.algorithm(), rustls::SignatureAlgorithm::RSA);
        Ok(())
    }

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("shardgate-tls-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let missing = dir.join("missing.pem").display().to_string();
        let e = ServerTls::load(&raw::ServerTls { cert: missing.clone(), key: missing.clone(), ..Default::default() })
            .err()
            .map(|e| e.to_string());
        assert!(e
            .as_deref()
            .is_some_and(|e| e.starts_with("cannot read tls certificate file") && e.contains(&missing)));
        let junk = dir.join("junk.pem");
        let _ = std::fs::write(&junk, "hello\n");
        let junk = junk.display().to_string();
        let e = client_config(&raw::UpstreamTls { ca: Some(junk.clone()), ..Default::default() }).err();
        assert_eq!(e, Some(TlsError(format!("no certificate found in upstream tls ca file {junk}"))));
        let e = read_key(&junk).err();
        assert_eq!(e, Some(TlsError(format!("no private key found in tls key file {junk}"))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
