//! Request-path fuzz target: what the proxy does with a request target
//! before any I/O. The input is the raw target (path and query, lossily
//! UTF-8; also used as a header value when it is a valid one). No input may
//! make route matching (`Table::match_route` on a fixed table with path,
//! catch-all, header and query routes), id extraction (`extract`,
//! `percent_decode`, `query_param`), decoding or placement panic, and:
//! * decoding is the identity without `%`, and grows the text at most 3x;
//! * a query parameter's value is a slice of the query (or empty);
//! * a path parameter is a slice of the path, without `/` (catch-alls aside);
//! * extraction fails only as a 400 (missing id), and never yields "".
#![no_main]

use std::borrow::Cow;
use std::sync::OnceLock;

use http::{HeaderMap, HeaderValue, Method};
use libfuzzer_sys::fuzz_target;
use shardgate::config;
use shardgate::proxy::extract::{extract, percent_decode, query_param};
use shardgate::proxy::locate::{locate, Plan};
use shardgate::proxy::mint::Minters;
use shardgate::routing::Table;

const TABLE: &str = r#"version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:9001"] }
  kz: { upstreams: ["http://127.0.0.1:9002"] }
  us: { upstreams: ["http://127.0.0.1:9003"] }
countries:
  KZ: { id: 7, region: kz }
  DE: { id: 49, region: eu }
  US: { id: 1, region: us }
entities: { IntercityOrder: 3 }
shards: { count: 16, regions: { eu: "0-5", kz: "6-10", us: "11-15" } }
nodes:
  locality_mac: { "c110002": eu }
  snowflake_datacenter: { 1: eu, 2: kz, 3: us }
  sonyflake_machine: { 258: kz }
  instagram_shard: { "0-99": us }
hash: { regions: [eu, kz, us] }
routes:
  - name: orders
    match: { path: "/v1/orders/{id}", methods: [GET, PUT] }
    id: { path_param: id, formats: [iuid, uniqid] }
  - name: order-items
    match: { path: "/v1/orders/{id}/items/{item}" }
    id: { path_param: id, formats: [iuid] }
  - name: wallet
    match: { path: "/v1/wallet" }
    id: { header: X-Entity-Id, formats: [iuid, snowflake] }
  - name: search
    match: { path: "/v1/search" }
    id: { query: id, formats: [uuidv7, instagram] }
  - name: sessions
    match: { path: "/v1/sessions/{id}" }
    id: { path_param: id, formats: [locality, sonyflake] }
  - name: events
    match: { path: "/v1/events/{id}/{*rest}" }
    id: { path_param: id, formats: [uuidv7] }
    placement: hash
  - name: create
    match: { path: "/v1/orders", methods: [POST] }
    mint: { format: iuid, entity: IntercityOrder, country: { header: X-Country }, header: X-Entity-Id }
"#;

fn table() -> &'static Table {
    static T: OnceLock<Table> = OnceLock::new();
    T.get_or_init(|| match config::load_str(TABLE, "fuzz.yaml") {
        Ok(cfg) => Table::compile(&cfg),
        Err(e) => panic!("the fixed table is invalid:\n{e}"),
    })
}

fn minters() -> &'static Minters {
    static M: OnceLock<Minters> = OnceLock::new();
    M.get_or_init(|| Minters::new(None, Default::default()))
}

fn is_slice_of(part: &str, whole: &str) -> bool {
    let (p, w) = (part.as_ptr() as usize, whole.as_ptr() as usize);
    p >= w && p + part.len() <= w + whole.len()
}

fn route(table: &Table, method: &Method, path: &str, query: Option<&str>, headers: &HeaderMap) {
    let Some(m) = table.match_route(method, path) else { return };
    for (name, value) in m.params.iter() {
        assert!(is_slice_of(value, path), "{name}={value:?} not from {path:?}");
        assert!(name == "rest" || !value.contains('/'), "{name}={value:?}");
    }
    let Some(rule) = &m.route.id else { return };
    match extract(&rule.source, &m.params, headers, query, None) {
        Ok(raw) => {
            assert!(!raw.is_empty());
            if let Ok(id) = shardgate::ids::parse_any(&rule.formats, &raw, table.id_params()) {
                let _ = table.place(&id, m.route.strategy);
            }
        }
        Err(e) => assert_eq!(e.status(), 400, "{e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let table = table();
    let text = String::from_utf8_lossy(data);

    let decoded = percent_decode(&text);
    if !text.contains('%') {
        assert!(matches!(decoded, Cow::Borrowed(_)));
    }
    assert!(decoded.len() <= text.len() * 3);

    let (path, query) = match text.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (&*text, None),
    };
    for name in ["id", "", "a=b"] {
        if let Some(v) = query_param(query.unwrap_or(""), name) {
            // A key without `=` has the empty value (not a slice of the query).
            assert!(v.is_empty() || is_slice_of(v, query.unwrap_or("")));
            let _ = percent_decode(v);
        }
    }

    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(data) {
        headers.insert("x-entity-id", v.clone());
        headers.insert("x-country", v);
    }
    for method in [Method::GET, Method::POST, Method::DELETE] {
        route(table, &method, path, query, &headers);
    }
    // What hyper hands the proxy: a target that parses as a URI.
    if let Ok(uri) = text.parse::<http::Uri>() {
        route(table, &Method::GET, uri.path(), uri.query(), &headers);
        // The whole routing step as the proxy runs it (proxy::locate), mint included.
        for method in [Method::GET, Method::POST] {
            let (mut parts, ()) = http::Request::new(()).into_parts();
            parts.method = method;
            parts.uri = uri.clone();
            parts.headers = headers.clone();
            match locate(table, &parts, None, minters(), false) {
                Ok(Plan::One(l)) => assert!(usize::from(l.placement.region.0) < table.regions().len()),
                Ok(_) => {}
                Err(r) => assert!(matches!(r.error.status().as_u16(), 400 | 404 | 405 | 502), "{}", r.error),
            }
        }
    }
});
