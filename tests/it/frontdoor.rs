//! The rest of an API through the same front door: routes that go by
//! their path alone (`to:` a region, or the local one) and prefix routes,
//! on real sockets against real backends.

use crate::support::{self, get, iuid, three_backends, BoxError, Running, TestResult};

/// The support table with `routes` appended to its route list and `top`
/// among its top-level keys.
async fn front_door(top: &str, routes: &str, kz_failover: bool) -> Result<(Running, [Running; 3]), BoxError> {
    let b = three_backends().await?;
    let mut yaml = support::table(b[0].addr, b[1].addr, b[2].addr, top) + routes;
    if kz_failover {
        let kz = format!("kz: {{ upstreams: [\"http://{}\"] }}", b[1].addr);
        yaml = yaml.replace(&kz, &format!("kz: {{ upstreams: [\"http://{}\"], failover: eu }}", b[1].addr));
    }
    Ok((support::proxy(&yaml).await?, b))
}

/// The region whose backend answered, and the path it was asked for.
async fn landed(p: &Running, path: &str) -> Result<(u16, String, String), BoxError> {
    let got = get(&p.url(path)).await?;
    let region = got.header("x-backend-region").unwrap_or("-").to_string();
    let asked = got.json().ok().and_then(|j| j["path"].as_str().map(str::to_string)).unwrap_or_default();
    Ok((got.status.as_u16(), region, asked))
}

const NO_ID_ROUTES: &str = r#"  - name: login
    match: { path: "/login" }
    to: { region: kz }
  - name: static
    match: { prefix: "/static/" }
    to: local
  - name: static-v2
    match: { prefix: "/static/v2" }
    to: { region: us }
  - name: everything-else
    match: { prefix: "/" }
    to: { region: eu }
"#;

#[tokio::test]
async fn routes_without_an_id_go_to_their_region_and_the_most_specific_prefix_wins() -> TestResult {
    let (p, _b) = front_door("default_region: us\nserver: { debug_headers: true }", NO_ID_ROUTES, false).await?;
    for (path, want) in [
        ("/login", "kz"),
        // `to: local` on an instance that serves no region: default_region.
        ("/static", "us"),
        ("/static/", "us"),
        ("/static/app.js", "us"),
        ("/static/v2/app.js", "us"),
        ("/static/v2", "us"),
        ("/favicon.ico", "eu"),
        ("/", "eu"),
        ("/login/other", "eu"),
        ("/staticx", "eu"),
    ] {
        let (status, region, asked) = landed(&p, path).await?;
        assert_eq!((status, region.as_str(), asked.as_str()), (200, want, path), "{path}");
    }
    // An id route stays more specific than the catch-all, and a path under
    // it that matches no template falls through to the catch-all.
    let (_, region, _) = landed(&p, &format!("/v1/orders/{}", iuid(7))).await?;
    assert_eq!(region, "kz");
    let (_, region, _) = landed(&p, "/v1/orders/a/b").await?;
    assert_eq!(region, "eu");
    let got = get(&p.url("/login")).await?;
    assert_eq!(got.header("x-shardgate-route"), Some("login"));
    assert_eq!(got.header("x-shardgate-rule"), Some("the route's region"));
    let got = get(&p.url("/static/a")).await?;
    assert_eq!(got.header("x-shardgate-rule"), Some("local region"));
    Ok(())
}

#[tokio::test]
async fn a_route_to_the_local_region_uses_the_served_region_and_its_failover() -> TestResult {
    let routes = "  - name: home\n    match: { prefix: \"/home/\" }\n    to: local\n";
    let (p, b) = front_door("region: kz\nmesh: { trusted_peers: [\"127.0.0.1/32\"] }", routes, true).await?;
    let (status, region, _) = landed(&p, "/home/index.html").await?;
    assert_eq!((status, region.as_str()), (200, "kz"));
    // kz's backend gone: a read fails over to eu; a write does not.
    b[1].stop();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let (status, region, _) = landed(&p, "/home/index.html").await?;
    assert_eq!((status, region.as_str()), (200, "eu"));
    let eu_before = b[0].hits();
    let post = http::Request::post(p.url("/home/form")).body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let got = support::send(post).await?;
    assert!(got.status.is_server_error(), "{:?}", got.body);
    assert_eq!(b[0].hits(), eu_before, "a write reached the failover region");
    Ok(())
}

