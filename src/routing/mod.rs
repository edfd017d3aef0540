//! Routing: the compiled table, placement, and its live replacement.
//!
//! * [`table`]: [`Table`] compiled from a validated [`crate::config::Config`]:
//!   flat arrays and small maps, immutable once built;
//! * [`rules`]: header rules made once per route against the table's names;
//! * [`rule`]: the vocabulary: [`RegionId`], [`Strategy`], [`Placement`], [`Rule`], [`NoOwner`];
//! * [`place`]: [`Table::place`], decoded id → [`Placement`] (region and rule);
//! * [`units`]: [`Units`], the placement units (a country, a shard range,
//!   …) by name and the requests each placed;
//! * [`plan`]: [`Plan`], what a new table moves: each unit whose owner
//!   changes and the traffic it carried;
//! * [`found`]: [`Found`], where `placement: search` routes found their
//!   ids (bounded, time-limited, dropped for a region its reload changes);
//! * [`resolved`]: [`Resolved`], the addresses named endpoints resolved to
//!   (DNS discovery), which a table is compiled with;
//! * [`shared`]: [`SharedTable`], the `ArcSwap` every request takes one
//!   snapshot from, and where reloads and address changes publish;
//! * [`reload`]: [`Reloader`], read → parse → validate → compile → swap, from
//!   a file watch, SIGHUP, the admin listener or a pushed source (etcd);
//! * [`audit`]: [`audit::Audit`], every change appended to a hash-chained trail.

pub mod audit;
pub mod found;
pub mod place;
pub mod plan;
pub mod reload;
pub mod resolved;
pub mod rule;
pub mod rules;
pub mod shared;
pub mod table;
pub mod units;

pub use found::{Found, FoundStats, Lookup};
pub use plan::{Move, Plan};
pub use reload::{Provenance, ReloadError, ReloadOutcome, Reloader, Source, WatchOptions};
pub use resolved::Resolved;
pub use rule::{Missing, NoOwner, Placement, RegionId, Rule, Strategy};
pub use shared::{Loaded, SharedTable};
pub use table::{
    Balance, CountrySource, FieldValue, HeaderEdit, HeaderRules, IdRule, IdSource, MintRule, Region, Rewrite,
    RewritePath, Route, RouteMatch, Settings, Table, To, Upstream, ValuePiece, Var,
};
pub use units::Units;
