//! Validation: everything the types cannot say, and the typed [`Config`]
//! it makes of a [`File`]. One function per section; each reports its
//! problems and carries on, so one run reports all of them, and returns its
//! part of the typed result (an item with a problem is left out of it, and
//! a file with any problem never yields a `Config`). Names that are defined
//! but failed to parse (a region with a bad URL, say) still count as
//! defined, so one mistake is reported once, not again at every reference.

mod headers;
mod moves;
mod names;
mod paths;
mod placement;
mod reads;
mod routes;
mod settings;

use http::HeaderName;

use super::duration::Dur;
use super::model::Config;
use super::report::Ctx;
use super::schema::File;
use super::show;
use super::yaml::{edit_distance, YamlPath};
use crate::ids::Format;

pub use names::METHODS;

/// Most regions a table may define.
pub const MAX_REGIONS: usize = 4096;
/// Largest `shards.count`.
pub const MAX_SHARDS: u32 = 1 << 20;
/// Most key ranges.
pub const MAX_KEY_RANGES: usize = 1 << 20;

/// Checks `file`, reporting into `ctx`, and builds its typed form (only
/// meaningful when `ctx` holds no error afterwards).
pub(crate) fn validate(file: &File, ctx: &mut Ctx<'_>) -> Config {
    let names = names::Names::new(file);
    let mut regions = names::regions(file, &names, ctx);
    let countries = names::countries(file, &names, ctx);
    let entities = names::entities(file, ctx);
    let overrides = names::overrides(file, &names, &countries, &entities, ctx);
    let shards = placement::shards(file, &names, ctx);
    let nodes = placement::nodes(file, &names, ctx);
    let key_ranges = placement::key_ranges(file, &names, ctx);
    let hash = placement::hash(file, &names, ctx);
    let time_ranges = placement::time_ranges(file, &names, ctx);
    let owners = moves::Owners {
        countries: &countries,
        entities: &entities,
        overrides: &overrides,
        shards: shards.as_ref(),
        key_ranges: &key_ranges,
    };
    let moves = moves::moves(file, &names, &owners, ctx);
    let top = settings::top_level(file, &names, ctx);
    let ids = settings::ids(file, ctx);
    settings::limits_and_timeouts(file, ctx);
    settings::tls(file, ctx);
    let mut routes = routes::routes(file, &names, &countries, &entities, ctx);
    reads::search_cache(&file.search_cache, ctx);
    settings::telemetry(&file.telemetry, ctx);
    let settings = settings::typed(file, &top, &ids);
    names::region_policies(file, &mut regions, &settings.upstream);
    routes::policies(file, &mut routes, &regions, &settings.upstream);
    Config {
        settings,
        local_region: top.local_region,
        default_region: top.default_region,
        regions,
        countries,
        entities,
        overrides,
        shards,
        nodes,
        key_ranges,
        hash,
        time_ranges,
        moves,
        ids: ids.params,
        routes,
        variables: Vec::new(),
    }
}

/// A header name from the file, reported at `path` when it is not one, or
/// when it names a field the proxy itself reads, writes or removes
/// ([`proxy_owned`]).
fn header_name(ctx: &mut Ctx<'_>, path: &YamlPath, name: &str, example: &str) -> Option<HeaderName> {
    let Ok(h) = HeaderName::from_bytes(name.as_bytes()) else {
        ctx.at(
            path,
            format!("invalid header name {}", show(name)),
            Some(&format!("header names are tokens such as {example}")),
        );
        return None;
    };
    if let Some(why) = proxy_owned(&h) {
        ctx.at(
            path,
            format!("header {} {why}", show(name)),
            Some(&format!("name a field of the application's own, such as {example}")),
        );
        return None;
    }
    Some(h)
}

/// A region's or a route's own `attempt_timeout` and `request_timeout`
/// (under `at`): each positive, and one attempt fitting in the whole
/// request, a key left unset being `upstream`'s.
fn own_timeouts(file: &File, attempt: Option<Dur>, request: Option<Dur>, at: &YamlPath, ctx: &mut Ctx<'_>) {
    for (key, d) in [("attempt_timeout", attempt), ("request_timeout", request)] {
        if d.is_some_and(|d| d.0.is_zero()) {
            ctx.at(&at.k(key), format!("{key} must be positive"), Some(DURATION_HINT));
        }
    }
    let (a, r) = (attempt.unwrap_or(file.upstream.attempt_timeout), request.unwrap_or(file.upstream.request_timeout));
    if a > r {
        let key = if attempt.is_some() { "attempt_timeout" } else { "request_timeout" };
        let m = format!("attempt_timeout {a} is longer than request_timeout {r}");
        ctx.at(&at.k(key), m, Some("one attempt must fit in the whole request (unset keys are upstream's)"));
    }
}