#[tokio::test]
async fn a_path_that_matches_nothing_is_still_no_route() -> TestResult {
    let routes = "  - name: static\n    match: { prefix: \"/static/\" }\n    to: { region: eu }\n";
    let (p, _b) = front_door("", routes, false).await?;
    let got = get(&p.url("/elsewhere")).await?;
    assert_eq!(got.status, 404);
    assert_eq!(got.json()?["reason"], "no_route");
    Ok(())
}

#[test]
fn no_id_routes_are_checked_with_their_line() {
    // An accepted table leaves `err` empty, which contains no expected text.
    let cases = [
        ("  - { name: a, match: { path: \"/a\" }, to: { region: nowhere } }\n", "unknown region"),
        ("  - { name: a, match: { path: \"/a\" }, to: somewhere }\n", "unknown target"),
        ("  - { name: a, match: { path: \"/a\" }, to: local }\n", "names none"),
        ("  - { name: a, match: { prefix: \"/a/{x}\" }, to: { region: eu } }\n", "not a plain path"),
        ("  - { name: a, match: { path: \"/a\", prefix: \"/a\" }, to: { region: eu } }\n", "not both"),
        ("  - { name: a, match: { methods: [GET] }, to: { region: eu } }\n", "no `path` or `prefix`"),
        ("  - { name: a, match: { path: \"/a/{id}\" }, id: { path_param: id, formats: [iuid] }, to: { region: eu } }\n", "both `to` and `id`"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, placement: hash }\n", "it places no id"),
        ("  - { name: a, match: { path: \"/a\" }, to: { regio: eu } }\n", "`local`, or a mapping"),
        ("  - { name: a, match: { prefix: \"/static/\" }, to: { region: eu } }\n  - { name: b, match: { path: \"/static/{*rest}\" }, to: { region: eu } }\n", "unreachable"),
        ("  - { name: a, match: { prefix: \"/static/\" }, to: { region: eu } }\n  - { name: b, match: { path: \"/static/{*f}\" }, to: { region: eu } }\n", "conflicts with"),
        ("  - { name: a, match: { path: \"/a/{id}\" }, to: local, rewrite: { path: \"/b/{x}\" } }\n", "names {x}"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, rewrite: { strip_prefix: api } }\n", "not a plain path"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, rewrite: { strip_prefix: /a, path: /b } }\n", "not both"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, rewrite: { query: lose } }\n", "unknown query rule"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, rewrite: { prefix: /a } }\n", "prefix"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, policy: { attempt_timeout: 0s } }\n", "must be positive"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, policy: { attempt_timeout: 1m } }\n", "longer than request_timeout"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, policy: { retry_budget: { ratio: 2.0 } } }\n", "outside 0-1"),
        ("  - { name: a, match: { path: \"/a\" }, to: { region: eu }, policy: { retry: 1 } }\n", "retry"),
    ];
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    for (routes, want) in cases {
        let yaml = support::table(addr, addr, addr, "") + routes;
        let err = shardgate::config::load_str(&yaml, "t.yaml").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want), "{routes}: {err}");
        let line = yaml.lines().count() - routes.lines().count() + 1;
        assert!(
            err.contains(&format!("t.yaml:{line}:")) || err.contains(&format!("t.yaml:{}:", line + 1)),
            "{routes}: {err}"
        );
    }
}

/// What the backend behind `path` was asked for: its region, path and query.
async fn asked_for(p: &Running, path: &str) -> Result<(String, String, Option<String>), BoxError> {
    let got = get(&p.url(path)).await?;
    assert_eq!(got.status, 200, "{path}: {:?}", got.body);
    let echo = got.json()?;
    let query = echo["query"].as_str().map(str::to_string);
    Ok((echo["region"].as_str().unwrap_or("-").to_string(), echo["path"].as_str().unwrap_or("-").to_string(), query))
}

const REWRITES: &str = r#"  - name: api
    match: { prefix: "/api/" }
    to: { region: kz }
    rewrite: { strip_prefix: /api }
  - name: legacy-orders
    match: { path: "/old/orders/{id}" }
    id: { path_param: id, formats: [iuid] }
    rewrite: { path: "/v1/orders/{id}", query: drop }
"#;

