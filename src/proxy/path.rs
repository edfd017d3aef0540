//! Path: the request target's dot segments (`.`, `..`, and their
//! percent-encoded spellings `%2e`, `.%2E`, …) removed per RFC 3986 §5.2.4
//! before the route is matched, so what is routed is what is forwarded: a
//! `/raw/{id}/../../v1/orders/{other}` cannot reach one route while being
//! forwarded as another's path.

use http::uri::{PathAndQuery, Uri};

/// `uri` with the dot segments of its path removed, or `None` when it has
/// none (the common case, found without allocating). `..` never climbs above
/// the root.
pub fn without_dot_segments(uri: &Uri) -> Option<Uri> {
    let path = uri.path();
    // A dot segment needs a `.` or a `%` (of `%2e`): most paths have neither,
    // and one vectorised search says so.
    if memchr::memchr2(b'.', b'%', path.as_bytes()).is_none() || !path.split('/').any(is_dot_segment) {
        return None;
    }
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match dot_kind(segment) {
            Some(Dot::One) => {
                if last {
                    out.push("");
                }
            }
            Some(Dot::Two) => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            None => out.push(segment),
        }
    }
    let mut normal = String::with_capacity(path.len());
    for segment in &out {
        normal.push('/');
        normal.push_str(segment);
    }
    if normal.is_empty() {
        normal.push('/');
    }
    if let Some(q) = uri.query() {
        normal.push('?');
        normal.push_str(q);
    }
    let pq = PathAndQuery::try_from(normal).ok()?;
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(pq);
    Uri::from_parts(parts).ok()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dot {
    One,
    Two,
}

fn is_dot_segment(segment: &str) -> bool {
    dot_kind(segment).is_some()
}

/// `.` and `..`, with any of their dots spelled `%2e` or `%2E`.
fn dot_kind(segment: &str) -> Option<Dot> {
    let b = segment.as_bytes();
    let mut dots = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'.' {
            i += 1;
        } else if b[i] == b'%' && b.get(i + 1) == Some(&b'2') && matches!(b.get(i + 2), Some(b'e' | b'E')) {
            i += 3;
        } else {
            return None;
        }
        dots += 1;
    }
    match dots {
        1 => Some(Dot::One),
        2 => Some(Dot::Two),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(input: &str) -> Option<String> {
        let uri: Uri = input.parse().ok()?;
        without_dot_segments(&uri).map(|u| u.to_string())
    }

    #[test]
    fn removes_dot_segments_in_every_spelling() {
        assert_eq!(normal("/raw/x/../../v1/orders/y").as_deref(), Some("/v1/orders/y"));
        assert_eq!(normal("/raw/x/%2e%2e/%2E%2E/v1/orders/y?a=1").as_deref(), Some("/v1/orders/y?a=1"));
        assert_eq!(normal("/raw/x/.%2e/v1").as_deref(), Some("/raw/v1"));
        assert_eq!(normal("/a/./b/.").as_deref(), Some("/a/b/"));
        assert_eq!(normal("/a/b/..").as_deref(), Some("/a/"));
        assert_eq!(normal("/../../etc").as_deref(), Some("/etc"));
        assert_eq!(normal("/..").as_deref(), Some("/"));
        assert_eq!(normal("http://h.example/a/../b").as_deref(), Some("http://h.example/b"));
    }

    #[test]
    fn leaves_other_paths_alone() {
        for path in ["/v1/orders/x", "/a/.b/c..", "/.well-known/x", "/a/...", "/a/%2e%2e%2e", "/a/%2f", "/"] {
            assert_eq!(normal(path), None, "{path}");
        }
    }
}
