//! Placement units by name: each entry of a table's placement sections
//! that owns ids, named as operators write it in `moves` and as `plan`,
//! the metrics, the audit trail and the dashboard list it.
//!
//! | unit | name | a move can name it |
//! |---|---|---|
//! | a country | `country KZ` | yes |
//! | a (country, entity) override | `override KZ:WalletAccount` | yes |
//! | a shard range of a region | `shards 0-7` (`shard 5` when one) | yes |
//! | a node entry | `locality_mac c110002`, `snowflake_datacenter 1`, … | no |
//! | an Instagram shard range | `instagram_shard 0-4095` | no |
//! | a key range, by its start | `key_range 8000000000000000` | yes |
//! | a time range, by its end | `time_range until 2024-01-01T00:00:00Z` (`time_range open` for the last) | no |
//! | a region of rendezvous hashing | `hash eu` | no |
//! | `default_region` | `default` | no |
//!
//! [`Unit`]'s `Display` writes every name; [`Unit::movable`] reads the
//! names a move can give, only as `Display` writes them, so what the table
//! calls a unit and what a move may name are one list.

use std::fmt;

/// A placement unit, as it is named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit<'a> {
    /// A country, by name.
    Country(&'a str),
    /// A (country, entity) override, by the names of both.
    Override {
        /// The country's name.
        country: &'a str,
        /// The entity's name.
        entity: &'a str,
    },
    /// The shard range `first..=last` of a region.
    Shards(u32, u32),
    /// A node table's entry, by its key.
    Node(Node, u64),
    /// The Instagram shard range `first..=last`.
    InstagramShards(u16, u16),
    /// The key range starting at this key.
    KeyRange(u64),
    /// The time range ending at this Unix time in milliseconds (`None`: the last, open one).
    TimeRange(Option<u64>),
    /// A region of rendezvous hashing, by name.
    Hash(&'a str),
    /// `default_region`.
    Default,
}

/// The node tables, in [`crate::routing::rule::Rule`] order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    /// Locality UUIDs' MAC fragment.
    LocalityMac,
    /// Locality UUIDs' process id.
    LocalityPid,
    /// Snowflake's datacenter id.
    SnowflakeDatacenter,
    /// Snowflake's worker id.
    SnowflakeWorker,
    /// Sonyflake's machine id.
    SonyflakeMachine,
}

/// `a-b`, or `a` when one.
fn span<T: fmt::Display + PartialEq>(f: &mut fmt::Formatter<'_>, a: T, b: T) -> fmt::Result {
    if a == b {
        write!(f, "{a}")
    } else {
        write!(f, "{a}-{b}")
    }
}

impl fmt::Display for Unit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Unit::Country(c) => write!(f, "country {c}"),
            Unit::Override { country, entity } => write!(f, "override {country}:{entity}"),
            Unit::Shards(a, b) => {
                f.write_str(if a == b { "shard " } else { "shards " })?;
                span(f, a, b)
            }
            Unit::Node(Node::LocalityMac, key) => write!(f, "locality_mac {key:07x}"),
            Unit::Node(Node::LocalityPid, key) => write!(f, "locality_pid {key}"),
            Unit::Node(Node::SnowflakeDatacenter, key) => write!(f, "snowflake_datacenter {key}"),
            Unit::Node(Node::SnowflakeWorker, key) => write!(f, "snowflake_worker {key}"),
            Unit::Node(Node::SonyflakeMachine, key) => write!(f, "sonyflake_machine {key}"),
            Unit::InstagramShards(a, b) => {
                f.write_str("instagram_shard ")?;
                span(f, a, b)
            }
            Unit::KeyRange(start) => write!(f, "key_range {start:016x}"),
            Unit::TimeRange(None) => f.write_str("time_range open"),
            Unit::TimeRange(Some(ms)) => match crate::ids::clock::iso8601(ms.saturating_mul(1000), 0) {
                Some(t) => write!(f, "time_range until {t}"),
                None => write!(f, "time_range until {ms}"),
            },
            Unit::Hash(region) => write!(f, "hash {region}"),
            Unit::Default => f.write_str("default"),
        }
    }
}

impl<'a> Unit<'a> {
    /// The unit `name` names, when it is of a kind a move can name (a
    /// country, an override, a shard range, a key range) and written as
    /// this table's units are (`shard 5`, not `shards 5-5`; a key range in
    /// 16 lowercase hex digits); `None` otherwise. Whether the table has
    /// it is the caller's question.
    pub fn movable(name: &'a str) -> Option<Unit<'a>> {
        let (kind, rest) = name.split_once(' ')?;
        let unit = match kind {
            "country" => Unit::Country(rest),
            "override" => {
                let (country, entity) = rest.split_once(':')?;
                Unit::Override { country, entity }
            }
            "shard" | "shards" => {
                let (a, b) = rest.split_once('-').unwrap_or((rest, rest));
                Unit::Shards(a.parse().ok()?, b.parse().ok()?)
            }
            "key_range" => Unit::KeyRange(u64::from_str_radix(rest, 16).ok()?),
            _ => return None,
        };
        (unit.to_string() == name).then_some(unit)
    }
}

/// What [`Unit::movable`] reads, for an operator who wrote something else.
pub const MOVABLE_FORMS: &str = "a unit of this table, named as `plan` names it: `country KZ`, `override \
                                 KZ:WalletAccount`, `shard 5`, `shards 6-7` (a range as the table lists it) or \
                                 `key_range c000000000000000` (16 lowercase hex digits)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_a_move_can_give_reads_back_as_the_unit_it_names() {
        let movable = [
            Unit::Country("KZ"),
            Unit::Override { country: "KZ", entity: "WalletAccount" },
            Unit::Shards(5, 5),
            Unit::Shards(6, 7),
            Unit::KeyRange(0xc000_0000_0000_0000),
        ];
        for unit in movable {
            let name = unit.to_string();
            assert_eq!(Unit::movable(&name), Some(unit), "{name}");
        }
        let others = [
            Unit::Node(Node::LocalityMac, 0xc11_0002),
            Unit::InstagramShards(0, 4095),
            Unit::TimeRange(Some(1_704_067_200_000)),
            Unit::TimeRange(None),
            Unit::Hash("eu"),
            Unit::Default,
        ];
        for unit in others {
            assert_eq!(Unit::movable(&unit.to_string()), None, "{unit}");
        }
    }

    #[test]
    fn only_names_written_as_the_table_writes_them_are_read() {
        for name in ["shards 5-5", "shard 6-7", "key_range C000000000000000", "key_range c000", "country", "shard x"] {
            assert_eq!(Unit::movable(name), None, "{name}");
        }
    }

    #[test]
    fn names_are_written_as_operators_write_them() {
        let names = [
            (Unit::Shards(0, 5), "shards 0-5"),
            (Unit::Shards(11, 11), "shard 11"),
            (Unit::Node(Node::LocalityMac, 0xc11_0002), "locality_mac c110002"),
            (Unit::Node(Node::SonyflakeMachine, 7), "sonyflake_machine 7"),
            (Unit::InstagramShards(0, 4095), "instagram_shard 0-4095"),
            (Unit::KeyRange(0x8000_0000_0000_0000), "key_range 8000000000000000"),
            (Unit::TimeRange(Some(1_704_067_200_000)), "time_range until 2024-01-01T00:00:00Z"),
            (Unit::TimeRange(None), "time_range open"),
        ];
        for (unit, name) in names {
            assert_eq!(unit.to_string(), name);
        }
    }
}