#[tokio::test]
async fn a_rewrite_changes_what_the_backend_is_asked_for_not_what_is_routed() -> TestResult {
    let (p, _b) = front_door("server: { debug_headers: true }", REWRITES, false).await?;
    let cases = [
        ("/api/v1/things?y=1", ("kz", "/v1/things", Some("y=1"))),
        ("/api", ("kz", "/", None)),
        // Dot segments are gone before matching; percent-encoding stays.
        ("/api/a/../b%20c", ("kz", "/b%20c", None)),
    ];
    for (path, (region, upstream_path, query)) in cases {
        let asked = asked_for(&p, path).await?;
        assert_eq!(asked, (region.to_string(), upstream_path.to_string(), query.map(str::to_string)), "{path}");
    }
    // Routed by the client's path and its id; the backend asked for the template's path.
    let id = iuid(49);
    let asked = asked_for(&p, &format!("/old/orders/{id}?z=1")).await?;
    assert_eq!(asked, ("eu".to_string(), format!("/v1/orders/{id}"), None));
    let got = get(&p.url("/api/x")).await?;
    assert_eq!(got.header("x-shardgate-route"), Some("api"));
    Ok(())
}

#[tokio::test]
async fn a_peer_is_sent_the_clients_path_and_rewrites_it_itself() -> TestResult {
    let b = three_backends().await?;
    let (listeners, gw) = support::three_listeners().await?;
    let mut gateways = Vec::new();
    for (l, region) in listeners.into_iter().zip(["eu", "kz", "us"]) {
        let top = format!(
            "region: {region}\nmesh: {{ trusted_peers: [\"127.0.0.1/32\"] }}\nserver: {{ debug_headers: true }}"
        );
        let mut yaml = support::table(b[0].addr, b[1].addr, b[2].addr, &top) + REWRITES;
        for (i, name) in ["eu", "kz", "us"].iter().enumerate() {
            let plain = format!("{name}: {{ upstreams: [\"http://{}\"] }}", b[i].addr);
            let peered = format!("{name}: {{ upstreams: [\"http://{}\"], peer: \"http://{}\" }}", b[i].addr, gw[i]);
            yaml = yaml.replace(&plain, &peered);
        }
        gateways.push(support::proxy_on(l, &yaml).await?);
    }
    // Entered at eu: forwarded to kz's gateway with /api/..., which strips it.
    let asked = asked_for(&gateways[0], "/api/v1/things").await?;
    assert_eq!(asked, ("kz".to_string(), "/v1/things".to_string(), None));
    assert_eq!((gateways[0].handled(), gateways[1].handled()), (1, 1));
    Ok(())
}

