//! Routing table benches: placement of a decoded id (target < 10 ns),
//! the per-request routing work the proxy does before any I/O (match,
//! extract, decode, place: target < 200 ns), and compile + swap of a large
//! table (target < 20 ms).
//!
//! Run: `cargo bench --bench routing`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt::Write;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use shardgate::config;
use shardgate::ids::{Decoded, Iuid, LocalityUuid, UniqidShard, Uuid7};
use shardgate::proxy::locate::{locate, Plan};
use shardgate::proxy::mint::Minters;
use shardgate::routing::{SharedTable, Strategy, Table};

/// 16 regions, all 256 countries, 256 entities, 1,000 overrides,
/// 65,536 shards in 1,024 ranges, 10,000 key ranges, a few routes.
fn large_table() -> String {
    let mut t = String::from("version: 1\nregions:\n");
    for r in 0..16 {
        writeln!(t, "  r{r}: {{ upstreams: [\"http://10.0.{r}.1:8080\"] }}").unwrap();
    }
    t.push_str("countries:\n");
    for c in 0..256 {
        writeln!(t, "  C{c}: {{ id: {c}, region: r{} }}", c % 16).unwrap();
    }
    t.push_str("entities:\n");
    for e in 0..256 {
        writeln!(t, "  E{e}: {e}").unwrap();
    }
    t.push_str("overrides:\n");
    for i in 0..1000 {
        writeln!(t, "  - {{ country: C{}, entity: E{}, region: r{} }}", i % 256, i / 256 * 7 + 1, (i + 1) % 16)
            .unwrap();
    }
    t.push_str("shards:\n  count: 65536\n  regions:\n");
    for r in 0..16 {
        let ranges: Vec<String> = (0..64)
            .map(|k| {
                let start = (k * 16 + r) * 64;
                format!("\"{}-{}\"", start, start + 63)
            })
            .collect();
        writeln!(t, "    r{r}: [{}]", ranges.join(", ")).unwrap();
    }
    t.push_str("key_ranges:\n");
    for i in 0..10_000u64 {
        let start = if i == 0 { 0 } else { (u64::MAX / 10_000) * i };
        writeln!(t, "  - {{ start: \"{start:016x}\", region: r{} }}", i % 16).unwrap();
    }
    t.push_str("hash: { regions: [r0, r1, r2, r3] }\n");
    t.push_str("nodes:\n  locality_mac: { \"c110002\": r1 }\n");
    t.push_str(
        "routes:\n  - name: orders\n    match: { path: \"/v1/orders/{id}\" }\n    id: { path_param: id, formats: [iuid, uniqid] }\n",
    );
    t
}

fn bench(c: &mut Criterion) {
    let text = large_table();
    let cfg = config::load_str(&text, "large.yaml").expect("large table is valid");
    let table = Table::compile(&cfg);

    let iuid = Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, 7, 3, 99));
    let over = Decoded::Iuid(Iuid::from_fields(1_700_000_000_000, 0, 1, 99));
    let uniqid = Decoded::Uniqid(UniqidShard::from_fields(40_000, 9, 1_700_000_000, 5).expect("uniqid"));
    let locality = Decoded::Locality(LocalityUuid::from_fields(1, 1, 0xc110002, 1_700_000_000_000));
    let v7 = Decoded::Uuidv7(Uuid7::from_fields(1_700_000_000_000, 5, 77));
    assert!(table.place(&iuid, Strategy::Auto).is_ok() && table.place(&over, Strategy::Auto).is_ok());

    let mut g = c.benchmark_group("place");
    g.bench_function("iuid_country", |b| b.iter(|| table.place(black_box(&iuid), black_box(Strategy::Auto))));
    g.bench_function("iuid_override", |b| b.iter(|| table.place(black_box(&over), black_box(Strategy::Auto))));
    g.bench_function("uniqid_shard", |b| b.iter(|| table.place(black_box(&uniqid), black_box(Strategy::Auto))));
    g.bench_function("locality_mac", |b| b.iter(|| table.place(black_box(&locality), black_box(Strategy::Auto))));
    g.bench_function("uuidv7_key_range_10k", |b| b.iter(|| table.place(black_box(&v7), black_box(Strategy::KeyRange))));
    g.bench_function("uuidv7_hash_4", |b| b.iter(|| table.place(black_box(&v7), black_box(Strategy::Hash))));
    g.finish();

    let shared = SharedTable::new(Table::compile(&cfg), text.clone());
    let mut g = c.benchmark_group("table");
    g.sample_size(20);
    g.bench_function("compile_and_swap_large", |b| {
        b.iter(|| shared.publish(Table::compile(black_box(&cfg)), text.as_str()))
    });
    g.bench_function("load_validate_large", |b| b.iter(|| config::load_str(black_box(&text), "large.yaml").is_ok()));
    g.finish();
}

