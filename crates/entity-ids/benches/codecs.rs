//! Id codec benchmarks, measured against the `uuid` crate in the same run.
//!
//! Goals: iUID parse + reading country and service_entity in at most half
//! the time of `uuid::Uuid::parse_str` alone; iUID minting faster than
//! `uuid::Uuid::now_v7()`; an iUID's `Display` no slower than `uuid::Uuid`'s.
//!
//! Run: `cargo bench -p entity-ids --bench codecs -- --warm-up-time 1 --measurement-time 3`
//! (medians are in `target/criterion/<group>/<bench>/new/estimates.json`).

#![allow(missing_docs)] // criterion_group! generates undocumented functions.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use entity_ids::{
    Instagram, InstagramLayout, Iuid, IuidMinter, LocalityMinter, LocalityUuid, ManualClock, NodeIdentity, Snowflake,
    Sonyflake, SonyflakeFlavor, SystemClock, UniqidShard, Uuid7, Uuid7Minter,
};

const IUID: &str = "018e4282-d0bf-8007-8c3a-5d2e9b1f0a47";
const IUID_UPPER: &str = "018E4282-D0BF-8007-8C3A-5D2E9B1F0A47";
const UUID7: &str = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
const LOCALITY: &str = "20be0ffc-314a-bd53-7a50-013a65ca76d2";
const UNIQID: &str = "36a016b019df3543ab";
const SNOWFLAKE: &str = "1050118621198921728";
const SONYFLAKE: &str = "16842753";
const INSTAGRAM: &str = "18446744073709551615";

fn parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse");
    g.bench_function("uuid_parse_str", |b| b.iter(|| uuid::Uuid::parse_str(black_box(IUID))));
    g.bench_function("iuid_parse_country_entity", |b| {
        b.iter(|| Iuid::parse(black_box(IUID)).map(|id| (id.country(), id.service_entity())))
    });
    g.bench_function("iuid_parse_country_entity_upper", |b| {
        b.iter(|| Iuid::parse(black_box(IUID_UPPER)).map(|id| (id.country(), id.service_entity())))
    });
    g.bench_function("iuid_reject_bad_length", |b| b.iter(|| Iuid::parse(black_box("018e4282-d0bf-8007-8c3a"))));
    g.bench_function("uuid7_parse", |b| b.iter(|| Uuid7::parse(black_box(UUID7)).map(|id| id.unix_ts_ms())));
    g.bench_function("locality_parse", |b| {
        b.iter(|| LocalityUuid::parse(black_box(LOCALITY)).map(|id| (id.pid(), id.mac_fragment())))
    });
    g.bench_function("uniqid_parse", |b| b.iter(|| UniqidShard::parse(black_box(UNIQID)).map(|id| id.shard())));
    g.bench_function("uniqid_parse_strict", |b| {
        b.iter(|| UniqidShard::parse_with(black_box(UNIQID), Some(4)).map(|id| id.shard()))
    });
    g.bench_function("snowflake_parse", |b| {
        b.iter(|| Snowflake::parse(black_box(SNOWFLAKE)).map(|id| (id.datacenter_id(), id.worker_id())))
    });
    g.bench_function("sonyflake_parse", |b| {
        b.iter(|| Sonyflake::parse_with(black_box(SONYFLAKE), SonyflakeFlavor::V1).map(|id| id.machine_id()))
    });
    g.bench_function("instagram_parse", |b| {
        b.iter(|| Instagram::parse_with(black_box(INSTAGRAM), InstagramLayout::default()).map(|id| id.shard_id()))
    });
    g.finish();
}

fn mint(c: &mut Criterion) {
    let mut g = c.benchmark_group("mint");
    g.bench_function("uuid_now_v7", |b| b.iter(uuid::Uuid::now_v7));
    let iuid = IuidMinter::new(SystemClock);
    let mut rng = rand::rng();
    g.bench_function("iuid_mint", |b| b.iter(|| iuid.mint(black_box(7), black_box(3), &mut rng)));
    let uuid7 = Uuid7Minter::new(SystemClock);
    g.bench_function("uuid7_mint", |b| b.iter(|| uuid7.mint(&mut rng)));
    // The same minter without the system clock read, to show what
    // `SystemTime::now` costs.
    let clock = ManualClock::from_millis(1_710_512_853_183);
    let fixed = IuidMinter::new(&clock);
    g.bench_function("iuid_mint_manual_clock", |b| b.iter(|| fixed.mint(black_box(7), black_box(3), &mut rng)));
    let loc = LocalityMinter::new(SystemClock, NodeIdentity { pid: 4464, mac_fragment: 0x0c11_0002 }, 0);
    g.bench_function("locality_mint", |b| b.iter(|| loc.mint()));
    g.finish();

    let mut g = c.benchmark_group("format");
    let id = Iuid::from_fields(1_710_512_853_183, 7, 3, 0x002e_9b1f_0a47);
    g.bench_function("iuid_to_string", |b| b.iter(|| black_box(id).to_string()));
    let u = uuid::Uuid::from_u128(id.as_u128());
    g.bench_function("uuid_to_string", |b| b.iter(|| black_box(u).to_string()));
    g.finish();
}

criterion_group!(benches, parse, mint);
criterion_main!(benches);
