//! What a route matches and what its backends are asked for: `match`
//! (a path template or a prefix, conflicts and unreachable routes) and
//! `rewrite`.

use std::collections::{BTreeSet, HashMap};

use crate::config::model::{Rewrite, RewritePath, Strategy};
use crate::config::report::Ctx;
use crate::config::schema;
use crate::config::show;
use crate::config::template::{insert_template, PathTemplate, TemplateError, MAX_TEMPLATE_PARAMS};
use crate::config::yaml::YamlPath;

/// A route's methods by name; `None` means all.
pub(super) type MethodSet = Option<BTreeSet<String>>;

/// The route's shown template and the matchit templates it is matched by:
/// its `path`, or a `prefix` in whole segments (`/static/` matches
/// `/static`, `/static/` and `/static/{*rest}`, each below more specific
/// templates).
pub(super) fn matched(r: &schema::Route, p: &YamlPath, ctx: &mut Ctx<'_>) -> (String, Vec<String>) {
    let mp = p.k("match");
    let path = (!r.matcher.path.is_empty()).then_some(r.matcher.path.as_str());
    let prefix = match (path, r.matcher.prefix.as_deref()) {
        (Some(path), None) => return (path.to_string(), vec![path.to_string()]),
        (None, Some(prefix)) => prefix,
        (Some(_), Some(_)) => {
            ctx.at(&mp.k("prefix"), "a route matches a `path` or a `prefix`, not both".into(), Some("remove one"));
            return (String::new(), Vec::new());
        }
        (None, None) => {
            let hint = Some("add `path: \"/v1/orders/{id}\"` or `prefix: \"/static/\"`");
            ctx.at(&mp, format!("route {} matches no `path` or `prefix`", show(&r.name)), hint);
            return (String::new(), Vec::new());
        }
    };
    if !prefix.starts_with('/') || prefix.contains(['{', '}', '?', '#']) {
        ctx.at(
            &mp.k("prefix"),
            format!("prefix {} is not a plain path", show(prefix)),
            Some("write a prefix such as \"/static/\": it starts with `/`, without parameters or a query"),
        );
        return (String::new(), Vec::new());
    }
    let base = prefix.trim_end_matches('/');
    let all = format!("{base}/{{*rest}}");
    let mut matches = vec![format!("{base}/"), all.clone()];
    if !base.is_empty() {
        matches.insert(0, base.to_string());
    }
    (all, matches)
}

/// `rewrite`: at most one of `strip_prefix` (a plain path) and `path` (a
/// template whose parameters the route's own path has), `query` `keep` or
/// `drop`; not on a search route, whose legs ask for the entity's own path.
pub(super) fn rewrite(
    r: &schema::Route,
    rw: &schema::RewriteSpec,
    strategy: Option<Strategy>,
    rp: &YamlPath,
    ctx: &mut Ctx<'_>,
) -> Option<Rewrite> {
    if strategy == Some(Strategy::Search) {
        let hint = Some("rewrite on the backends' side, or route by an id that carries its region");
        ctx.at(rp, format!("route {} searches for its ids and cannot rewrite them", show(&r.name)), hint);
        return None;
    }
    let keep_query = match rw.query.as_str() {
        "keep" => true,
        "drop" => false,
        other => {
            ctx.at(&rp.k("query"), format!("unknown query rule {}", show(other)), Some("use `keep` or `drop`"));
            return None;
        }
    };
    let path = match (&rw.strip_prefix, &rw.path) {
        (Some(_), Some(_)) => {
            ctx.at(rp, "a rewrite strips a prefix or makes a path, not both".into(), Some("remove one"));
            return None;
        }
        (None, None) => RewritePath::Same,
        (Some(prefix), None) => {
            let base = prefix.trim_end_matches('/');
            if !prefix.starts_with('/') || base.is_empty() || prefix.contains(['{', '}', '?', '#']) {
                let hint = Some("write a path such as \"/api\": it starts with `/`, without parameters or a query");
                ctx.at(&rp.k("strip_prefix"), format!("strip_prefix {} is not a plain path", show(prefix)), hint);
                return None;
            }
            RewritePath::StripPrefix(base.to_string())
        }
        (None, Some(text)) => RewritePath::Template(rewrite_template(r, text, &rp.k("path"), ctx)?),
    };
    Some(Rewrite { path, keep_query })
}

