//! The error collector of one load: every problem with its YAML path, the
//! line and column the walk recorded for it, and a fix hint; and which names
//! the file defines (so a name whose definition failed to parse is not
//! reported again at every use).

use std::collections::HashSet;

use super::yaml::{Pos, SpanIndex, YamlPath};
use super::ConfigError;

/// Which kind of name a map section defines (for suppressing follow-on errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameKind {
    Region,
    Country,
    Entity,
    Other,
}

/// Error collector with access to node positions.
#[derive(Debug)]
pub struct Ctx<'a> {
    index: &'a SpanIndex,
    /// Problems found so far.
    pub errors: Vec<ConfigError>,
    defined: HashSet<(u8, String)>,
    sections: HashSet<String>,
}

impl<'a> Ctx<'a> {
    /// A collector over `index`.
    pub fn new(index: &'a SpanIndex) -> Self {
        Ctx { index, errors: Vec::new(), defined: HashSet::new(), sections: HashSet::new() }
    }

    /// Records a problem at the value at `path`.
    pub fn at(&mut self, path: &YamlPath, message: String, hint: Option<&str>) {
        let pos = self.index.value_pos(path);
        self.push(path, pos, message, hint);
    }

    /// Records a problem at the key that introduced `path`.
    pub fn at_key(&mut self, path: &YamlPath, message: String, hint: Option<&str>) {
        let pos = self.index.key_pos(path);
        self.push(path, pos, message, hint);
    }

    fn push(&mut self, path: &YamlPath, pos: Pos, message: String, hint: Option<&str>) {
        self.errors.push(ConfigError {
            path: path.to_string(),
            line: pos.line,
            col: pos.col,
            message,
            hint: Some(hint.unwrap_or("see docs/config.md").to_owned()),
        });
    }

    pub(crate) fn defined(&mut self, kind: NameKind, name: &str) {
        self.defined.insert((kind as u8, name.to_owned()));
    }

    /// Records that the file has this top-level section (even if it failed to parse).
    pub(crate) fn section(&mut self, key: &str) {
        self.sections.insert(key.to_owned());
    }

    pub(crate) fn has_section(&self, key: &str) -> bool {
        self.sections.contains(key)
    }

    pub(crate) fn is_defined(&self, kind: NameKind, name: &str) -> bool {
        self.defined.contains(&(kind as u8, name.to_owned()))
    }
}
