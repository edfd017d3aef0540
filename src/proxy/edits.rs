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

use bytes::Bytes;
use http::HeaderValue;

use crate::http1::write::RuleFields;
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
    /// `var`'s value as a field, when the table made it one (a name).
    fn field(&self, var: Var) -> Option<HeaderValue> {
        match var {
            Var::RequestId => Some(self.request_id.clone()),
            Var::Route => None,
            Var::Region => self.region.and_then(|r| self.table.region_field(r)).cloned(),
            Var::Country => self.iuid.and_then(|(c, _)| self.table.country_field(c)).cloned(),
            Var::Entity => self.iuid.and_then(|(_, e)| self.table.entity_field(e)).cloned(),
        }
    }

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

/// Applies `edits`, in order, to what the rules make of a message's
/// fields ([`RuleFields`], written with its head).
pub(super) fn apply(edits: &[HeaderEdit], rules: &mut RuleFields, values: &Values<'_>) {
    rules.reserve(edits.iter().map(|e| e.remove.len() + e.set.len() + e.add.len()).sum());
    for edit in edits {
        for name in &edit.remove {
            rules.remove(name);
        }
        for (name, value) in &edit.set {
            if let Some(v) = render(value, values) {
                rules.set(name, v);
            }
        }
        for (name, value) in &edit.add {
            if let Some(v) = render(value, values) {
                rules.add(name, v);
            }
        }
    }
}

/// The value for this request; `None` when a variable has no value here.
fn render(value: &FieldValue, values: &Values<'_>) -> Option<HeaderValue> {
    match value {
        FieldValue::Fixed(v) => Some(v.clone()),
        // One variable: its value as a field when the table made it one
        // (a name) or the request has it (its id): no text to build.
        FieldValue::Template(pieces) => match pieces.as_slice() {
            [ValuePiece::Var(var)] => values.field(*var).or_else(|| built(pieces, values)),
            _ => built(pieces, values),
        },
    }
}

/// A template's value, its text built for this request.
fn built(pieces: &[ValuePiece], values: &Values<'_>) -> Option<HeaderValue> {
    fn piece<'a>(p: &'a ValuePiece, values: &Values<'a>) -> Option<Cow<'a, str>> {
        match p {
            ValuePiece::Text(t) => Some(Cow::Borrowed(t)),
            ValuePiece::Var(var) => values.get(*var),
        }
    }
    // Sized first, so that the text is one allocation the value takes over
    // as it is (a `Bytes` from a full `Vec`), not copied.
    let len = pieces.iter().map(|p| piece(p, values).map(|t| t.len())).sum::<Option<usize>>()?;
    let mut text = Vec::with_capacity(len);
    for p in pieces {
        text.extend_from_slice(piece(p, values)?.as_bytes());
    }
    // Checked here as the table's fixed values were when it loaded.
    HeaderValue::from_maybe_shared(Bytes::from(text)).ok()
}
