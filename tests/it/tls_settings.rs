//! The listener's TLS and socket settings from the table, on real sockets:
//! the lowest protocol version, cipher suites, key-exchange groups and ALPN
//! list; resumption from stateless tickets whose keys rotate, and from the
//! session cache; the listen backlog of the real binary.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::{ClientConfig, HandshakeKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::tls::{client_config, tls_connect, write_leaf, Ca};
use crate::support::binary::spawn_binary;
use crate::support::{backend, proxy, table, three_backends, BoxError, Running, TestResult};

/// A proxy with TLS (`settings` added to `server.tls`), its CA.
async fn tls_proxy(settings: &str) -> Result<(Running, Ca, tempfile::TempDir, [Running; 3]), BoxError> {
    let dir = tempfile::tempdir()?;
    let ca = Ca::new("shardgate test ca")?;
    let (cert, key) = write_leaf(dir.path(), "proxy", &ca.leaf("proxy")?)?;
    let backends = three_backends().await?;
    let [eu, kz, us] = &backends;
    let extra = format!("server: {{ tls: {{ cert: \"{cert}\", key: \"{key}\"{settings} }} }}");
    let p = proxy(&table(eu.addr, kz.addr, us.addr, &extra)).await?;
    Ok((p, ca, dir, backends))
}

/// Connects with `cfg` (its session store kept across calls), asks for
/// `/.shardgate/ready` and reads the answer to its end, so the tickets the
/// server sends after the handshake are received; how the handshake went.
async fn connect_and_ask(p: &Running, cfg: &Arc<ClientConfig>) -> Result<HandshakeKind, BoxError> {
    let mut s = tls_connect(p.addr, ClientConfig::clone(cfg)).await?;
    let kind = s.get_ref().1.handshake_kind().ok_or("handshake not finished")?;
    s.write_all(b"GET /.shardgate/ready HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await??;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&answer));
    Ok(kind)
}

/// `ClientConfig` shares its session store between clones: one client.
fn one_client(ca: &Ca) -> Result<Arc<ClientConfig>, BoxError> {
    Ok(Arc::new(client_config(ca, None, &[b"http/1.1"])?))
}

/// A client trusting `ca` that offers TLS 1.2 only.
fn tls12_only(ca: &Ca) -> Result<ClientConfig, BoxError> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls::pki_types::CertificateDer::pem_slice_iter(ca.pem().as_bytes()).flatten());
    Ok(ClientConfig::builder_with_provider(shardgate::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

#[tokio::test]
async fn tls_version_suites_groups_and_alpn_are_the_tables() -> TestResult {
    let (p, ca, _dir, _b) = tls_proxy(
        ", min_version: 1.3, cipher_suites: [TLS13_CHACHA20_POLY1305_SHA256, TLS13_AES_256_GCM_SHA384], \
         groups: [secp384r1], alpn: [http/1.1]",
    )
    .await?;
    // A client offering only TLS 1.2 is refused.
    let tls12 = tls12_only(&ca)?;
    assert!(tls_connect(p.addr, tls12).await.is_err(), "a TLS 1.2 client must be refused");
    // A client offering everything (AES first) gets 1.3 with the table's
    // first suite and its one group.
    let s = tls_connect(p.addr, client_config(&ca, None, &[b"h2", b"http/1.1"])?).await?;
    let c = s.get_ref().1;
    assert_eq!(c.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_3));
    let suite = c.negotiated_cipher_suite().and_then(|s| s.suite().as_str());
    assert_eq!(suite, Some("TLS13_CHACHA20_POLY1305_SHA256"));
    let group = c.negotiated_key_exchange_group().and_then(|g| g.name().as_str());
    assert_eq!(group, Some("secp384r1"));
    // ALPN: only http/1.1 is offered back, even to a client preferring h2.
    assert_eq!(c.alpn_protocol(), Some(&b"http/1.1"[..]));
    // A client that negotiates no protocol and sends the HTTP/2 preface
    // is not served HTTP/2: the listener's `alpn` leaves it out.
    let mut s = tls_connect(p.addr, client_config(&ca, None, &[])?).await?;
    assert_eq!(s.get_ref().1.alpn_protocol(), None);
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer)).await??;
    assert!(answer.starts_with(b"HTTP/1.1 4"), "{}", String::from_utf8_lossy(&answer));
    Ok(())
}