/// Health checks (`upstream.health`, or a region's, under `at`) that can
/// run: a positive timeout (none would ever answer in time), a path a
/// request line can carry.
fn health_checks(timeout: Option<Dur>, path: Option<&str>, at: &YamlPath, ctx: &mut Ctx<'_>) {
    if timeout.is_some_and(|d| d.0.is_zero()) {
        ctx.at(&at.k("timeout"), "timeout must be positive".into(), Some(DURATION_HINT));
    }
    if path.is_some_and(|p| !p.starts_with('/')) {
        ctx.at(&at.k("path"), "a health check path starts with `/`".into(), Some("e.g. /healthz"));
    }
}

/// What a bad duration's hint says.
const DURATION_HINT: &str = "durations look like 250ms, 15s or 2m";

/// Refused with the fields of one connection ([`crate::http1::HOP_BY_HOP`],
/// removed before a request is forwarded): `Trailer`, which announces the
/// fields of a message's end. A peer shardgate could not route by any of
/// them, and a minted id written into one would be dropped or would
/// reframe the message.
const TRAILER: &str = "trailer";
/// Fields that frame a message or name its target, which the proxy sets
/// for the upstream itself.
const MESSAGE_FIELDS: [&str; 2] = ["host", "content-length"];
/// Fields the proxy adds to every forwarded request (the request id, the
/// `X-Forwarded-*` trio, `Via`) or keeps only from trusted hops
/// (`Forwarded`): a route's id or country read from one would be the
/// proxy's value, not the client's, and a minted id written into one would
/// go upstream beside the proxy's.
const PROXY_ADDED_FIELDS: [&str; 6] =
    ["x-request-id", "via", "x-forwarded-for", "x-forwarded-proto", "x-forwarded-host", "forwarded"];
/// The prefix of the fields the mesh and the debug answers use
/// (`X-Shardgate-Hops`, `-Failover`, `-Leg`, `-Partial`, ...).
const PROXY_PREFIX: &str = "x-shardgate-";

/// Why a route may not name `name` as the field an id, a country list or a
/// minted id travels in, or `None` when it may. `HeaderName`s are
/// lowercase, so the lists compare as written.
pub fn proxy_owned(name: &HeaderName) -> Option<&'static str> {
    let n = name.as_str();
    if crate::http1::HOP_BY_HOP.contains(name) || n == TRAILER {
        Some("describes one connection and is never forwarded")
    } else if MESSAGE_FIELDS.contains(&n) {
        Some("frames the message or names its target, and the proxy sets it upstream")
    } else if PROXY_ADDED_FIELDS.contains(&n) {
        Some("is one the proxy writes itself")
    } else if n.starts_with(PROXY_PREFIX) {
        Some("is in the proxy's own x-shardgate- namespace")
    } else {
        None
    }
}

/// A list of format names at `path` (`id.formats`, `fanout.sort.formats`):
/// not empty (`empty_hint` says what to write), each known and listed once.
/// The formats, with their positions in the list.
fn format_list(names: &[String], path: &YamlPath, empty_hint: &str, ctx: &mut Ctx<'_>) -> Vec<(usize, Format)> {
    if names.is_empty() {
        ctx.at(path, "formats list is empty".into(), Some(empty_hint));
    }
    let mut formats: Vec<(usize, Format)> = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let Some(format) = Format::from_name(name) else {
            let hint = match closest(name, Format::ALL.iter().map(|f| f.name())) {
                Some(c) => format!("did you mean `{c}`?"),
                None => format!("use one of {}", Format::ALL.map(|f| f.name()).join(", ")),
            };
            ctx.at(&path.i(i), format!("unknown id format {}", show(name)), Some(&hint));
            continue;
        };
        if formats.iter().any(|&(_, f)| f == format) {
            ctx.at(&path.i(i), format!("format {} is listed twice", show(name)), Some("remove the repeat"));
            continue;
        }
        formats.push((i, format));
    }
    formats
}

/// The candidate closest to `name` (case-insensitive edit distance), if close enough to suggest.
fn closest<'n>(name: &str, candidates: impl Iterator<Item = &'n str>) -> Option<&'n str> {
    candidates
        .map(|c| (edit_distance(&name.to_ascii_lowercase(), &c.to_ascii_lowercase()), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min()
        .map(|(_, c)| c)
}

/// A name of a region, country or entity: letters, digits, `-` and `_`.
fn is_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Parses a canonical decimal integer no larger than `max`.
pub fn parse_decimal(text: &str, max: u64) -> Option<u64> {
    if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if text.len() > 1 && text.starts_with('0') {
        return None;
    }
    text.parse::<u64>().ok().filter(|&v| v <= max)
}
