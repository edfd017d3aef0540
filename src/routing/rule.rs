//! The vocabulary of placement: the strategy a route uses, where an id was
//! placed and by which rule, and what was missing when no region owns it.
//! Plain data, shared by the table, placement, logs and `/explain`.

use std::fmt;

use crate::ids::Format;

pub use crate::config::model::Strategy;

/// An interned region: an index into [`super::Table::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u16);

impl RegionId {
    /// The regions a validated rule lists by position (`fanout.regions`,
    /// `search.regions`), in order.
    pub fn list(positions: &[usize]) -> impl Iterator<Item = RegionId> + '_ {
        positions.iter().filter_map(|&i| u16::try_from(i).ok()).map(RegionId)
    }
}

/// Which region owns an id, and the rule that said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// The owning region.
    pub region: RegionId,
    /// The rule that matched.
    pub rule: Rule,
}

/// The rule that placed an id (what `/explain` and the logs show).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// A (country, entity) override.
    Override {
        /// Country id.
        country: u8,
        /// Service entity code.
        entity: u8,
    },
    /// The country's owning region.
    Country {
        /// Country id.
        country: u8,
    },
    /// A uniqid shard range.
    Shard {
        /// Shard number.
        shard: u32,
    },
    /// The Locality MAC fragment table.
    LocalityMac {
        /// 28-bit MAC fragment.
        fragment: u32,
    },
    /// The Locality pid table.
    LocalityPid {
        /// Pid field.
        pid: u16,
    },
    /// The Snowflake datacenter table.
    SnowflakeDatacenter {
        /// Datacenter id.
        id: u64,
    },
    /// The Snowflake worker table.
    SnowflakeWorker {
        /// Worker id.
        id: u64,
    },
    /// The Sonyflake machine table.
    SonyflakeMachine {
        /// Machine id.
        id: u16,
    },
    /// The Instagram logical-shard table.
    InstagramShard {
        /// Logical shard.
        shard: u16,
    },
    /// A key range (index into `key_ranges` as listed).
    KeyRange {
        /// Position of the range in the table.
        index: usize,
    },
    /// Rendezvous hashing.
    Hash,
    /// A time range (index into `time_ranges`).
    TimeRange {
        /// Position of the range in the table.
        index: usize,
    },
    /// `default_region`, because the strategy found no owner.
    Default,
    /// The route's own region (`to: { region }`): it routes by its path alone.
    Route,
    /// The instance's own region (`to: local`; `default_region` on an instance that serves none).
    Local,
}

impl Rule {
    /// A stable snake_case token for logs and metrics.
    pub const fn kind(&self) -> &'static str {
        match self {
            Rule::Override { .. } => "override",
            Rule::Country { .. } => "country",
            Rule::Shard { .. } => "shard",
            Rule::LocalityMac { .. } => "locality_mac",
            Rule::LocalityPid { .. } => "locality_pid",
            Rule::SnowflakeDatacenter { .. } => "snowflake_datacenter",
            Rule::SnowflakeWorker { .. } => "snowflake_worker",
            Rule::SonyflakeMachine { .. } => "sonyflake_machine",
            Rule::InstagramShard { .. } => "instagram_shard",
            Rule::KeyRange { .. } => "key_range",
            Rule::Hash => "hash",
            Rule::TimeRange { .. } => "time_range",
            Rule::Default => "default",
            Rule::Route => "route",
            Rule::Local => "local",
        }
    }
}

impl fmt::Display for Rule {
    /// The rule with numbers only; [`Table::explain`](super::Table::explain) adds country and entity names.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Override { country, entity } => write!(f, "override {country}/{entity}"),
            Rule::Country { country } => write!(f, "country {country}"),
            Rule::Shard { shard } => write!(f, "shard {shard}"),
            Rule::LocalityMac { fragment } => write!(f, "locality mac {fragment:07x}"),
            Rule::LocalityPid { pid } => write!(f, "locality pid {pid}"),
            Rule::SnowflakeDatacenter { id } => write!(f, "snowflake datacenter {id}"),
            Rule::SnowflakeWorker { id } => write!(f, "snowflake worker {id}"),
            Rule::SonyflakeMachine { id } => write!(f, "sonyflake machine {id}"),
            Rule::InstagramShard { shard } => write!(f, "instagram shard {shard}"),
            Rule::KeyRange { index } => write!(f, "key range {index}"),
            Rule::Hash => f.write_str("rendezvous hash"),
            Rule::TimeRange { index } => write!(f, "time range {index}"),
            Rule::Default => f.write_str("default region"),
            Rule::Route => f.write_str("the route's region"),
            Rule::Local => f.write_str("local region"),
        }
    }
}

/// No region owns an id under a strategy, and there is no `default_region`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoOwner {
    /// The strategy that was applied (after resolving `auto`).
    pub strategy: Strategy,
    /// What was looked up.
    pub detail: Missing,
}

/// The key that found no owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    /// iUID country (and entity) with neither override nor country entry.
    Country {
        /// Country id.
        country: u8,
        /// Service entity code.
        entity: u8,
    },
    /// uniqid shard outside the shard table.
    Shard {
        /// Shard number.
        shard: u32,
    },
    /// Locality node in neither node table.
    LocalityNode {
        /// MAC fragment.
        fragment: u32,
        /// Pid.
        pid: u16,
    },
    /// Snowflake in neither node table.
    SnowflakeNode {
        /// Datacenter id.
        datacenter: u64,
        /// Worker id.
        worker: u64,
    },
    /// Sonyflake machine not in the table.
    SonyflakeMachine {
        /// Machine id.
        id: u16,
    },
    /// Instagram shard not in the table.
    InstagramShard {
        /// Logical shard.
        shard: u16,
    },
    /// No key range (empty table).
    KeyRange {
        /// The id's key hash.
        key: u64,
    },
    /// No hash regions configured.
    Hash,
    /// The time is past the last time range.
    Time {
        /// The id's Unix ms.
        unix_ms: u64,
    },
    /// The strategy cannot read this format.
    Unsupported {
        /// The id's format.
        format: Format,
    },
}

impl fmt::Display for NoOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.detail {
            Missing::Country { country, entity } => {
                write!(f, "no region owns country {country} (entity {entity})")
            }
            Missing::Shard { shard } => write!(f, "no region owns shard {shard}"),
            Missing::LocalityNode { fragment, pid } => {
                write!(f, "no region owns locality node mac {fragment:07x} or pid {pid}")
            }
            Missing::SnowflakeNode { datacenter, worker } => {
                write!(f, "no region owns snowflake datacenter {datacenter} or worker {worker}")
            }
            Missing::SonyflakeMachine { id } => write!(f, "no region owns sonyflake machine {id}"),
            Missing::InstagramShard { shard } => write!(f, "no region owns instagram shard {shard}"),
            Missing::KeyRange { key } => write!(f, "no key range covers key {key:016x}"),
            Missing::Hash => f.write_str("no regions are configured for hashing"),
            Missing::Time { unix_ms } => write!(f, "no time range covers unix ms {unix_ms}"),
            Missing::Unsupported { format } => {
                write!(f, "placement {} cannot place {format} ids", self.strategy)
            }
        }
    }
}

impl std::error::Error for NoOwner {}
