//! gRPC calls: what the proxy answers a gRPC client itself is a gRPC
//! status in a Trailers-Only answer, never an HTTP error page it cannot
//! read. The calls are made over HTTP/2 with prior knowledge (h2c), as
//! gRPC clients do in plain text.

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::support::{self, iuid, proxy, table, three_backends, BoxError, TestResult};

/// A unary call's head: the path, `application/grpc`, a 5-byte empty message.
async fn call(url: &str) -> Result<Response<Incoming>, BoxError> {
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let req = Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))?;
    Ok(client.request(req).await?)
}

fn field<'r>(resp: &'r Response<Incoming>, name: &str) -> Option<&'r str> {
    resp.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn the_proxys_own_failures_are_grpc_statuses_to_a_grpc_client() -> TestResult {
    // kz's backend is an address nothing listens on.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let [eu, _kz, us] = three_backends().await?;
    let p = proxy(&table(eu.addr, dead, us.addr, "")).await?;
    let cases = [
        ("/v1/orders/not-an-id", "3", "bad_length"),
        (&format!("/v1/orders/{}", iuid(7)) as &str, "14", "upstream_connect_failed"),
        ("/no/such/route", "12", "no_route"),
    ];
    for (path, status, reason) in cases {
        let resp = call(&p.url(path)).await?;
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200, "{path}");
        assert_eq!(field(&resp, "content-type"), Some("application/grpc"));
        assert_eq!(field(&resp, "grpc-status"), Some(status), "{path}");
        let message = field(&resp, "grpc-message").unwrap_or_default().to_string();
        assert!(message.starts_with(&format!("{reason}: ")), "{path}: {message}");
        assert!(field(&resp, "proxy-status").is_some_and(|s| s.contains(reason)), "{path}");
        let body = resp.into_body().collect().await?.to_bytes();
        assert!(body.is_empty(), "{path}: a Trailers-Only answer has no body");
    }
    // The same failure to a client that is not gRPC is problem+json, and so
    // is one over HTTP/1.1, which never carries gRPC.
    let plain = support::get(&p.url("/v1/orders/not-an-id")).await?;
    assert_eq!(plain.status, 400);
    assert_eq!(plain.header("content-type"), Some("application/problem+json"));
    let req = Request::post(p.url("/v1/orders/not-an-id"))
        .header("content-type", "application/grpc")
        .body(Full::new(Bytes::new()))?;
    let h1 = support::send(req).await?;
    assert_eq!(h1.status, 400);
    assert_eq!(h1.header("content-type"), Some("application/problem+json"));
    Ok(())
}

/// A Python that has grpcio (Debian's `python3-grpcio`, or one from PyPI),
/// or why there is none. `.ci/run` installs it and sets
/// `SHARDGATE_REQUIRE_GRPCIO`: the interop test then fails without it.
fn grpcio_python() -> Result<Option<&'static str>, BoxError> {
    for python in ["python3", "/usr/bin/python3"] {
        let ok = std::process::Command::new(python)
            .args(["-c", "import grpc"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Ok(Some(python));
        }
    }
    if std::env::var_os("SHARDGATE_REQUIRE_GRPCIO").is_some() {
        return Err("SHARDGATE_REQUIRE_GRPCIO is set but no python3 imports grpc".into());
    }
    eprintln!("SKIPPED: the gRPC interop test needs Python's grpcio (apt-get install python3-grpcio)");
    Ok(None)
}

const INTEROP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/grpc/interop.py");

/// A grpcio backend for `region`, killed when dropped.
struct GrpcBackend(std::process::Child, u16);

impl GrpcBackend {
    fn start(python: &str, region: &str) -> Result<GrpcBackend, BoxError> {
        GrpcBackend::start_with(python, &[region])
    }

    fn start_with(python: &str, args: &[&str]) -> Result<GrpcBackend, BoxError> {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python)
            .args([INTEROP, "serve"])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or("no stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let port = line.trim().parse().map_err(|_| format!("backend printed {line:?}, not a port"))?;
        Ok(GrpcBackend(child, port))
    }
}