#[tokio::test]
async fn the_default_listener_speaks_tls12_and_13() -> TestResult {
    let (p, ca, _dir, _b) = tls_proxy("").await?;
    let tls12 = tls12_only(&ca)?;
    let s = tls_connect(p.addr, tls12).await?;
    assert_eq!(s.get_ref().1.protocol_version(), Some(rustls::ProtocolVersion::TLSv1_2));
    Ok(())
}

#[tokio::test]
async fn session_tickets_resume_across_a_key_rotation() -> TestResult {
    // No session cache: only a ticket can resume a session.
    let (p, ca, _dir, _b) = tls_proxy(", session_cache: 0, ticket_key_rotation: 5s").await?;
    // `b`'s ticket is sealed under the first key, less than 3 s into its
    // 5 s (in whole seconds, the key rolls 4 to 5 s after the listener
    // starts and is erased 9 to 10 s after).
    let b = one_client(&ca)?;
    assert_eq!(connect_and_ask(&p, &b).await?, HandshakeKind::Full);
    // A ticket resumes the next connection.
    let a = one_client(&ca)?;
    assert_eq!(connect_and_ask(&p, &a).await?, HandshakeKind::Full);
    assert_eq!(connect_and_ask(&p, &a).await?, HandshakeKind::Resumed);
    // Six seconds on, the key that sealed `b`'s ticket is the previous
    // one, which still opens it (the client was told it lives 10 s). That
    // a ticket two periods old is refused is the ticket keys' own test,
    // with a clock of its own.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(connect_and_ask(&p, &b).await?, HandshakeKind::Resumed, "a ticket of the previous key");
    Ok(())
}

#[tokio::test]
async fn without_tickets_the_session_cache_resumes_and_without_both_nothing_does() -> TestResult {
    for (settings, second) in [
        (", session_tickets: false", HandshakeKind::Resumed),
        (", session_tickets: false, session_cache: 0", HandshakeKind::Full),
    ] {
        let (p, ca, _dir, _b) = tls_proxy(settings).await?;
        let c = one_client(&ca)?;
        assert_eq!(connect_and_ask(&p, &c).await?, HandshakeKind::Full, "{settings}");
        assert_eq!(connect_and_ask(&p, &c).await?, second, "{settings}");
    }
    Ok(())
}

/// How many of `n` connections to `port` the kernel completes within a
/// second while nothing accepts them.
async fn completed_connections(port: u16, n: usize) -> usize {
    let attempts = (0..n).map(|_| async move {
        tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(("127.0.0.1", port))).await.ok()?.ok()
    });
    let conns = futures_util::future::join_all(attempts).await;
    conns.iter().filter(|c| c.is_some()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listen_backlog_is_the_tables() -> TestResult {
    let kz = backend("kz").await?;
    // Stopped, the binary accepts nothing: the kernel completes at most
    // backlog + 1 handshakes (the backlog capped by net.core.somaxconn)
    // and leaves the rest unanswered.
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")?.trim().parse()?;
    let all = 300.min(somaxconn + 1);
    for (extra, at_least, at_most) in [("server: { backlog: 16 }", 1, 40), ("", all, 300)] {
        let dir = tempfile::tempdir()?;
        let (child, port, _admin) = spawn_binary(dir.path(), kz.addr, extra).await?;
        child.signal("-STOP")?;
        let started = Instant::now();
        let done = completed_connections(port, 300).await;
        child.signal("-CONT")?;
        assert!((at_least..=at_most).contains(&done), "{extra:?}: {done} of 300 completed");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    Ok(())
}
