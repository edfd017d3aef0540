//! `headers` (every route's) and `routes[i].headers`: field names that are
//! the application's own (never one the proxy reads, writes or removes),
//! each named once per direction, and values that are field values with
//! known variables.

use std::collections::HashSet;

use http::HeaderName;

use super::header_name;
use crate::config::fields::{field_value, FieldValue};
use crate::config::model::{HeaderEdit, HeaderRules};
use crate::config::report::Ctx;
use crate::config::schema::{HeaderEditSpec, HeaderRulesSpec};
use crate::config::show;
use crate::config::yaml::YamlPath;
use crate::http1::rules::MAX_LINES;

/// The edits `spec` at `at` makes: one per direction that has any.
pub(super) fn rules(spec: &HeaderRulesSpec, at: &YamlPath, ctx: &mut Ctx<'_>) -> HeaderRules {
    let edits = |spec: &HeaderEditSpec, at: &YamlPath, ctx: &mut Ctx<'_>| -> Vec<HeaderEdit> {
        if spec.is_empty() {
            return Vec::new();
        }
        vec![edit(spec, at, ctx)]
    };
    HeaderRules {
        request: edits(&spec.request, &at.k("request"), ctx),
        response: edits(&spec.response, &at.k("response"), ctx),
        ..HeaderRules::default()
    }
}

/// Route `route`'s edits: `defaults`' then `own`'s, with `{route}` filled
/// in; at most [`MAX_LINES`] fields edited per direction (`at`: the route's
/// `headers`).
pub(super) fn then(
    defaults: &HeaderRules,
    own: HeaderRules,
    route: &str,
    at: &YamlPath,
    ctx: &mut Ctx<'_>,
) -> HeaderRules {
    let named = |mut e: HeaderEdit| {
        for (_, value) in e.set.iter_mut().chain(e.add.iter_mut()) {
            *value = std::mem::replace(value, FieldValue::Template(Vec::new())).for_route(route);
        }
        e
    };
    let join = |first: &[HeaderEdit], then: Vec<HeaderEdit>| -> Vec<HeaderEdit> {
        first.iter().cloned().chain(then).map(named).collect()
    };
    let rules = HeaderRules {
        request: join(&defaults.request, own.request),
        response: join(&defaults.response, own.response),
        ..HeaderRules::default()
    };
    for (key, edits) in [("request", &rules.request), ("response", &rules.response)] {
        let lines: usize = edits.iter().map(|e| e.remove.len() + e.set.len() + e.add.len()).sum();
        if lines > MAX_LINES {
            let m = format!(
                "{lines} fields are edited on the {key}, with the table's `headers`; at most {MAX_LINES} may be"
            );
            ctx.at(&at.k(key), m, Some("edit fewer fields, or move edits to the application"));
        }
    }
    rules
}

fn edit(spec: &HeaderEditSpec, at: &YamlPath, ctx: &mut Ctx<'_>) -> HeaderEdit {
    let mut seen = HashSet::new();
    let mut name = |ctx: &mut Ctx<'_>, path: &YamlPath, text: &str| -> Option<HeaderName> {
        let h = header_name(ctx, path, text, "X-Tenant")?;
        if let Some(why) = protocol_field(&h) {
            ctx.at(
                path,
                format!("header {} {why}", show(text)),
                Some("name a field of the application's own, such as X-Tenant"),
            );
            return None;
        }
        if !seen.insert(h.clone()) {
            let m = format!("header {} is edited twice in one direction", show(text));
            ctx.at(path, m, Some("remove, set or add each field once"));
            return None;
        }
        Some(h)
    };
    let mut out = HeaderEdit::default();
    for (i, text) in spec.remove.iter().enumerate() {
        out.remove.extend(name(ctx, &at.k("remove").i(i), text));
    }
    for (key, list, into) in [("set", &spec.set, &mut out.set), ("add", &spec.add, &mut out.add)] {
        for (text, value) in list {
            let path = at.k(key).k(text);
            let Some(h) = name(ctx, &path, text) else { continue };
            match field_value(value) {
                Ok(v) => into.push((h, v)),
                Err(e) => ctx.at(&path, format!("invalid value {}: {e}", show(value)), Some(VALUE_HINT)),
            }
        }
    }
    out
}

const VALUE_HINT: &str =
    "e.g. \"{region}\" or \"max-age=31536000\"; variables: {request_id}, {region}, {route}, {country}, {entity}";

/// Why a header rule may not edit `name`, beyond the proxy-owned fields:
/// the trace context the proxy propagates, and gRPC's own protocol fields
/// (an edited `grpc-status` would change what a call's caller is told).
fn protocol_field(name: &HeaderName) -> Option<&'static str> {
    let n = name.as_str();
    if n == "traceparent" || n == "tracestate" {
        Some("carries the trace context the proxy propagates")
    } else if n.starts_with("grpc-") {
        Some("is one of gRPC's protocol fields")
    } else {
        None
    }
}