impl Drop for GrpcBackend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The route a gRPC service's calls take, by the id in their metadata.
/// `yaml` (a test table over `dead`) with `region`'s mapping made `with`
/// (its endpoints and keys, e.g. `upstreams: ["h2c://..."]`).
pub(crate) fn region_as(yaml: &str, dead: std::net::SocketAddr, region: &str, with: &str) -> String {
    yaml.replace(&format!("{region}: {{ upstreams: [\"http://{dead}\"] }}"), &format!("{region}: {{ {with} }}"))
}

/// A region's mapping served by `backend` over h2c.
fn h2c(backend: &GrpcBackend) -> String {
    format!("upstreams: [\"h2c://127.0.0.1:{}\"]", backend.1)
}

pub(crate) const ECHO_ROUTE: &str = "  - name: echo\n    match: { path: \"/echo.Echo/{method}\" }\n    id: { metadata: x-entity-id, formats: [iuid] }\n";

#[tokio::test]
async fn grpc_calls_of_every_kind_reach_the_owner_through_h2c_backends() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let backends =
        [GrpcBackend::start(python, "eu")?, GrpcBackend::start(python, "kz")?, GrpcBackend::start(python, "us")?];
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut yaml = table(dead, dead, dead, "") + ECHO_ROUTE;
    for (b, region) in backends.iter().zip(["eu", "kz", "us"]) {
        yaml = region_as(&yaml, dead, region, &h2c(b));
    }
    let p = proxy(&yaml).await?;
    let address = p.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    let run = |id: String| {
        let address = address.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(python).args([INTEROP, "call", &address, &id]).output()
        })
    };
    for (country, region) in [(7u8, "kz"), (49, "eu"), (1, "us")] {
        let output = run(iuid(country)).await??;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "client failed: {stderr}");
        let seen: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        let r = region;
        assert_eq!(seen["unary"], format!("{r}:hi"), "{seen}");
        assert_eq!(seen["unary_trailers"]["x-region"], r, "trailers reach the client: {seen}");
        assert_eq!(seen["collect"], format!("{r}:a+b+c"), "client streaming: {seen}");
        let fan: Vec<String> = (0..4).map(|i| format!("{r}:{i}")).collect();
        assert_eq!(seen["fan"], serde_json::json!(fan), "server streaming: {seen}");
        assert_eq!(seen["chat"], serde_json::json!([format!("{r}:one"), format!("{r}:two")]), "bidirectional: {seen}");
        // The backend's error status, message and trailers, intact.
        assert_eq!(seen["fail"]["code"], "FAILED_PRECONDITION", "{seen}");
        assert_eq!(seen["fail"]["details"], format!("nope from {r}"), "{seen}");
        assert_eq!(seen["fail"]["trailers"]["x-detail"], format!("why-{r}"), "{seen}");
        assert_eq!(seen["fail"]["trailers"]["grpc-status-details-bin"], "080964657461696c", "{seen}");
        // The call's deadline bounds the attempt (the backend takes 3 s).
        assert_eq!(seen["slow"], "DEADLINE_EXCEEDED", "{seen}");
        assert!(seen["slow_seconds"].as_f64().is_some_and(|s| s < 2.0), "{seen}");
        // 16 MiB streamed in 1 MiB messages.
        assert_eq!(seen["big"], format!("{r}:{}", 16 << 20), "{seen}");
        assert_eq!(seen["bad_id"]["code"], "INVALID_ARGUMENT", "{seen}");
        assert!(seen["bad_id"]["details"].as_str().is_some_and(|d| d.starts_with("bad_length")), "{seen}");
        assert_eq!(seen["no_id"]["code"], "INVALID_ARGUMENT", "{seen}");
    }
    Ok(())
}

#[tokio::test]
async fn a_grpc_call_to_a_dead_region_is_unavailable() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let eu = GrpcBackend::start(python, "eu")?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut yaml = table(dead, dead, dead, "") + ECHO_ROUTE;
    yaml = region_as(&yaml, dead, "eu", &h2c(&eu));
    yaml = region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2c://{dead}\"]"));
    let p = proxy(&yaml).await?;
    let address = p.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    let script = format!(
        "import grpc\nch = grpc.insecure_channel({address:?})\ntry:\n    ch.unary_unary('/echo.Echo/Unary')(b'x', metadata=(('x-entity-id', {id:?}),), timeout=10)\n    print('no error')\nexcept grpc.RpcError as e:\n    print(e.code().name, e.details())\n",
        id = iuid(7)
    );
    let output = tokio::task::spawn_blocking(move || std::process::Command::new(python).args(["-c", &script]).output())
        .await??;
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.starts_with("UNAVAILABLE upstream_connect_failed"),
        "{said} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// A unary call to `url` routed by `id`: its status, the answer's message
