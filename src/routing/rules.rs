//! Header rules made once, when a table is built: the table's `headers`,
//! then the route's, per direction, as the lines the head writers apply
//! ([`Rules`]): removed, then set (replacing), then added, edit by edit.
//!
//! A value may hold the request's values: `{request_id}`, `{region}` (the
//! owner's on the request, the serving region's on the answer), an iUID's
//! `{country}` and `{entity}` (their names in the table, else their numbers);
//! `{route}` was filled in when the table was read. A value whose variable
//! a request has none of (`{country}` of a uniqid) is not written. The
//! rules are applied once, by the gateway the client is connected to: a
//! request relayed by a peer shardgate has had them, and its answer gets
//! them on its way back through that peer.

use std::sync::Arc;

use http::HeaderValue;

use crate::config::fields::{FieldValue, ValuePiece, Var};
use crate::config::model::{HeaderEdit, Region, Route};
use crate::http1::rules::{Line, Lists, Piece, Rules, Value};

/// Which list `{region}` picks from (the regions' names, by region).
pub const REGION: usize = 0;
/// Which list `{country}` picks from (names, else numbers, by country).
pub const COUNTRY: usize = 1;
/// Which list `{entity}` picks from (names, else codes, by entity code).
pub const ENTITY: usize = 2;

/// The lists rule values pick from: region names by region, country names
/// (else numbers) by country, entity names (else codes) by code; `None`
/// for a name that is no field value.
pub(super) fn names(regions: &[Region], countries: &[Option<String>], entities: &[Option<String>]) -> Lists {
    let by_code = |names: &[Option<String>]| -> Box<[Option<HeaderValue>]> {
        (0..=u8::MAX)
            .map(|code| match names.get(usize::from(code)).and_then(Option::as_deref) {
                Some(name) => HeaderValue::from_str(name).ok(),
                None => Some(HeaderValue::from(u16::from(code))),
            })
            .collect()
    };
    [regions.iter().map(|r| HeaderValue::from_str(&r.name).ok()).collect(), by_code(countries), by_code(entities)]
}

/// `route` with its header rules made against `lists`.
pub(super) fn compile(mut route: Route, lists: &Arc<Lists>) -> Route {
    let h = &mut route.headers;
    h.request_rules = made(lines(&h.request, &route.name), lists, &route.name);
    h.response_rules = made(lines(&h.response, &route.name), lists, &route.name);
    route
}

/// `lines` ready for messages; validation keeps them within
/// [`crate::http1::rules::MAX_LINES`], and any beyond are said loudly.
fn made(lines: Vec<Line>, lists: &Arc<Lists>, route: &str) -> Option<Arc<Rules>> {
    let n = lines.len();
    let rules = Rules::new(lines, Arc::clone(lists)).map(Arc::new);
    if rules.is_none() && n > 0 {
        tracing::error!(route, lines = n, "header rules dropped: more lines than a route may have");
    }
    rules
}

fn lines(edits: &[HeaderEdit], route: &str) -> Vec<Line> {
    let mut out = Vec::new();
    for edit in edits {
        out.extend(edit.remove.iter().map(|name| Line { name: name.clone(), value: None, replaces: true }));
        for (list, replaces) in [(&edit.set, true), (&edit.add, false)] {
            out.extend(list.iter().map(|(name, v)| Line {
                name: name.clone(),
                value: Some(value(v, route)),
                replaces,
            }));
        }
    }
    out
}

fn value(v: &FieldValue, route: &str) -> Value {
    match v {
        FieldValue::Fixed(v) => Value::Fixed(v.clone()),
        FieldValue::Template(pieces) => Value::Pieces(
            pieces
                .iter()
                .map(|p| match p {
                    ValuePiece::Text(t) => Piece::Text(t.clone()),
                    ValuePiece::Var(Var::RequestId) => Piece::Given,
                    ValuePiece::Var(Var::Region) => Piece::Pick(REGION),
                    ValuePiece::Var(Var::Country) => Piece::Pick(COUNTRY),
                    ValuePiece::Var(Var::Entity) => Piece::Pick(ENTITY),
                    // Filled in when the table was read, and known here anyway.
                    ValuePiece::Var(Var::Route) => Piece::Text(route.to_string()),
                })
                .collect(),
        ),
    }
}