/// A rewrite's `path`: a template whose parameters are the route's (a prefix route's is `rest`).
fn rewrite_template(r: &schema::Route, text: &str, at: &YamlPath, ctx: &mut Ctx<'_>) -> Option<PathTemplate> {
    let own: Vec<String> = if r.matcher.prefix.is_some() {
        vec!["rest".to_string()]
    } else {
        PathTemplate::parse(&r.matcher.path).map(|t| t.params().map(str::to_string).collect()).unwrap_or_default()
    };
    let template = match PathTemplate::parse(text) {
        Ok(t) => t,
        Err(e) => {
            ctx.at(at, format!("invalid rewrite path {}: {e}", show(text)), Some("e.g. `path: \"/v1/orders/{id}\"`"));
            return None;
        }
    };
    let mut ok = true;
    for name in template.params().filter(|n| !own.iter().any(|m| m == n)) {
        ok = false;
        let hint = format!("the route's parameters are: {}", own.join(", "));
        ctx.at(at, format!("rewrite path names {{{name}}}, which the route does not match"), Some(&hint));
    }
    ok.then_some(template)
}

/// The templates seen so far: for conflicts (matchit's) and routes made
/// unreachable by an earlier route on the same template.
#[derive(Default)]
pub(super) struct Templates<'f> {
    by_template: HashMap<String, Vec<(&'f schema::Route, MethodSet)>>,
    router: matchit::Router<usize>,
    owner: HashMap<String, &'f schema::Route>,
}

impl<'f> Templates<'f> {
    pub(super) fn add(
        &mut self,
        r: &'f schema::Route,
        tpl: &str,
        methods: &MethodSet,
        p: &YamlPath,
        ctx: &mut Ctx<'_>,
    ) {
        let key = if r.matcher.prefix.is_some() { "prefix" } else { "path" };
        if !tpl.starts_with('/') {
            ctx.at(
                &p.k("match").k("path"),
                format!("path template {} does not start with `/`", show(tpl)),
                Some("write templates such as \"/v1/orders/{id}\""),
            );
            return;
        }
        if let Some(list) = self.by_template.get_mut(tpl) {
            let earlier = list.iter().find(|(_, their)| match (methods, their) {
                (None, _) | (_, None) => true,
                (Some(a), Some(b)) => a.intersection(b).next().is_some(),
            });
            if let Some((earlier, _)) = earlier {
                let at = if r.matcher.methods.is_some() { p.k("match").k("methods") } else { p.k("match").k(key) };
                ctx.at(
                    &at,
                    format!(
                        "route {} is unreachable: route {} (routes[{}]) already matches these methods on {}",
                        show(&r.name),
                        show(&earlier.name),
                        earlier.index,
                        show(tpl)
                    ),
                    Some("give the routes disjoint `methods`, or remove one"),
                );
            }
            list.push((r, methods.clone()));
            return;
        }
        self.by_template.insert(tpl.to_string(), vec![(r, methods.clone())]);
        let message = match insert_template(&mut self.router, tpl, r.index) {
            Ok(()) => {
                self.owner.insert(tpl.to_owned(), r);
                return;
            }
            Err(TemplateError::TooManyParams(n)) => {
                let m = format!(
                    "path template {} has {n} parameters; at most {MAX_TEMPLATE_PARAMS} are allowed",
                    show(tpl)
                );
                ctx.at(
                    &p.k("match").k(key),
                    m,
                    Some("match fewer segments as parameters, or end with a catch-all {*rest}"),
                );
                return;
            }
            Err(TemplateError::Router(matchit::InsertError::Conflict { with })) => match self.owner.get(&with) {
                Some(o) => format!(
                    "path template {} conflicts with {} of route {} (routes[{}])",
                    show(tpl),
                    show(&with),
                    show(&o.name),
                    o.index
                ),
                None => format!("path template {} conflicts with {}", show(tpl), show(&with)),
            },
            Err(TemplateError::Router(other)) => {
                format!("invalid path template {}: {}", show(tpl), other.to_string().to_lowercase())
            }
        };
        ctx.at(
            &p.k("match").k(key),
            message,
            Some("parameters are whole segments like {id} or a trailing {*rest}; two templates may not differ only in parameter names"),
        );
    }
}