/// and its `grpc-status` (in the trailers, or in the head of a
/// Trailers-Only answer).
async fn unary(
    client: &Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>,
    url: String,
    id: String,
) -> Result<(u16, Bytes, Option<String>), BoxError> {
    let mut frame = vec![0u8];
    frame.extend_from_slice(&2u32.to_be_bytes());
    frame.extend_from_slice(b"hi");
    let req = Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", id)
        .body(Full::new(Bytes::from(frame)))?;
    let resp = client.request(req).await?;
    let status = resp.status().as_u16();
    let in_head = field(&resp, "grpc-status").map(str::to_string);
    let collected = resp.into_body().collect().await?;
    let in_trailers = collected.trailers().and_then(|t| t.get("grpc-status")).and_then(|v| v.to_str().ok());
    let grpc_status = in_trailers.map(str::to_string).or(in_head);
    let body = collected.to_bytes();
    Ok((status, body.slice(5.min(body.len())..), grpc_status))
}

#[tokio::test]
async fn a_mesh_over_h2c_carries_a_thousand_calls_on_a_handful_of_connections() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let backends =
        [GrpcBackend::start(python, "eu")?, GrpcBackend::start(python, "kz")?, GrpcBackend::start(python, "us")?];
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let (listeners, gw) = support::three_listeners().await?;
    let mut gateways = Vec::new();
    for (l, region) in listeners.into_iter().zip(["eu", "kz", "us"]) {
        let top = format!("region: {region}\nmesh: {{ trusted_peers: [\"127.0.0.1/32\"] }}");
        let mut yaml = table(dead, dead, dead, &top) + ECHO_ROUTE;
        for (i, name) in ["eu", "kz", "us"].iter().enumerate() {
            yaml = region_as(&yaml, dead, name, &format!("{}, peer: \"h2c://{}\"", h2c(&backends[i]), gw[i]));
        }
        gateways.push(support::proxy_on(l, &yaml).await?);
    }
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..1000usize {
        let (country, region) = [(49u8, "eu"), (7, "kz"), (1, "us")][i % 3];
        let entry = &gateways[(i / 3) % 3];
        let (client, url) = (client.clone(), entry.url("/echo.Echo/Unary"));
        calls.spawn(async move { (region, unary(&client, url, iuid(country)).await) });
    }
    let mut answered = 0;
    while let Some(done) = calls.join_next().await {
        let (region, result) = done?;
        let (status, message, grpc_status) = result?;
        assert_eq!((status, grpc_status.as_deref()), (200, Some("0")));
        assert_eq!(message, format!("{region}:hi").as_bytes());
        answered += 1;
    }
    assert_eq!(answered, 1000);
    // Each gateway reaches two peers and its own backend, on at most four
    // HTTP/2 connections each, however many calls it carries.
    for (g, region) in gateways.iter().zip(["eu", "kz", "us"]) {
        let opened = g.proxy.as_ref().map_or(0, |p| p.shared().upstreams.connects());
        assert!((3..=12).contains(&opened), "{region} opened {opened} connections for its calls");
    }
    Ok(())
}