/// The table of the load comparison (`benches/load/compare.py`): three
/// regions, a path route and a header route, plus a query route that tries
/// two formats.
const REQUEST_TABLE: &str = r#"
version: 1
regions:
  eu: { upstreams: ["http://127.0.0.1:19101"] }
  kz: { upstreams: ["http://127.0.0.1:19102"] }
  us: { upstreams: ["http://127.0.0.1:19103"] }
countries:
  C49: { id: 49, region: eu }
  C7: { id: 7, region: kz }
  C1: { id: 1, region: us }
entities: { IntercityOrder: 3 }
shards: { count: 100, regions: { eu: ["0-33"], kz: ["34-66"], us: ["67-99"] } }
routes:
  - name: orders
    match: { path: "/v1/orders/{id}", methods: [GET] }
    id: { path_param: id, formats: [iuid] }
  - name: orders-by-header
    match: { path: "/v1/orders", methods: [GET] }
    id: { header: X-Entity-Id, formats: [iuid] }
  - name: invoices
    match: { path: "/v1/invoices" }
    id: { query: id, formats: [iuid, uniqid] }
"#;

/// Match + extract + decode + place for one request, as the proxy does it
/// (`proxy::locate::locate`), on requests already parsed by hyper.
fn request(c: &mut Criterion) {
    let cfg = config::load_str(REQUEST_TABLE, "request.yaml").expect("request table is valid");
    let table = Table::compile(&cfg);
    let minters = Minters::new(None, Default::default());
    let iuid = Iuid::from_fields(1_700_000_000_000, 7, 3, 99).to_string();
    let uniqid = UniqidShard::from_fields(40, 9, 1_700_000_000, 5).expect("uniqid").to_string();
    let parts = |uri: &str, header: Option<&str>| {
        let mut b = http::Request::get(uri).header("host", "orders.example").header("user-agent", "wrk");
        if let Some(h) = header {
            b = b.header("x-entity-id", h);
        }
        b.body(()).expect("request").into_parts().0
    };
    let by_path = parts(&format!("/v1/orders/{iuid}"), None);
    let by_header = parts("/v1/orders", Some(&iuid));
    let by_query_second_format = parts(&format!("/v1/invoices?page=2&id={uniqid}"), None);
    for p in [&by_path, &by_header, &by_query_second_format] {
        let plan = locate(&table, p, None, &minters, false).map_err(|r| r.error).expect("the bench requests route");
        let region = match plan {
            Plan::One(located) => Some(table.region(located.placement.region).name.as_str()),
            _ => None,
        };
        assert_eq!(region, Some("kz"), "{}", p.uri);
    }

    let mut g = c.benchmark_group("request");
    for (name, p) in [("path_iuid", &by_path), ("header_iuid", &by_header), ("query_uniqid", &by_query_second_format)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                locate(black_box(&table), black_box(p), None, &minters, false).map(|plan| match plan {
                    Plan::One(l) => Some(l.placement.region),
                    _ => None,
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench, request);
criterion_main!(benches);
