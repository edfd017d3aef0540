//! Route path templates: the one place a template reaches matchit, for
//! validation and for the compiled table alike, with the parameter limit
//! checked first (matchit panics beyond 26).

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

#[cfg(test)]
mod tests {
    use super::*;

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