/// `name`'s values as the backend saw them (the echo gives one as a string, several as a list).
fn echoed(echo: &serde_json::Value, name: &str) -> Vec<String> {
    match &echo["headers"][name] {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(list) => list.iter().filter_map(|v| v.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    }
}

const HEADER_RULES: &str = r#"headers:
  request: { set: { X-Env: prod, X-Tenant: everyone }, remove: [X-Debug] }
  response: { set: { Strict-Transport-Security: "max-age=60" }, remove: [X-Powered-By, Content-Type, Date] }
"#;

const HEADER_ROUTES: &str = r#"  - name: orders-with-rules
    match: { path: "/r/orders/{id}" }
    id: { path_param: id, formats: [iuid, uniqid] }
    headers:
      request:
        set: { X-Tenant: "{country}/{entity}", X-Route: "{route}" }
        add: { X-Trace-Note: "id {request_id} to {region}" }
      response:
        set: { X-Served-By: "{region}", X-Env: "{{prod}}" }
        add: { Cache-Control: no-store, X-Backend-Region: "{route}" }
  - name: orders-set
    match: { path: "/s/orders/{id}" }
    id: { path_param: id, formats: [iuid] }
    headers: { response: { set: { X-Backend-Region: "{route}" } } }
"#;

#[tokio::test]
async fn header_rules_edit_the_request_and_the_answer_with_the_requests_values() -> TestResult {
    let (p, _b) = front_door(HEADER_RULES, HEADER_ROUTES, false).await?;
    let id = iuid(7);
    let req = http::Request::get(p.url(&format!("/r/orders/{id}")))
        .header("x-debug", "1")
        .header("x-tenant", "forged")
        .header("x-request-id", "req-1")
        .body(http_body_util::Full::new(bytes::Bytes::new()))?;
    let got = support::send(req).await?;
    assert_eq!(got.status, 200);
    let echo = got.json()?;
    assert_eq!(echoed(&echo, "x-env"), ["prod"]);
    assert_eq!(echoed(&echo, "x-debug"), Vec::<String>::new());
    // The route's rules come after the table's: its X-Tenant replaces both.
    assert_eq!(echoed(&echo, "x-tenant"), ["KZ/IntercityOrder"]);
    assert_eq!(echoed(&echo, "x-route"), ["orders-with-rules"]);
    assert_eq!(echoed(&echo, "x-trace-note"), ["id req-1 to kz"]);
    assert_eq!(got.header("strict-transport-security"), Some("max-age=60"));
    assert_eq!(got.header("x-served-by"), Some("kz"));
    assert_eq!(got.header("x-env"), Some("{prod}"));
    assert_eq!(got.headers.get_all("cache-control").iter().count(), 1);
    // The backend's own fields: removed, added to after its value, replaced;
    // its `Date` removed, the proxy's own takes its place.
    assert_eq!(got.header("content-type"), None);
    assert_eq!(got.headers.get_all("date").iter().count(), 1);
    let values = |got: &support::Got| -> Vec<String> {
        got.headers.get_all("x-backend-region").iter().filter_map(|v| v.to_str().ok().map(str::to_string)).collect()
    };
    assert_eq!(values(&got), ["kz", "orders-with-rules"]);
    let got = get(&p.url(&format!("/s/orders/{id}"))).await?;
    assert_eq!(values(&got), ["orders-set"]);
    // A uniqid has no country: the route's X-Tenant is not written, and the
    // table's stays; the route's other fields are.
    let clock = shardgate::ids::SystemClock;
    let uniqid = shardgate::ids::UniqidMinter::new(&clock, 16).mint_for_shard(8, &mut rand::rng()).ok_or("shard")?;
    let echo = get(&p.url(&format!("/r/orders/{uniqid}"))).await?.json()?;
    assert_eq!(echoed(&echo, "x-tenant"), ["everyone"], "{echo}");
    assert_eq!(echoed(&echo, "x-route"), ["orders-with-rules"]);
    // The table's rules apply to every route, an answer the proxy made itself too.
    let got = get(&p.url("/v1/orders/nope")).await?;
    assert_eq!(got.status, 400);
    assert_eq!(got.header("strict-transport-security"), Some("max-age=60"));
    Ok(())
}

#[test]
fn header_rules_refuse_the_proxys_own_fields_with_their_line() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
    for (top, want) in [
        ("headers: { request: { set: { Via: x } } }", "the proxy writes itself"),
        ("headers: { request: { remove: [X-Forwarded-For] } }", "X-Forwarded-For"),
        ("headers: { response: { set: { Content-Length: \"1\" } } }", "Content-Length"),
        ("headers: { response: { add: { X-Shardgate-Region: x } } }", "X-Shardgate-Region"),
        ("headers: { request: { set: { X-A: \"{nope}\" } } }", "{nope} is not one of"),
        ("headers: { request: { set: { X-A: a }, add: { x-a: b } } }", "edited twice"),
        ("headers: { reqest: { set: { X-A: a } } }", "reqest"),
        ("headers: { request: { remove: [traceparent] } }", "trace context"),
        ("headers: { response: { set: { grpc-status: \"0\" } } }", "gRPC's protocol fields"),
    ] {
        let yaml = support::table(addr, addr, addr, top);
        let err = shardgate::config::load_str(&yaml, "t.yaml").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(want) && err.contains("t.yaml:"), "{top}: {err}");
    }
    // A route edits at most 64 fields a direction, the table's with its own.
    for (n, refused) in [(64, false), (65, true)] {
        let names: Vec<String> = (0..n).map(|i| format!("X-F{i}")).collect();
        let top = format!("headers: {{ request: {{ remove: [{}] }} }}", names.join(", "));
        let err = shardgate::config::load_str(&support::table(addr, addr, addr, &top), "t.yaml").err();
        let err = err.map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(err.contains("65 fields are edited on the request"), refused, "{n}: {err}");
    }
}