#[tokio::test]
async fn h2c_backends_are_checked_by_the_grpc_health_protocol() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let serving = GrpcBackend::start(python, "kz")?;
    let not_serving = GrpcBackend::start_with(python, &["kz-down", "not-serving"])?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let checks = "upstream: { health: { interval: 50ms, timeout: 2s, rise: 1, fall: 3, grpc: true } }";
    let mut yaml = table(dead, dead, dead, checks) + ECHO_ROUTE;
    let both = format!("upstreams: [\"h2c://127.0.0.1:{}\", \"h2c://127.0.0.1:{}\"]", serving.1, not_serving.1);
    yaml = region_as(&yaml, dead, "kz", &both);
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    // Who answers `n` calls in a row, once every one of them lands on the
    // same set of backends, within 10 s (the checks take a moment).
    let settle = |url: String, want: &'static [&'static str]| {
        let client = client.clone();
        async move {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            loop {
                let mut answered = std::collections::BTreeSet::new();
                for _ in 0..20 {
                    let (_, message, _) = unary(&client, url.clone(), iuid(7)).await?;
                    answered.insert(String::from_utf8_lossy(&message).into_owned());
                }
                if answered.iter().map(String::as_str).eq(want.iter().copied()) || std::time::Instant::now() > deadline
                {
                    return Ok::<_, BoxError>(answered.into_iter().collect::<Vec<_>>());
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    };
    // Once checked, the endpoint that is not serving gets no calls.
    let p = proxy(&yaml).await?;
    assert_eq!(settle(p.url("/echo.Echo/Unary"), &["kz:hi"]).await?, ["kz:hi"]);
    // Without `grpc`, an HTTP/2 endpoint is asked GET /healthz, which the
    // server answers whatever its gRPC health: both take calls in turn.
    let p = proxy(&yaml.replace(", grpc: true", "")).await?;
    assert_eq!(settle(p.url("/echo.Echo/Unary"), &["kz-down:hi", "kz:hi"]).await?, ["kz-down:hi", "kz:hi"]);
    Ok(())
}

#[tokio::test]
async fn grpc_calls_are_routed_by_a_field_of_their_first_message() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let backends =
        [GrpcBackend::start(python, "eu")?, GrpcBackend::start(python, "kz")?, GrpcBackend::start(python, "us")?];
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let routes = "  - name: by-field\n    match: { path: \"/field.Echo/{method}\" }\n    id: { grpc_field: \"1\", formats: [iuid] }\n  - name: by-nested-field\n    match: { path: \"/nested.Echo/{method}\" }\n    id: { grpc_field: \"2.1\", formats: [iuid] }\n";
    let mut yaml = table(dead, dead, dead, "") + routes;
    for (b, region) in backends.iter().zip(["eu", "kz", "us"]) {
        yaml = region_as(&yaml, dead, region, &h2c(b));
    }
    let p = proxy(&yaml).await?;
    let address = p.url("").trim_start_matches("http://").trim_end_matches('/').to_string();
    for (country, region) in [(7u8, "kz"), (49, "eu"), (1, "us")] {
        let (address, id) = (address.clone(), iuid(country));
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(python).args([INTEROP, "fields", &address, &id]).output()
        })
        .await??;
        assert!(output.status.success(), "client failed: {}", String::from_utf8_lossy(&output.stderr));
        let seen: serde_json::Value = serde_json::from_slice(&output.stdout)?;
        for (case, how) in [
            ("top", "field 1"),
            ("nested", "field 1 of field 2"),
            ("raw", "16 raw bytes"),
            ("chat", "bidirectional"),
            ("collect", "a 100 kB second message streamed"),
        ] {
            assert_eq!(seen[case], region, "{how}: {seen}");
        }
        let refused = |case: &str, code: &str, reason: &str| {
            assert_eq!(seen[case]["code"], code, "{case}: {seen}");
            assert!(seen[case]["details"].as_str().is_some_and(|d| d.starts_with(reason)), "{case}: {seen}");
        };
        refused("missing", "INVALID_ARGUMENT", "missing_id");
        refused("twice", "INVALID_ARGUMENT", "bad_message");
        refused("large", "RESOURCE_EXHAUSTED", "message_too_large");
        refused("compressed", "INVALID_ARGUMENT", "bad_message");
    }
    Ok(())
}

#[test]
fn message_field_ids_are_checked_with_their_line() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    for (id, want) in [
        ("{ grpc_field: \"2.x\", formats: [iuid] }", "invalid field path \"2.x\""),
        ("{ grpc_field: \"0\", formats: [iuid] }", "field number 0 is outside"),
        ("{ grpc_field: \"1.2.3.4.5.6.7.8.9\", formats: [iuid] }", "more than 8 levels"),
        ("{ grpc_field: \"1\", metadata: x-id, formats: [iuid] }", "exactly one of"),
        ("{ grpc_field: \"1\", formats: [uuidv7] }\n    placement: search", "a gRPC message field cannot be"),
    ] {
        let route = format!("  - name: g\n    match: {{ path: \"/g.G/{{m}}\" }}\n    id: {id}\n");
        let yaml = table(addr, addr, addr, "") + &route;
        let err = shardgate::config::load_str(&yaml, "t.yaml").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want) && err.contains("t.yaml:"), "{id}: {err}");
    }
}

