//! Header rule values: text, or text with the request's values in it
//! (`{request_id}`, `{region}`, …), read once when the table loads
//! ([`field_value`]) and made per request by the proxy.

use super::template::{braces, Braced};

/// A field value from the table: text, or text with the request's values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldValue {
    /// The same for every request.
    Fixed(http::HeaderValue),
    /// Made per request.
    Template(Vec<ValuePiece>),
}

/// A piece of a field value template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ValuePiece {
    /// As written.
    Text(String),
    /// One of the request's values.
    Var(Var),
}

/// The request's values a field value may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Var {
    /// `{request_id}`.
    RequestId,
    /// `{region}`: the owner's region on the request; on the answer, the region that served it.
    Region,
    /// `{route}`: the route's name.
    Route,
    /// `{country}`: the iUID's country (its name in the table, else its number).
    Country,
    /// `{entity}`: the iUID's service entity (its name in the table, else its code).
    Entity,
}

impl Var {
    /// Every variable, with its name in a template.
    pub const ALL: [(&'static str, Var); 5] = [
        ("request_id", Var::RequestId),
        ("region", Var::Region),
        ("route", Var::Route),
        ("country", Var::Country),
        ("entity", Var::Entity),
    ];
}

impl FieldValue {
    /// The value with `{route}` made `route`'s name (a route's rules are
    /// its own, so the name is known when the table loads): fixed when no
    /// other variable is left.
    pub fn for_route(self, route: &str) -> FieldValue {
        let FieldValue::Template(pieces) = self else { return self };
        let mut out: Vec<ValuePiece> = Vec::with_capacity(pieces.len());
        for piece in pieces {
            let text = match piece {
                ValuePiece::Var(Var::Route) => route.to_string(),
                ValuePiece::Text(t) => t,
                var => {
                    out.push(var);
                    continue;
                }
            };
            match out.last_mut() {
                Some(ValuePiece::Text(last)) => last.push_str(&text),
                _ => out.push(ValuePiece::Text(text)),
            }
        }
        match out.as_slice() {
            [ValuePiece::Text(t)] => match http::HeaderValue::from_str(t) {
                Ok(v) => FieldValue::Fixed(v),
                Err(_) => FieldValue::Template(out),
            },
            _ => FieldValue::Template(out),
        }
    }
}

/// A header rule's value: text with `{request_id}`, `{region}`, `{route}`,
/// `{country}` or `{entity}` in it (`{{` and `}}` for braces); the error says
/// what is wrong with it.
pub fn field_value(text: &str) -> Result<FieldValue, String> {
    let var = |name: String| match Var::ALL.iter().find(|(n, _)| *n == name) {
        Some(&(_, var)) => Ok(ValuePiece::Var(var)),
        None => {
            let known: Vec<String> = Var::ALL.iter().map(|(n, _)| format!("{{{n}}}")).collect();
            Err(format!("{{{name}}} is not one of {}", known.join(", ")))
        }
    };
    let pieces = braces(text)?
        .into_iter()
        .map(|b| match b {
            Braced::Text(t) => Ok(ValuePiece::Text(t)),
            Braced::Name(name) => var(name),
        })
        .collect::<Result<Vec<_>, String>>()?;
    let all_text: String = pieces
        .iter()
        .map(|p| match p {
            ValuePiece::Text(t) => t.as_str(),
            ValuePiece::Var(_) => "x",
        })
        .collect();
    if http::HeaderValue::from_str(&all_text).is_err() {
        return Err("a field value is visible ASCII, spaces and tabs".into());
    }
    match pieces.as_slice() {
        [] => Ok(FieldValue::Fixed(http::HeaderValue::from_static(""))),
        [ValuePiece::Text(t)] => http::HeaderValue::from_str(t).map(FieldValue::Fixed).map_err(|e| e.to_string()),
        _ => Ok(FieldValue::Template(pieces)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_values_are_text_or_templates_of_known_variables() -> Result<(), String> {
        assert_eq!(field_value("max-age=60")?, FieldValue::Fixed(http::HeaderValue::from_static("max-age=60")));
        assert_eq!(
            field_value("{region}-{{x}}")?,
            FieldValue::Template(vec![ValuePiece::Var(Var::Region), ValuePiece::Text("-{x}".into())])
        );
        assert_eq!(
            field_value("{route}/{region}/{route}")?.for_route("r"),
            FieldValue::Template(vec![
                ValuePiece::Text("r/".into()),
                ValuePiece::Var(Var::Region),
                ValuePiece::Text("/r".into())
            ])
        );
        assert_eq!(
            field_value("to {route}")?.for_route("r"),
            FieldValue::Fixed(http::HeaderValue::from_static("to r"))
        );
        for bad in ["{nope}", "a}b", "line\nbreak", "{region"] {
            assert!(field_value(bad).is_err(), "{bad}");
        }
        Ok(())
    }
}
