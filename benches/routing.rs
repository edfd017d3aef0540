//! Routing table benches: placement of a decoded id (target < 10 ns) and
//! compile + swap of a large table (target < 20 ms).
//!
//! Run: `cargo bench --bench routing`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::fmt::Write;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use shardgate::config;
use shardgate::ids::{Decoded, Iuid, LocalityUuid, UniqidShard, Uuid7};
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

criterion_group!(benches, bench);
criterion_main!(benches);