#[tokio::test]
async fn h2_backends_over_tls_take_calls_and_health_checks() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let dir = tempfile::tempdir()?;
    let ca = crate::tls::Ca::new("grpc ca")?;
    let leaf = ca.leaf("grpc-kz")?;
    let write = |name: &str, text: &str| crate::tls::write(dir.path(), name, text);
    let (ca_path, cert, key) =
        (write("ca.pem", &ca.pem())?, write("kz.crt", &leaf.cert_pem)?, write("kz.key", &leaf.key_pem)?);
    let kz = GrpcBackend::start_with(python, &["kz", &format!("tls={cert},{key}")])?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let top = format!(
        "upstream: {{ tls: {{ ca: \"{ca_path}\" }}, health: {{ interval: 50ms, timeout: 2s, rise: 1, fall: 3, grpc: true }} }}"
    );
    let mut yaml = table(dead, dead, dead, &top) + ECHO_ROUTE;
    yaml = region_as(&yaml, dead, "kz", &format!("upstreams: [\"h2://127.0.0.1:{}\"]", kz.1));
    let p = proxy(&yaml).await?;
    // Health checks over TLS keep the endpoint up while calls go.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    for _ in 0..5 {
        let (status, message, grpc_status) = unary(&client, p.url("/echo.Echo/Unary"), iuid(7)).await?;
        assert_eq!((status, grpc_status.as_deref()), (200, Some("0")));
        assert_eq!(message, &b"kz:hi"[..]);
    }
    assert!(p.proxy.as_ref().is_some_and(|p| p.shared().upstreams.connects() == 1), "one TLS connection carried them");
    Ok(())
}

