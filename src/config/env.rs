//! `${VAR}` and `${VAR:-default}` in the table, expanded from the process
//! environment before the text is parsed, so any value (or key) can come
//! from the deployment. `$${` is a literal `${`. A variable that is unset
//! (or empty, for `:-`) takes its default; one unset without a default is
//! an error at its line and column, as is a value holding a line break
//! (it would move every line after it). Everything after a variable on its
//! line is reported at the columns of the expanded text.

use std::borrow::Cow;

use super::ConfigError;

/// The text with every variable in place, and the names read, in order.
#[derive(Debug)]
pub struct Expanded<'t> {
    /// The text to parse.
    pub text: Cow<'t, str>,
    /// The variables it read (each once, in the order first read).
    pub read: Vec<String>,
}

/// Expands `text` with `lookup` (the environment, in the proxy).
pub fn expand<'t>(text: &'t str, lookup: impl Fn(&str) -> Option<String>) -> Result<Expanded<'t>, Vec<ConfigError>> {
    if !text.contains("${") {
        return Ok(Expanded { text: Cow::Borrowed(text), read: Vec::new() });
    }
    let mut out = String::with_capacity(text.len());
    let (mut read, mut errors) = (Vec::new(), Vec::new());
    let mut rest = text;
    while let Some(at) = rest.find("${") {
        let offset = text.len() - rest.len() + at;
        if at > 0 && rest.as_bytes()[at - 1] == b'$' {
            out.push_str(&rest[..at - 1]);
            out.push_str("${");
            rest = &rest[at + 2..];
            continue;
        }
        out.push_str(&rest[..at]);
        // A variable stands within its line: a `}` on a later one closes nothing.
        let line = rest[at..].find(['\n', '\r']).map_or(&rest[at..], |n| &rest[at..at + n]);
        let Some(end) = line.find('}') else {
            errors.push(error(
                text,
                offset,
                "a `${` is not closed on its line".into(),
                "write ${NAME} or ${NAME:-default}",
            ));
            rest = &rest[at + line.len()..];
            continue;
        };
        let inner = &rest[at + 2..at + end];
        rest = &rest[at + end + 1..];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        if !is_name(name) {
            let m = format!("`${{{inner}}}` does not name a variable");
            errors.push(error(text, offset, m, "names are letters, digits and `_`, not starting with a digit"));
            continue;
        }
        if !read.iter().any(|r| r == name) {
            read.push(name.to_string());
        }
        let value = match (lookup(name), default) {
            (Some(v), Some(d)) if v.is_empty() => d.to_string(),
            (Some(v), _) => v,
            (None, Some(d)) => d.to_string(),
            (None, None) => {
                let m = format!("environment variable {name} is not set");
                errors.push(error(text, offset, m, "set it, or give a default: ${NAME:-default}"));
                continue;
            }
        };
        if value.contains(['\n', '\r']) {
            let m = format!("environment variable {name} holds a line break");
            errors.push(error(text, offset, m, "a variable stands for part of one line"));
            continue;
        }
        out.push_str(&value);
    }
    out.push_str(rest);
    if errors.is_empty() {
        Ok(Expanded { text: Cow::Owned(out), read })
    } else {
        Err(errors)
    }
}

fn is_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An error at byte `offset` of `text`, with its 1-based line and column.
fn error(text: &str, offset: usize, message: String, hint: &str) -> ConfigError {
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    ConfigError { path: String::new(), line, col, message, hint: Some(hint.to_string()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "EU" => Some("http://10.0.0.1:80".into()),
            "EMPTY" => Some(String::new()),
            "BROKEN" => Some("a\nb".into()),
            _ => None,
        }
    }

    #[test]
    fn variables_are_expanded_with_defaults_and_escapes() -> Result<(), String> {
        let x = expand("a: ${EU}\nb: ${NOPE:-x}\nc: ${EMPTY:-d}\nd: $${EU}\ne: ${EU}", env)
            .map_err(|e| format!("{e:?}"))?;
        assert_eq!(x.text, "a: http://10.0.0.1:80\nb: x\nc: d\nd: ${EU}\ne: http://10.0.0.1:80");
        assert_eq!(x.read, ["EU", "NOPE", "EMPTY"]);
        assert!(matches!(expand("no variables", env).map(|x| x.text), Ok(Cow::Borrowed(_))));
        Ok(())
    }

    #[test]
    fn errors_are_located() {
        let text = "a: 1\nb: x ${NOPE}\nc: ${1X}\nd: ${BROKEN}\ne: [\"${EU\"]\nf: { a: ${NOPE2} }\ng: ${EU";
        let errors = expand(text, env).err().unwrap_or_default();
        let at: Vec<(usize, usize, &str)> = errors.iter().map(|e| (e.line, e.col, e.message.as_str())).collect();
        assert_eq!(
            at,
            [
                (2, 6, "environment variable NOPE is not set"),
                (3, 4, "`${1X}` does not name a variable"),
                (4, 4, "environment variable BROKEN holds a line break"),
                (5, 6, "a `${` is not closed on its line"),
                (6, 9, "environment variable NOPE2 is not set"),
                (7, 4, "a `${` is not closed on its line"),
            ]
        );
    }
}
