//! The shape of the routing table file for the YAML walker: which keys
//! each mapping may have, taken from the serde types of [`super::schema`]
//! themselves (a deserializer that only asks for a struct's field names),
//! so the schema is written once and unknown keys cannot drift from it.

use std::fmt;

use serde::Deserialize;

use super::schema::*;
use super::yaml::Shape;

/// The shape the YAML walker checks keys against: every struct's keys as
/// serde knows them (renamed, skipped fields left out), nested as the file
/// nests them.
pub fn shape() -> &'static Shape {
    static SHAPE: std::sync::OnceLock<Shape> = std::sync::OnceLock::new();
    SHAPE.get_or_init(|| {
        use Shape::{Any, Map, Seq};
        let any = || Any;
        File::shape(vec![
            (
                "regions",
                Map(Box::new(Region::shape(vec![(
                    "upstream",
                    RegionUpstream::shape(vec![("health", HealthOverrides::shape(vec![]))]),
                )]))),
            ),
            ("countries", Map(Box::new(Country::shape(vec![])))),
            ("entities", Map(Box::new(any()))),
            ("overrides", Seq(Box::new(Override::shape(vec![])))),
            ("shards", Shards::shape(vec![("regions", Map(Box::new(any())))])),
            ("nodes", Nodes::shape(Nodes::keys().iter().map(|&k| (k, Map(Box::new(any())))).collect())),
            ("key_ranges", Seq(Box::new(KeyRange::shape(vec![])))),
            ("hash", Hash::shape(vec![("weights", Map(Box::new(any())))])),
            ("time_ranges", Seq(Box::new(TimeRange::shape(vec![])))),
            ("moves", Seq(Box::new(Move::shape(vec![("hold", MoveHold::shape(vec![]))])))),
            (
                "ids",
                Ids::shape(vec![
                    ("uniqid", UniqidParams::shape(vec![])),
                    ("snowflake", SnowflakeParams::shape(vec![])),
                    ("sonyflake", SonyflakeParams::shape(vec![])),
                    ("instagram", InstagramParams::shape(vec![])),
                    ("locality", LocalityParams::shape(vec![])),
                ]),
            ),
            ("server", Server::shape(vec![("tls", ServerTls::shape(vec![]))])),
            (
                "upstream",
                UpstreamSettings::shape(vec![
                    ("retry_budget", RetryBudget::shape(vec![])),
                    ("health", HealthChecks::shape(vec![])),
                    ("tls", UpstreamTls::shape(vec![])),
                    ("dns", Dns::shape(vec![])),
                ]),
            ),
            ("mesh", Mesh::shape(vec![])),
            ("log", Log::shape(vec![])),
            ("mint_batch", MintBatch::shape(vec![])),
            ("search_cache", SearchCache::shape(vec![])),
            ("telemetry", Telemetry::shape(vec![])),
            ("headers", header_rules()),
            (
                "routes",
                Seq(Box::new(Route::shape(vec![
                    ("match", Match::shape(vec![])),
                    ("id", IdSpec::shape(vec![])),
                    ("mint", MintSpec::shape(vec![("country", CountrySource::shape(vec![]))])),
                    (
                        "fanout",
                        FanoutSpec::shape(vec![
                            ("countries", CountryList::shape(vec![])),
                            ("sort", SortSpec::shape(vec![])),
                            ("limit", PageLimit::shape(vec![])),
                        ]),
                    ),
                    ("search", SearchSpec::shape(vec![])),
                    ("rewrite", RewriteSpec::shape(vec![])),
                    ("headers", header_rules()),
                    ("policy", PolicySpec::shape(vec![("retry_budget", RetryBudget::shape(vec![]))])),
                ]))),
            ),
        ])
    })
}

/// The shape of `headers` (top level and per route).
fn header_rules() -> Shape {
    let edit = || {
        let names = || Shape::Map(Box::new(Shape::Any));
        HeaderEditSpec::shape(vec![("set", names()), ("add", names())])
    };
    HeaderRulesSpec::shape(vec![("request", edit()), ("response", edit())])
}

/// A struct of the file whose keys serde knows.
trait Keys: for<'de> Deserialize<'de> {
    /// Its keys, in declaration order.
    fn keys() -> &'static [&'static str] {
        keys_of::<Self>()
    }

    /// Its shape: a mapping of its keys, the `nested` ones with their own shape.
    fn shape(mut nested: Vec<(&'static str, Shape)>) -> Shape {
        Shape::Struct(
            Self::keys()
                .iter()
                .map(|&k| match nested.iter().position(|(n, _)| *n == k) {
                    Some(i) => nested.swap_remove(i),
                    None => (k, Shape::Any),
                })
                .collect(),
        )
    }
}

impl<T: for<'de> Deserialize<'de>> Keys for T {}

/// The field names serde's derive passes to `deserialize_struct` for `T`.
fn keys_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(KeyCapture) {
        Err(Captured(Some(fields))) => fields,
        _ => &[],
    }
}

/// A deserializer that only asks for a struct and stops there, keeping its field names.
struct KeyCapture;

#[derive(Debug)]
struct Captured(Option<&'static [&'static str]>);

impl fmt::Display for Captured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("key capture")
    }
}

impl std::error::Error for Captured {}

impl serde::de::Error for Captured {
    fn custom<M: fmt::Display>(_: M) -> Self {
        Captured(None)
    }
}

impl<'de> serde::Deserializer<'de> for KeyCapture {
    type Error = Captured;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Captured> {
        Err(Captured(None))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Captured> {
        Err(Captured(Some(fields)))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_types() -> Result<(), &'static str> {
        assert_eq!(Region::keys(), ["upstreams", "peer", "failover", "balance", "upstream"]);
        assert!(Route::keys().contains(&"match") && !Route::keys().contains(&"index"));
        let Shape::Struct(top) = shape() else { return Err("the file is not a mapping") };
        assert_eq!(top.len(), File::keys().len());
        // A nested shape named in `shape` sits under its struct's key.
        let Some((_, Shape::Seq(route))) = top.iter().find(|(k, _)| *k == "routes") else { return Err("routes") };
        let Shape::Struct(route) = route.as_ref() else { return Err("a route is not a mapping") };
        assert!(matches!(route.iter().find(|(k, _)| *k == "mint"), Some((_, Shape::Struct(_)))));
        Ok(())
    }
}