/// Messages as they are, for tonic's client without generated code.
#[derive(Clone, Copy, Debug, Default)]
struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(&mut self, item: Bytes, dst: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        bytes::BufMut::put(dst, item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(&mut self, src: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Bytes>, tonic::Status> {
        let n = bytes::Buf::remaining(src);
        Ok(Some(bytes::Buf::copy_to_bytes(src, n)))
    }
}

/// A tonic call's request: `message`, the id in metadata when given.
fn tonic_request<T>(message: T, id: Option<&str>) -> Result<tonic::Request<T>, BoxError> {
    let mut req = tonic::Request::new(message);
    if let Some(id) = id {
        req.metadata_mut().insert("x-entity-id", id.parse()?);
    }
    Ok(req)
}

#[tokio::test]
async fn tonic_calls_through_the_proxy_reach_the_owner() -> TestResult {
    use tonic::codegen::tokio_stream::{self, StreamExt};
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let backends = [GrpcBackend::start(python, "eu")?, GrpcBackend::start(python, "kz")?];
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let by_field = "  - name: by-field\n    match: { path: \"/field.Echo/{method}\" }\n    id: { grpc_field: \"1\", formats: [iuid] }\n";
    let mut yaml = table(dead, dead, dead, "") + ECHO_ROUTE + by_field;
    for (b, region) in backends.iter().zip(["eu", "kz"]) {
        yaml = region_as(&yaml, dead, region, &h2c(b));
    }
    yaml = region_as(&yaml, dead, "us", &format!("upstreams: [\"h2c://{dead}\"]"));
    let p = proxy(&yaml).await?;
    let channel = tonic::transport::Channel::from_shared(p.url(""))?.connect().await?;
    let mut grpc = tonic::client::Grpc::new(channel);
    let path = |p: &'static str| http::uri::PathAndQuery::from_static(p);
    let kz = iuid(7);

    grpc.ready().await?;
    let unary = grpc.unary(tonic_request(Bytes::from_static(b"hi"), Some(&kz))?, path("/echo.Echo/Unary"), Raw).await?;
    assert_eq!(unary.metadata().get("x-region").and_then(|v| v.to_str().ok()), Some("kz"), "trailers");
    assert_eq!(unary.into_inner(), &b"kz:hi"[..]);

    // The id in field 1 of the message: `0x0a`, its length, its text.
    let mut message = vec![0x0a, u8::try_from(kz.len())?];
    message.extend_from_slice(kz.as_bytes());
    grpc.ready().await?;
    let by_message = grpc.unary(tonic_request(Bytes::from(message), None)?, path("/field.Echo/Unary"), Raw).await?;
    assert!(by_message.into_inner().starts_with(b"kz:"));

    grpc.ready().await?;
    let fan =
        grpc.server_streaming(tonic_request(Bytes::from_static(b"3"), Some(&kz))?, path("/echo.Echo/Fan"), Raw).await?;
    let got: Vec<Bytes> = fan.into_inner().collect::<Result<_, _>>().await?;
    assert_eq!(got, [&b"kz:0"[..], b"kz:1", b"kz:2"]);

    grpc.ready().await?;
    let parts = tokio_stream::iter([Bytes::from_static(b"a"), Bytes::from_static(b"b")]);
    let collected = grpc.client_streaming(tonic_request(parts, Some(&kz))?, path("/echo.Echo/Collect"), Raw).await?;
    assert_eq!(collected.into_inner(), &b"kz:a+b"[..]);

    grpc.ready().await?;
    let chat = tokio_stream::iter([Bytes::from_static(b"one"), Bytes::from_static(b"two")]);
    let answers = grpc.streaming(tonic_request(chat, Some(&kz))?, path("/echo.Echo/Chat"), Raw).await?;
    let got: Vec<Bytes> = answers.into_inner().collect::<Result<_, _>>().await?;
    assert_eq!(got, [&b"kz:one"[..], b"kz:two"]);

    // The backend's status, message, metadata and details, intact.
    grpc.ready().await?;
    let failed = grpc.unary(tonic_request(Bytes::new(), Some(&kz))?, path("/echo.Echo/Fail"), Raw).await;
    let status = failed.err().ok_or("Fail answered")?;
    assert_eq!(status.code(), tonic::Code::FailedPrecondition);
    assert_eq!(status.message(), "nope from kz");
    assert_eq!(status.metadata().get("x-detail").and_then(|v| v.to_str().ok()), Some("why-kz"));
    assert_eq!(status.details(), b"\x08\x09detail");

    // tonic's deadline goes as grpc-timeout (the backend takes 3 s): the
    // call ends by it, whoever says so first (tonic, the proxy, grpcio).
    grpc.ready().await?;
    let mut slow = tonic_request(Bytes::new(), Some(&kz))?;
    slow.set_timeout(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    let late = grpc.unary(slow, path("/echo.Echo/Slow"), Raw).await.err().ok_or("Slow answered")?;
    assert!(matches!(late.code(), tonic::Code::DeadlineExceeded | tonic::Code::Cancelled), "{late:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));

    // The proxy's own answers: a malformed id, a region nothing answers in.
    for (id, code, reason) in [
        ("not-an-id".to_string(), tonic::Code::InvalidArgument, "bad_length"),
        (iuid(1), tonic::Code::Unavailable, "upstream_connect_failed"),
    ] {
        grpc.ready().await?;
        let refused = grpc.unary(tonic_request(Bytes::new(), Some(&id))?, path("/echo.Echo/Unary"), Raw).await;
        let status = refused.err().ok_or("answered")?;
        assert_eq!(status.code(), code, "{id}: {status:?}");
        assert!(status.message().starts_with(reason), "{id}: {status:?}");
    }
    Ok(())
}

#[tokio::test]
async fn a_calls_grpc_timeout_bounds_its_attempt_at_the_proxy() -> TestResult {
    // An HTTP/1.1 backend that answers `/t/slow/` after 2 s and knows
    // nothing of gRPC deadlines: the status can only be the proxy's.
    let b = three_backends().await?;
    let p = proxy(&table(b[0].addr, b[1].addr, b[2].addr, "upstream: { eject_after: 2 }")).await?;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let call = |timeout: Option<&'static str>| -> Result<Request<Full<Bytes>>, BoxError> {
        let mut req = Request::post(p.url(&format!("/t/slow/{}", iuid(7))))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        if let Some(t) = timeout {
            req = req.header("grpc-timeout", t);
        }
        Ok(req.body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))?)
    };
    let started = std::time::Instant::now();
    let late = client.request(call(Some("300m"))?).await?;
    assert_eq!(field(&late, "grpc-status"), Some("4"), "DEADLINE_EXCEEDED");
    let said = field(&late, "grpc-message").unwrap_or_default().to_string();
    assert!(said.starts_with("upstream_timeout"), "{said}");
    assert!(started.elapsed() < std::time::Duration::from_millis(1500), "{:?}", started.elapsed());
    // Without one, the route's timeouts alone: the backend's answer comes.
    let answered = client.request(call(None)?).await?;
    assert_eq!(answered.status(), 200);
    assert_eq!(field(&answered, "grpc-status"), None, "the HTTP backend's own answer");
    // The client's deadline running out is not the endpoint's failure: many
    // in a row (more than `eject_after`) leave it serving everyone else.
    for _ in 0..4 {
        let late = client.request(call(Some("20m"))?).await?;
        assert_eq!(field(&late, "grpc-status"), Some("4"));
    }
    let other = support::get(&p.url(&format!("/v1/orders/{}", iuid(7)))).await?;
    assert_eq!(other.status, 200, "{}", String::from_utf8_lossy(&other.body));
    Ok(())
}

/// The peak resident memory of process `pid`, in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> Result<u64, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).ok_or("no VmHWM")?;
    Ok(line.split_whitespace().nth(1).ok_or("no number")?.parse()?)
}

