//! `/explain` for every id format: the formats an id is valid in, the
//! route's decoding, the region and the kind of rule that places it (and
//! the proxy really sends it there); every route that accepts an id when
//! none is named, and why a route does not; bad requests as problems.

use std::collections::HashSet;

use shardgate::ids::{LocalityUuid, ManualClock, UniqidMinter};

use crate::support::ops::{iuid, ops, Ops};
use crate::support::{get, BoxError, TestResult};

async fn explain(o: &Ops, id: &str, route: Option<&str>) -> Result<serde_json::Value, BoxError> {
    let mut url = o.admin_url(&format!("/explain?id={id}"));
    if let Some(r) = route {
        url.push_str(&format!("&route={r}"));
    }
    let got = get(&url).await?;
    assert_eq!(got.status, 200, "{}", String::from_utf8_lossy(&got.body));
    got.json()
}

/// What `/explain` must say about one id on one route.
struct Expect<'a> {
    route: &'a str,
    /// The proxy path for the route, with `{id}`.
    path: &'a str,
    format: &'a str,
    valid_in: &'a [&'a str],
    region: &'a str,
    kind: &'a str,
}

/// Checks `/explain` for `id`: valid in exactly `valid_in`, decoded by the
/// route as `format`, placed in `region` by a rule of `kind`, and the proxy
/// really sends it there.
async fn check_explain(o: &Ops, id: &str, x: Expect<'_>) -> TestResult {
    let Expect { route, path, format, valid_in, region, kind } = x;
    let e = explain(o, id, Some(route)).await?;
    let formats: HashSet<&str> =
        e["valid_as"].as_array().ok_or("valid_as")?.iter().filter_map(|v| v["format"].as_str()).collect();
    assert_eq!(formats, valid_in.iter().copied().collect(), "{id}: {e}");
    let decoded = e["valid_as"].as_array().ok_or("valid_as")?.iter().find(|v| v["format"] == format).ok_or("fmt")?;
    assert!(decoded["fields"].as_object().is_some_and(|f| !f.is_empty()), "{decoded}");
    let routes = e["routes"].as_array().ok_or("routes")?;
    assert_eq!(routes.len(), 1, "{e}");
    let r = &routes[0];
    assert_eq!(r["route"], route);
    assert_eq!(r["decoded_as"], format, "{r}");
    assert_eq!(r["region"], region, "{r}");
    assert_eq!(r["rule_kind"], kind, "{r}");
    assert!(r["rule"].as_str().is_some_and(|s| !s.is_empty()));
    let got = get(&o.url(&path.replace("{id}", id))).await?;
    assert_eq!(got.header("x-backend-region"), Some(region), "the proxy agrees for {id}");
    Ok(())
}

#[tokio::test]
async fn ops_explain_every_format() -> TestResult {
    let o = ops("").await?;
    let decimal = ["snowflake", "sonyflake", "instagram"];
    // iUID: by country, and by a (country, entity) override.
    check_explain(
        &o,
        &iuid(7, 3),
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "iuid",
            valid_in: &["iuid"],
            region: "kz",
            kind: "country",
        },
    )
    .await?;
    check_explain(
        &o,
        &iuid(7, 4),
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "iuid",
            valid_in: &["iuid"],
            region: "eu",
            kind: "override",
        },
    )
    .await?;
    // uniqid by shard.
    let clock = ManualClock::from_millis(1_700_000_000_000);
    let uniqid = UniqidMinter::new(&clock, 16).mint_for_shard(8, &mut rand::rng()).ok_or("shard")?.to_string();
    check_explain(
        &o,
        &uniqid,
        Expect {
            route: "orders",
            path: "/v1/orders/{id}",
            format: "uniqid",
            valid_in: &["uniqid"],
            region: "kz",
            kind: "shard",
        },
    )
    .await?;
    // Locality by MAC fragment.
    let locality = LocalityUuid::from_fields(0x1234_5678, 1, 0x0d53_7a50, 1_700_000_000_000).to_string();
    check_explain(
        &o,
        &locality,
        Expect {
            route: "sessions",
            path: "/v1/sessions/{id}",
            format: "locality",
            valid_in: &["locality"],
            region: "kz",
            kind: "locality_mac",
        },
    )
    .await?;
    // UUIDv7 by rendezvous hash: the region the proxy uses.
    let v7 = "017f22e2-79b0-7cc3-98c4-dc0c0c07398f";
    let hashed = get(&o.url(&format!("/v1/events/{v7}"))).await?;
    let hashed = hashed.header("x-backend-region").ok_or("region")?.to_owned();
    check_explain(
        &o,
        v7,
        Expect {
            route: "events",
            path: "/v1/events/{id}",
            format: "uuidv7",
            valid_in: &["uuidv7"],
            region: &hashed,
            kind: "hash",
        },
    )
    .await?;
    // The decimal formats overlap: every one the id is valid in is listed.
    let snowflake = ((12_345u64 << 22) | (2 << 17) | (4 << 12) | 7).to_string();
    check_explain(
        &o,
        &snowflake,
        Expect {
            route: "tweets",
            path: "/v1/tweets/{id}",
            format: "snowflake",
            valid_in: &decimal,
            region: "kz",
            kind: "snowflake_datacenter",
        },
    )
    .await?;
    let sonyflake = ((1000u64 << 24) | 258).to_string();
    check_explain(
        &o,
        &sonyflake,
        Expect {
            route: "flakes",
            path: "/v1/flakes/{id}",
            format: "sonyflake",
            valid_in: &decimal,
            region: "kz",
            kind: "sonyflake_machine",
        },
    )
    .await?;
    let instagram = ((5000u64 << 23) | (42 << 10) | 1).to_string();
    check_explain(
        &o,
        &instagram,
        Expect {
            route: "media",
            path: "/v1/media/{id}",
            format: "instagram",
            valid_in: &decimal,
            region: "us",
            kind: "instagram_shard",
        },
    )
    .await?;

    // Without a route: every route whose formats accept the id.
    let e = explain(&o, &iuid(7, 3), None).await?;
    let names: HashSet<&str> =
        e["routes"].as_array().ok_or("routes")?.iter().filter_map(|r| r["route"].as_str()).collect();
    assert_eq!(names, ["orders", "by-header", "by-query", "behaviours"].into_iter().collect());
    let iuid_fields = &e["valid_as"][0]["fields"];
    assert_eq!(iuid_fields["country"], 7);
    assert_eq!(iuid_fields["service_entity"], 3);
    // A route that does not accept the id says why; bad requests are problems.
    let e = explain(&o, "nope", Some("orders")).await?;
    assert!(e["routes"][0]["reason"].as_str().is_some(), "{e}");
    assert!(e["valid_as"].as_array().is_some_and(Vec::is_empty));
    assert_eq!(get(&o.admin_url("/explain")).await?.status, 400);
    let unknown = get(&o.admin_url(&format!("/explain?id={}&route=nope", iuid(7, 3)))).await?;
    assert_eq!(unknown.status, 404);
    assert_eq!(unknown.header("content-type"), Some("application/problem+json"));
    Ok(())
}
