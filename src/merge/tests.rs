use super::*;
use crate::ids::Iuid;

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn by_id(descending: bool) -> Spec {
    Spec { items: None, sort: SortKey::IdTime { field: "id".into(), formats: vec![Format::Iuid] }, descending }
}

/// `n` orders of `region`, one a minute from `start` (ms), each `{id, region}`.
fn answer(region: &str, country: u8, start: u64, n: u64) -> String {
    let items: Vec<String> = (0..n)
        .map(|k| {
            let id = Iuid::from_fields(start + k * 180_000, country, 3, k);
            format!(r#"{{"id":"{id}","region":"{region}","n":{k}}}"#)
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn regions_of(items: &[Item<'_>]) -> Vec<String> {
    items.iter().map(|i| i.key.region.to_string()).collect()
}

#[test]
fn three_answers_merge_into_one_time_order() -> TestResult {
    let params = Params::default();
    let spec = by_id(true);
    // Minted a minute apart in turn: eu, kz, us, eu, kz, us, …
    let (eu, kz, us) = (answer("eu", 49, 1_000_000, 4), answer("kz", 7, 1_060_000, 4), answer("us", 1, 1_120_000, 4));
    let mut all = items(&spec, &params, "eu", eu.as_bytes())?;
    all.extend(items(&spec, &params, "kz", kz.as_bytes())?);
    all.extend(items(&spec, &params, "us", us.as_bytes())?);
    let page = page(&spec, all, None, 100);
    assert_eq!(regions_of(&page.items), ["us", "kz", "eu"].repeat(4));
    let times: Vec<u64> = page.items.iter().map(|i| if let Value::Time(t) = i.key.value { t } else { 0 }).collect();
    assert!(times.windows(2).all(|w| w[0] > w[1]), "{times:?}");
    assert!(page.next.is_none());
    // Elements go out as they came.
    let mut out = Vec::new();
    write_array(&page.items[..1], &mut out);
    assert!(std::str::from_utf8(&out)?.starts_with(r#"[{"id":""#));
    Ok(())
}

#[test]
fn pages_return_every_element_once() -> TestResult {
    let params = Params::default();
    for descending in [true, false] {
        let spec = by_id(descending);
        // Equal times across regions: the tie-breakers decide, the same way every time.
        let bodies =
            [("eu", answer("eu", 49, 5_000, 7)), ("kz", answer("kz", 7, 5_000, 5)), ("us", answer("us", 1, 0, 9))];
        let all = || -> Result<Vec<Item<'_>>, LegError> {
            let mut v = Vec::new();
            for (r, b) in &bodies {
                v.extend(items(&spec, &params, r, b.as_bytes())?);
            }
            Ok(v)
        };
        let whole = page(&spec, all()?, None, usize::MAX);
        let mut paged = Vec::new();
        let mut cursor: Option<Cursor> = None;
        for _ in 0..100 {
            let p = page(&spec, all()?, cursor.as_ref(), 4);
            paged.extend(p.items.iter().map(|i| i.raw.to_string()));
            // The cursor travels as text.
            cursor = match p.next {
                Some(c) => Some(Cursor::decode(&spec, &c.encode(&spec))?),
                None => break,
            };
        }
        let expected: Vec<String> = whole.items.iter().map(|i| i.raw.to_string()).collect();
        assert_eq!(paged, expected, "descending {descending}");
        assert_eq!(paged.len(), 21);
    }
    Ok(())
}

#[test]
fn equal_elements_of_one_region_each_come_once_a_page_at_a_time() -> TestResult {
    let params = Params::default();
    // The same element twice, and a second pair equal by the field alone.
    let id = shardgate_id();
    let eu = format!(r#"[{{"id":"{id}"}},{{"id":"{id}"}}]"#);
    let by_field = Spec { sort: SortKey::Field("at".into()), ..by_id(true) };
    let kz = r#"[{"at":5},{"at":5}]"#;
    for (spec, body) in [(by_id(true), eu.as_str()), (by_field, kz)] {
        let mut paged = 0;
        let mut cursor: Option<Cursor> = None;
        for _ in 0..10 {
            let p = page(&spec, items(&spec, &params, "eu", body.as_bytes())?, cursor.as_ref(), 1);
            paged += p.items.len();
            cursor = match p.next {
                Some(c) => Some(Cursor::decode(&spec, &c.encode(&spec))?),
                None => break,
            };
        }
        assert_eq!(paged, 2, "{body}");
    }
    Ok(())
}

/// An iUID (any will do: the test needs two equal ones).
fn shardgate_id() -> String {
    crate::ids::Iuid::from_fields(1_700_000_000_000, 7, 3, 1).to_string()
}

#[test]
fn a_named_field_orders_numbers_then_strings() -> TestResult {
    let spec = Spec { items: Some("orders".into()), sort: SortKey::Field("at".into()), descending: false };
    let body = br#"{"total": 3, "orders": [{"at": "2026-01-02T00:00:00Z"}, {"at": 10}, {"at": 2.5}, {"at": "2026-01-01T00:00:00Z"}]}"#;
    let got = page(&spec, items(&spec, &Params::default(), "eu", body)?, None, 10);
    let raws: Vec<&str> = got.items.iter().map(|i| i.raw).collect();
    assert_eq!(
        raws,
        [r#"{"at": 2.5}"#, r#"{"at": 10}"#, r#"{"at": "2026-01-01T00:00:00Z"}"#, r#"{"at": "2026-01-02T00:00:00Z"}"#]
    );
    Ok(())
}

#[test]
fn answers_that_cannot_be_merged_say_why() {
    let params = Params::default();
    let spec = by_id(true);
    let fails = |spec: &Spec, body: &str| items(spec, &params, "eu", body.as_bytes()).err();
    assert_eq!(fails(&spec, "<html>").map(|e| e.reason()), Some("invalid_json"));
    assert_eq!(fails(&spec, "[1, 2").map(|e| e.reason()), Some("invalid_json"));
    assert_eq!(fails(&spec, r#"{"id": 1}"#), Some(LegError::NoArray("found an object".into())));
    let under = Spec { items: Some("orders".into()), ..by_id(true) };
    assert_eq!(fails(&under, r#"{"data": []}"#), Some(LegError::NoArray("no field 'orders'".into())));
    assert_eq!(fails(&under, r#"[]"#).map(|e| e.reason()), Some("invalid_json"));
    let e = fails(&spec, &format!(r#"[{{"id": "{}"}}, {{"name": "x"}}]"#, Iuid::from_fields(1, 7, 3, 1)));
    assert!(matches!(&e, Some(LegError::BadItem { index: 1, detail }) if detail == "no field 'id'"), "{e:?}");
    let e = fails(&spec, r#"[{"id": 42}]"#);
    assert!(
        matches!(&e, Some(LegError::BadItem { index: 0, detail }) if detail.contains("a number, not an id")),
        "{e:?}"
    );
    let e = fails(&spec, r#"[{"id": "not-an-id"}]"#);
    assert!(matches!(&e, Some(LegError::BadItem { index: 0, .. })), "{e:?}");
    let by_field = Spec { sort: SortKey::Field("at".into()), ..by_id(true) };
    let e = fails(&by_field, r#"[{"at": null}]"#);
    assert!(matches!(&e, Some(LegError::BadItem { detail, .. }) if detail.contains("null")), "{e:?}");
    // An empty array merges as nothing.
    assert_eq!(items(&spec, &params, "eu", b" [ ] ").map(|v| v.len()), Ok(0));
}

#[test]
fn cursors_belong_to_their_order() -> TestResult {
    let key = Key { value: Value::Text("a|b".into()), tie: 7, region: "eu", index: 3 };
    let spec = Spec { items: None, sort: SortKey::Field("at".into()), descending: true };
    let text = Cursor::at(&key).encode(&spec);
    assert!(text.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(Cursor::decode(&spec, &text)?.key(), key);
    let asc = Spec { descending: false, ..spec.clone() };
    assert_eq!(Cursor::decode(&asc, &text), Err(CursorError::OtherOrder));
    assert_eq!(Cursor::decode(&by_id(true), &text), Err(CursorError::OtherOrder));
    for bad in ["", "zz", "abc", "31", &"00".repeat(3000)] {
        assert!(matches!(Cursor::decode(&spec, bad), Err(CursorError::Malformed(_))), "{bad}");
    }
    Ok(())
}

#[test]
fn leads_order_keys_as_the_keys_do() {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    let mut rng = StdRng::seed_from_u64(7);
    let texts = ["", "a", "ab", "ab\0", "abcdefgh", "abcdefgh\0", "abcdefghi", "abcdefgz", "é", "\u{7f}", "zz"];
    let numbers = [f64::NEG_INFINITY, -1e300, -1.5, -0.0, 0.0, 1e-300, 2.0, 2.5, f64::INFINITY, f64::NAN, -f64::NAN];
    let value = |rng: &mut StdRng| match rng.random_range(0..3) {
        0 => Value::Time(rng.random_range(0..4u64) * (u64::MAX / 3)),
        1 => Value::Number(numbers[rng.random_range(0..numbers.len())]),
        _ => Value::Text(Cow::Borrowed(texts[rng.random_range(0..texts.len())])),
    };
    let regions = ["eu", "kz", "us"];
    let key = |rng: &mut StdRng| Key {
        value: value(rng),
        // Ties that differ only in their lowest bits, which the lead leaves out.
        tie: [0, 1, 2, 3, 4, u64::MAX - 1, u64::MAX][rng.random_range(0..7)],
        region: regions[rng.random_range(0..3)],
        index: rng.random_range(0..3),
    };
    let mut decided = 0;
    for _ in 0..50_000 {
        let (a, b) = (key(&mut rng), key(&mut rng));
        let lead = a.lead().cmp(&b.lead());
        if lead != Ordering::Equal {
            decided += 1;
            assert_eq!(lead, a.cmp(&b), "{a:?} {b:?}");
        }
    }
    // The lead decides most pairs; the rest go to the whole key.
    assert!(decided > 30_000, "{decided}");
    // A page is the first `limit` of the whole keys' order, either way.
    for round in 0..400 {
        let mut all: Vec<Item<'_>> =
            (0..rng.random_range(0..40)).map(|_| Item { key: key(&mut rng), raw: "" }).collect();
        for (n, item) in all.iter_mut().enumerate() {
            item.key.index = n;
        }
        let spec = Spec { descending: round % 2 == 0, ..by_id(false) };
        let limit = rng.random_range(0..45);
        let more = limit < all.len();
        let mut expected = all.clone();
        expected.sort_by(|a, b| if spec.descending { b.key.cmp(&a.key) } else { a.key.cmp(&b.key) });
        expected.truncate(limit);
        let got = page(&spec, all, None, limit);
        // Each item's index is its own (NaN keys are not equal to themselves).
        let places = |items: &[Item<'_>]| items.iter().map(|i| i.key.index).collect::<Vec<_>>();
        assert_eq!(places(&got.items), places(&expected));
        assert_eq!(got.next.is_some(), more && limit > 0);
    }
}

#[test]
fn a_sort_string_with_escapes_has_the_value_it_spells() -> TestResult {
    let params = Params::default();
    let spec = Spec { items: None, sort: SortKey::Field("k".into()), descending: false };
    let body = r#"[{"k":"b"},{"k":"\u0061"},{"k":"a\"z"},{"k":"a"}]"#;
    let all = items(&spec, &params, "eu", body.as_bytes())?;
    let page = page(&spec, all, None, 10);
    let values: Vec<String> = page
        .items
        .iter()
        .map(|i| match &i.key.value {
            Value::Text(t) => t.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(values, ["a", "a", "a\"z", "b"]);
    Ok(())
}