#[tokio::test]
async fn a_large_streamed_call_passes_in_flat_memory() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let kz = GrpcBackend::start(python, "kz")?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let text = table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + ECHO_ROUTE;
    let text = region_as(&text, dead, "kz", &h2c(&kz));
    let dir = tempfile::tempdir()?;
    let (child, port, _) = support::binary::spawn_table(dir.path(), &text, None, None).await?;
    let pid = child.0.id();
    let big = |mib: u32| {
        let id = iuid(7);
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(python)
                .args([INTEROP, "big", &format!("127.0.0.1:{port}"), &id, &mib.to_string()])
                .output()
        })
    };
    // Warmed up by a small call first: connections, buffers, the allocator's pools.
    let small = big(1).await??;
    assert_eq!(String::from_utf8_lossy(&small.stdout).trim(), format!("kz:{}", 1 << 20));
    let before = peak_kib(pid)?;
    let large = big(64).await??;
    assert_eq!(
        String::from_utf8_lossy(&large.stdout).trim(),
        format!("kz:{}", 64u64 << 20),
        "{}",
        String::from_utf8_lossy(&large.stderr)
    );
    let grew = peak_kib(pid)?.saturating_sub(before);
    assert!(grew < 8 * 1024, "64 MiB streamed through raised the proxy's peak memory by {grew} KiB");
    Ok(())
}

#[tokio::test]
async fn an_h2_endpoint_with_every_stream_taken_is_saturated() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let kz = GrpcBackend::start(python, "kz")?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut yaml = table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + ECHO_ROUTE;
    yaml = region_as(&yaml, dead, "kz", &format!("{}, upstream: {{ max_connections: 1, max_pending: 2 }}", h2c(&kz)));
    let p = proxy(&yaml).await?;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    // One connection carries 100 streams, and 2 more may wait on it: of 110
    // slow calls at once, 8 are refused at once, the rest answered.
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..110 {
        let (client, url) = (client.clone(), p.url("/echo.Echo/Slow"));
        calls.spawn(async move { unary(&client, url, iuid(7)).await });
    }
    let mut seen = std::collections::BTreeMap::new();
    while let Some(done) = calls.join_next().await {
        let (_, _, grpc_status) = done??;
        *seen.entry(grpc_status.unwrap_or_default()).or_insert(0) += 1;
    }
    assert_eq!(seen.get("8"), Some(&8), "RESOURCE_EXHAUSTED: {seen:?}");
    assert_eq!(seen.get("0"), Some(&102), "answered: {seen:?}");
    Ok(())
}

