//! Route path templates: the one place a template reaches matchit, for
//! validation and for the compiled table alike, with the parameter limit
//! checked first (matchit panics beyond 26); and [`PathTemplate`], a
//! template read into its pieces, to build a path from a match's parameters.

/// Most `{parameters}` a route's path template may have. matchit (0.8)
/// panics when a template has more than 26, so [`insert_template`] counts
/// them before a template reaches it; no real route needs more than a handful.
pub const MAX_TEMPLATE_PARAMS: usize = 16;

/// Why a path template cannot go into the router.
#[derive(Debug)]
pub enum TemplateError {
    /// More than [`MAX_TEMPLATE_PARAMS`] parameters (at most this many).
    TooManyParams(usize),
    /// matchit refused it (a conflict or a malformed parameter).
    Router(matchit::InsertError),
}

/// Inserts `template` into `router`: the one place templates reach matchit,
/// for validation and for the compiled table alike.
pub fn insert_template<T>(router: &mut matchit::Router<T>, template: &str, value: T) -> Result<(), TemplateError> {
    let params = template_params(template);
    if params > MAX_TEMPLATE_PARAMS {
        return Err(TemplateError::TooManyParams(params));
    }
    router.insert(template, value).map_err(TemplateError::Router)
}

/// An upper bound of the parameters in a path template: every `{` that is
/// not an escaped `{{` (matchit pairs escapes the same way, left to right).
fn template_params(template: &str) -> usize {
    let b = template.as_bytes();
    let (mut i, mut n) = (0, 0);
    while i < b.len() {
        if b[i] == b'{' {
            if b.get(i + 1) == Some(&b'{') {
                i += 2;
                continue;
            }
            n += 1;
        }
        i += 1;
    }
    n
}

/// A piece of text with `{names}` in it, as [`braces`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Braced {
    /// Text as it is (`{{` and `}}` unescaped), never empty.
    Text(String),
    /// What stood between `{` and `}`.
    Name(String),
}

/// `text` cut into text and `{names}`, with `{{` and `}}` for braces (the
/// syntax of path templates and of header rule values); the error says what
/// is wrong with it.
pub(crate) fn braces(text: &str) -> Result<Vec<Braced>, String> {
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                literal.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                literal.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(c) => name.push(c),
                        None => return Err("a `{` is not closed".into()),
                    }
                }
                if !literal.is_empty() {
                    pieces.push(Braced::Text(std::mem::take(&mut literal)));
                }
                pieces.push(Braced::Name(name));
            }
            '}' => return Err("a `}` is not opened (write `}}` for a brace)".into()),
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Braced::Text(literal));
    }
    Ok(pieces)
}

/// One piece of a path template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    /// Text as it is (`{{` and `}}` unescaped).
    Text(String),
    /// A parameter (`{name}`, or a catch-all `{*name}`), by name.
    Param(String),
}

/// A path template read into its pieces (matchit's syntax: `{name}`,
/// `{*rest}`, `{{` and `}}` for braces), filled with a match's parameters
/// to make a path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    pieces: Vec<Piece>,
}

impl PathTemplate {
    /// Reads `template`; the error says what is wrong with it.
    pub fn parse(template: &str) -> Result<PathTemplate, String> {
        if !template.starts_with('/') {
            return Err("a path template starts with `/`".into());
        }
        let param = |name: String| {
            let bare = name.strip_prefix('*').unwrap_or(&name);
            if bare.is_empty() || !bare.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(format!("{{{name}}} is not a parameter name"));
            }
            Ok(Piece::Param(bare.to_string()))
        };
        let pieces = braces(template)?
            .into_iter()
            .map(|b| match b {
                Braced::Text(t) => Ok(Piece::Text(t)),
                Braced::Name(name) => param(name),
            })
            .collect::<Result<_, String>>()?;
        Ok(PathTemplate { pieces })
    }

    /// The names of its parameters, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.pieces.iter().filter_map(|p| match p {
            Piece::Param(name) => Some(name.as_str()),
            Piece::Text(_) => None,
        })
    }

    /// The template up to the end of the path segment that holds `param`
    /// (`/s/{id}/{*rest}` cut at `id` is `/s/{id}`); `None` when it has no such parameter.
    pub fn through(&self, param: &str) -> Option<PathTemplate> {
        let at = self.pieces.iter().position(|p| *p == Piece::Param(param.to_string()))?;
        let mut pieces = self.pieces[..=at].to_vec();
        if let Some(Piece::Text(next)) = self.pieces.get(at + 1) {
            let end = next.find('/').unwrap_or(next.len());
            if end > 0 {
                pieces.push(Piece::Text(next[..end].to_string()));
            }
        }
        Some(PathTemplate { pieces })
    }

    /// The path it makes with `value` of each parameter (absent ones empty).
    pub fn fill<'v>(&self, value: impl Fn(&str) -> Option<&'v str>) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            match p {
                Piece::Text(t) => out.push_str(t),
                Piece::Param(name) => out.push_str(value(name).unwrap_or("")),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_read_into_pieces_and_filled() -> Result<(), String> {
        let t = PathTemplate::parse("/s/{id}/{*rest}")?;
        assert_eq!(t.params().collect::<Vec<_>>(), ["id", "rest"]);
        let value = |n: &str| match n {
            "id" => Some("X%2F1"),
            "rest" => Some("a/b"),
            _ => None,
        };
        assert_eq!(t.fill(value), "/s/X%2F1/a/b");
        assert_eq!(t.through("id").ok_or("no id")?.fill(value), "/s/X%2F1");
        assert_eq!(PathTemplate::parse("/v/{id}.json/x")?.through("id").ok_or("no id")?.fill(value), "/v/X%2F1.json");
        assert_eq!(PathTemplate::parse("/{{lit}}/{id}")?.fill(value), "/{lit}/X%2F1");
        for bad in ["s/{id}", "/{id", "/{}", "/{a-b}", "/x}"] {
            assert!(PathTemplate::parse(bad).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn template_parameters_are_counted_before_matchit_sees_them() {
        assert_eq!(template_params("/v1/orders/{id}"), 1);
        assert_eq!(template_params("/v1/{a}/{b}/{*rest}"), 3);
        assert_eq!(template_params("/v1/{{literal}}/{id}"), 1);
        assert_eq!(template_params("/{{{id}"), 1);
        // Past matchit's limit: refused before matchit (which would panic) sees it.
        let params = |n: usize| -> String { (0..n).map(|i| format!("/{{p{i}}}")).collect() };
        let mut router = matchit::Router::new();
        assert!(matches!(insert_template(&mut router, &params(30), 0usize), Err(TemplateError::TooManyParams(30))));
        assert!(router.at("/x").is_err());
        assert!(insert_template(&mut router, &params(MAX_TEMPLATE_PARAMS), 1).is_ok());
        assert!(matches!(insert_template(&mut router, "/{}", 2), Err(TemplateError::Router(_))));
    }
}
