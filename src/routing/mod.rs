//! Routing: the compiled table, placement, and its live replacement.
//!
//! * [`table`]: [`Table`] compiled from a validated [`crate::config::Config`]:
//!   flat arrays and small maps, immutable once built;
//! * [`rules`]: header rules made once per route against the table's names;
//! * [`rule`]: the vocabulary: [`RegionId`], [`Strategy`], [`Placement`], [`Rule`], [`NoOwner`];
//! * [`place`]: [`Table::place`], decoded id → [`Placement`] (region and rule);
//! * [`found`]: [`Found`], where `placement: search` routes found their
//!   ids (bounded, time-limited, dropped for a region its reload changes);
//! * [`resolved`]: [`Resolved`], the addresses named endpoints resolved to
//!   (DNS discovery), which a table is compiled with;
//! * [`shared`]: [`SharedTable`], the `ArcSwap` every request takes one
//!   snapshot from, and where reloads and address changes publish;
//! * [`reload`]: [`Reloader`], read → parse → validate → compile → swap, from
//!   a file watch, SIGHUP or the admin listener.

pub mod found;
pub mod place;
pub mod reload;
pub mod resolved;
pub mod rule;
pub mod rules;
pub mod shared;
pub mod table;

pub use found::{Found, FoundStats, Lookup};
pub use reload::{ReloadError, ReloadOutcome, Reloader, WatchOptions};
pub use resolved::Resolved;
pub use rule::{Missing, NoOwner, Placement, RegionId, Rule, Strategy};
pub use shared::{Loaded, SharedTable};
pub use table::{
    Balance, CountrySource, FieldValue, HeaderEdit, HeaderRules, IdRule, IdSource, MintRule, Region, Rewrite,
    RewritePath, Route, RouteMatch, Settings, Table, To, Upstream, ValuePiece, Var,
};