#[tokio::test]
async fn a_create_call_gets_its_minted_id_in_metadata() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let backends = [GrpcBackend::start(python, "eu")?, GrpcBackend::start(python, "kz")?];
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let create = "  - name: create\n    match: { path: \"/orders.Create/{method}\" }\n    mint: { format: iuid, entity: IntercityOrder, country: { header: x-country } }\n";
    let mut yaml = table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + create;
    for (b, region) in backends.iter().zip(["eu", "kz"]) {
        yaml = region_as(&yaml, dead, region, &h2c(b));
    }
    let p = proxy(&yaml).await?;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    for (country, region) in [("KZ", "kz"), ("DE", "eu")] {
        let req = Request::post(p.url("/orders.Create/WhoAmI"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-country", country)
            .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))?;
        let resp = client.request(req).await?;
        let minted = field(&resp, "x-entity-id").ok_or("no minted id in the answer's metadata")?.to_string();
        let body = resp.into_body().collect().await?.to_bytes();
        // The backend saw the same id in the call's metadata, in the owner's region.
        assert_eq!(body.get(5..), Some(format!("{region}:{minted}").as_bytes()), "{country}");
        let id = shardgate::ids::Iuid::parse(&minted).map_err(|e| format!("{minted}: {e:?}"))?;
        assert_eq!(id.country(), if country == "KZ" { 7 } else { 49 });
    }
    // A create that fails at once (no such method) announces no id.
    let req = Request::post(p.url("/orders.Create/NoSuchMethod"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-country", "KZ")
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))?;
    let failed = client.request(req).await?;
    assert_eq!(field(&failed, "grpc-status"), Some("12"));
    assert_eq!(field(&failed, "x-entity-id"), None);
    Ok(())
}

#[tokio::test]
async fn a_grpc_only_route_refuses_what_is_not_a_grpc_call() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    let kz = GrpcBackend::start(python, "kz")?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let by_field = "  - name: by-field\n    match: { path: \"/field.Echo/{method}\" }\n    id: { grpc_field: \"1\", formats: [iuid] }\n    protocol: grpc\n";
    let route = format!("{}    protocol: grpc\n{by_field}", ECHO_ROUTE);
    let yaml =
        region_as(&(table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + &route), dead, "kz", &h2c(&kz));
    let p = proxy(&yaml).await?;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    let (_, message, grpc_status) = unary(&client, p.url("/echo.Echo/Unary"), iuid(7)).await?;
    assert_eq!((message, grpc_status.as_deref()), (Bytes::from_static(b"kz:hi"), Some("0")));
    let req = Request::post(p.url("/echo.Echo/Unary"))
        .header("content-type", "application/json")
        .header("x-entity-id", iuid(7))
        .body(Full::new(Bytes::from_static(b"{}")))?;
    let plain = support::send(req).await?;
    assert_eq!(plain.status, 415);
    assert_eq!(plain.json()?["reason"], "not_grpc");
    // Also on a route whose id is in the message, which is then never read.
    let by_message =
        support::send(Request::post(p.url("/field.Echo/Unary")).body(Full::new(Bytes::from_static(b"{}")))?).await?;
    assert_eq!(by_message.status, 415);
    // An unknown protocol is refused with its line.
    let bad = shardgate::config::load_str(&yaml.replace("protocol: grpc", "protocol: grcp"), "t.yaml");
    let err = bad.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("unknown protocol \"grcp\"") && err.contains("t.yaml:"), "{err}");
    Ok(())
}

#[tokio::test]
async fn connections_the_backend_closes_cost_no_call() -> TestResult {
    let Some(python) = grpcio_python()? else { return Ok(()) };
    // The backend sends GOAWAY on every connection 300 ms after it opened.
    let kz = GrpcBackend::start_with(python, &["kz", "age=300"])?;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let yaml = region_as(
        &(table(dead, dead, dead, "upstream: { health: { interval: 0s } }") + ECHO_ROUTE),
        dead,
        "kz",
        &h2c(&kz),
    );
    let p = proxy(&yaml).await?;
    let client = Client::builder(TokioExecutor::new()).http2_only(true).build_http::<Full<Bytes>>();
    for _ in 0..40 {
        let (_, message, grpc_status) = unary(&client, p.url("/echo.Echo/Unary"), iuid(7)).await?;
        assert_eq!((message, grpc_status.as_deref()), (Bytes::from_static(b"kz:hi"), Some("0")));
        tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    }
    let opened = p.proxy.as_ref().map_or(0, |p| p.shared().upstreams.connects());
    assert!(opened >= 3, "the backend closed its connections, and new ones took the calls ({opened})");
    Ok(())
}
