//! Header rules: the table's `headers`, then the route's, applied to the
//! request's fields on the way to the backends and to the answer's on the
//! way to the client: removed, then set (replacing), then added.
//!
//! A value may hold the request's values (`{request_id}`, `{region}`,
//! `{route}`, an iUID's `{country}` and `{entity}`); a value whose variable
//! this request has none of (`{country}` of a uniqid) is not written. The
//! rules are applied once, by the gateway the client is connected to: a
//! request relayed by a peer shardgate has had them, and its answer gets
//! them on its way back through that peer.

use std::borrow::Cow;

use http::{HeaderMap, HeaderValue};

use crate::routing::{FieldValue, HeaderEdit, Table, ValuePiece, Var};

/// What a rule's variables stand for in one request.
#[derive(Clone, Copy, Debug)]
pub(super) struct Values<'a> {
    /// The table, for country and entity names.
    pub(super) table: &'a Table,
    /// The request id.
    pub(super) request_id: &'a HeaderValue,
    /// The route's name.
    pub(super) route: &'a str,
    /// The owner's region (request), or the region that served it (answer).
    pub(super) region: Option<&'a str>,
    /// An iUID's country and service entity.
    pub(super) iuid: Option<(u8, u8)>,
}

impl<'a> Values<'a> {
    fn get(&self, var: Var) -> Option<Cow<'a, str>> {
        fn named(name: Option<&str>, code: u8) -> Cow<'_, str> {
            name.map_or_else(|| Cow::Owned(code.to_string()), Cow::Borrowed)
        }
        match var {
            Var::RequestId => self.request_id.to_str().ok().map(Cow::Borrowed),
            Var::Route => Some(Cow::Borrowed(self.route)),
            Var::Region => self.region.map(Cow::Borrowed),
            Var::Country => self.iuid.map(|(c, _)| named(self.table.country_name(c), c)),
            Var::Entity => self.iuid.map(|(_, e)| named(self.table.entity_name(e), e)),
        }
    }
}

/// Applies `edits`, in order, to `fields`.
pub(super) fn apply(edits: &[HeaderEdit], fields: &mut HeaderMap, values: &Values<'_>) {
    for edit in edits {
        for name in &edit.remove {
            fields.remove(name);
        }
        for (name, value) in &edit.set {
            if let Some(v) = render(value, values) {
                fields.insert(name.clone(), v);
            }
        }
        for (name, value) in &edit.add {
            if let Some(v) = render(value, values) {
                fields.append(name.clone(), v);
            }
        }
    }
}

/// The value for this request; `None` when a variable has no value here.
fn render(value: &FieldValue, values: &Values<'_>) -> Option<HeaderValue> {
    match value {
        FieldValue::Fixed(v) => Some(v.clone()),
        FieldValue::Template(pieces) => {
            let mut text = String::new();
            for piece in pieces {
                match piece {
                    ValuePiece::Text(t) => text.push_str(t),
                    ValuePiece::Var(var) => text.push_str(&values.get(*var)?),
                }
            }
            HeaderValue::from_str(&text).ok()
        }
    }
}