#[tokio::test]
async fn header_rules_are_applied_once_across_a_peer() -> TestResult {
    let b = three_backends().await?;
    let (listeners, gw) = support::three_listeners().await?;
    let mut gateways = Vec::new();
    for (l, region) in listeners.into_iter().zip(["eu", "kz", "us"]) {
        let top = format!(
            "region: {region}\nmesh: {{ trusted_peers: [\"127.0.0.1/32\"] }}\nheaders: {{ request: {{ add: {{ X-Hop: \"{{region}}\" }} }}, response: {{ add: {{ X-Answered: yes }} }} }}"
        );
        let mut yaml = support::table(b[0].addr, b[1].addr, b[2].addr, &top);
        for (i, name) in ["eu", "kz", "us"].iter().enumerate() {
            let plain = format!("{name}: {{ upstreams: [\"http://{}\"] }}", b[i].addr);
            let peered = format!("{name}: {{ upstreams: [\"http://{}\"], peer: \"http://{}\" }}", b[i].addr, gw[i]);
            yaml = yaml.replace(&plain, &peered);
        }
        gateways.push(support::proxy_on(l, &yaml).await?);
    }
    let got = get(&gateways[0].url(&format!("/v1/orders/{}", iuid(7)))).await?;
    assert_eq!((got.status.as_u16(), gateways[1].handled()), (200, 1));
    assert_eq!(echoed(&got.json()?, "x-hop"), ["kz"]);
    assert_eq!(got.headers.get_all("x-answered").iter().count(), 1);
    Ok(())
}

#[tokio::test]
async fn a_routes_policy_replaces_upstreams_timeouts_and_retries() -> TestResult {
    // eu's first endpoint closes every connection after reading the request
    // (a failure once sent); its second answers.
    let closing = support::raw_backend(|s| async move { drop(s) }).await?;
    let b = three_backends().await?;
    let routes = r#"  - name: patient
    match: { path: "/slow/{mode}/{id}" }
    to: { region: kz }
    rewrite: { path: "/t/{mode}/{id}" }
  - name: hasty
    match: { path: "/hasty/{mode}/{id}" }
    to: { region: kz }
    rewrite: { path: "/t/{mode}/{id}" }
    policy: { attempt_timeout: 300ms, request_timeout: 400ms }
  - name: retried
    match: { path: "/retried" }
    to: { region: eu }
  - name: never-retried
    match: { path: "/never-retried" }
    to: { region: eu }
    policy: { retries: 0, retry_budget: { ratio: 1.0, min_per_second: 100 } }
"#;
    let top = "upstream: { retries: 1, eject_after: 0, health: { interval: 0s } }";
    let mut yaml = support::table(b[0].addr, b[1].addr, b[2].addr, top) + routes;
    let eu = format!("eu: {{ upstreams: [\"http://{}\"] }}", b[0].addr);
    yaml = yaml.replace(&eu, &format!("eu: {{ upstreams: [\"http://{}\", \"http://{}\"] }}", closing.addr, b[0].addr));
    let p = support::proxy(&yaml).await?;
    let started = std::time::Instant::now();
    let got = get(&p.url("/hasty/slow/1")).await?;
    assert_eq!((got.status.as_u16(), got.json()?["reason"].as_str()), (504, Some("upstream_timeout")));
    assert!(started.elapsed() < std::time::Duration::from_millis(1500), "{:?}", started.elapsed());
    assert_eq!(get(&p.url("/slow/slow/1")).await?.status, 200, "the table's timeouts are longer than 2 s");
    // Round robin alternates the two endpoints: with no retry one of two
    // requests meets the closing one and fails; with one, none does.
    let never: Vec<u16> = [get(&p.url("/never-retried")).await?, get(&p.url("/never-retried")).await?]
        .iter()
        .map(|g| g.status.as_u16())
        .collect();
    assert!(never.contains(&502) && never.contains(&200), "{never:?}");
    for _ in 0..4 {
        assert_eq!(get(&p.url("/retried")).await?.status, 200);
    }
    Ok(())
}

#[tokio::test]
async fn a_route_may_keep_its_reads_from_failing_over() -> TestResult {
    let routes = r#"  - name: strict
    match: { prefix: "/strict/" }
    to: { region: kz }
    allow_failover_reads: false
  - name: lenient
    match: { prefix: "/lenient/" }
    to: { region: kz }
"#;
    let (p, b) = front_door("", routes, true).await?;
    b[1].stop();
    let eu_before = b[0].hits();
    let got = get(&p.url("/strict/a")).await?;
    assert!(got.status.is_server_error(), "{}", got.status);
    assert_eq!(b[0].hits(), eu_before, "a read of a route that does not fail over reached eu");
    let (status, region, _) = landed(&p, "/lenient/a").await?;
    assert_eq!((status, region.as_str()), (200, "eu"));
    Ok(())
}
