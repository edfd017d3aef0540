//! The merge of a fan-out: three regions' answers of 1,000 orders each,
//! parsed, ordered and written back as one page of all 3,000 (and as the
//! first page of 50). Each element is an order of about 120 bytes whose id
//! is an iUID; the merge order is the ids' time, newest first.
//!
//! `cargo bench --bench merge`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shardgate::ids::{Format, Iuid, Params};
use shardgate::merge::{self, SortKey, Spec};

/// One region's answer: `n` orders, interleaved in time with the other regions'.
fn answer(region: &str, country: u8, index: u64, n: u64) -> Vec<u8> {
    let items: Vec<String> = (0..n)
        .map(|k| {
            let id = Iuid::from_fields(1_700_000_000_000 + (k * 3 + index) * 1000, country, 3, k * 7919 + index);
            format!(
                r#"{{"id":"{id}","region":"{region}","user":"alice","total_cents":{},"status":"delivered"}}"#,
                1000 + k
            )
        })
        .collect();
    format!("[{}]", items.join(",")).into_bytes()
}

fn bench(c: &mut Criterion) {
    let spec = Spec {
        items: None,
        sort: SortKey::IdTime { field: "id".into(), formats: vec![Format::Iuid] },
        descending: true,
    };
    let params = Params::default();
    let answers =
        [("eu", answer("eu", 49, 0, 1000)), ("kz", answer("kz", 7, 1, 1000)), ("us", answer("us", 1, 2, 1000))];
    let merge_page = |limit: usize| {
        let mut all = Vec::with_capacity(3000);
        for (region, body) in &answers {
            all.extend(merge::items(&spec, &params, region, black_box(body)).unwrap_or_default());
        }
        let page = merge::page(&spec, all, None, limit);
        let mut out = Vec::new();
        merge::write_array(&page.items, &mut out);
        out
    };
    assert_eq!(merge_page(usize::MAX).iter().filter(|&&b| b == b'{').count(), 3000);
    let mut g = c.benchmark_group("merge");
    g.throughput(Throughput::Elements(3000));
    g.bench_function("3x1000_all", |b| b.iter(|| merge_page(usize::MAX)));
    g.bench_function("3x1000_page_of_50", |b| b.iter(|| merge_page(50)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
