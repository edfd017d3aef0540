//! One pass over the YAML events: positions, duplicate and unknown keys, limits.
//!
//! `yaml_serde` keeps its libyaml events private and records no positions for
//! values, so the loader reads the events itself with `saphyr-parser` (pure
//! Rust, exposes a span per event) and builds the [`yaml_serde::Value`] tree
//! that the typed structs are then deserialized from. Doing both in one walk
//! means the tree and the positions can never disagree, duplicate keys are all
//! reported (the first value is kept so the rest of the file is still
//! checked), and unknown keys are reported against the schema below and left
//! out of the tree (so they are reported once, with a "did you mean" hint).
//!
//! Hostile input is bounded: the text is capped at [`MAX_INPUT_BYTES`],
//! nesting at [`MAX_DEPTH`], and the number of nodes and the bytes of their
//! text, aliases expanded included, at [`MAX_NODES`] and
//! [`MAX_EXPANDED_BYTES`] (a "billion laughs" document stops there, as does
//! one repeating a long string); an alias counts its anchor's nesting too.

use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Parser, ScalarStyle, Span, StrInput};
use yaml_serde::{Mapping, Number, Value};

use super::ConfigError;

/// Largest accepted config text.
pub const MAX_INPUT_BYTES: usize = 4 << 20;
/// Deepest accepted nesting of mappings and sequences.
pub const MAX_DEPTH: usize = 64;
/// Most nodes a document may expand to, aliases included.
pub const MAX_NODES: usize = 1_000_000;
/// Most bytes of keys and scalars a document may expand to, aliases included.
pub const MAX_EXPANDED_BYTES: usize = 64 << 20;

/// What a node adds to its document: nodes, bytes of text, and how many
/// levels of mappings and sequences it holds (0 for a scalar).
#[derive(Clone, Copy, Debug, Default)]
struct Size {
    nodes: usize,
    bytes: usize,
    height: usize,
}

impl Size {
    /// A collection's own node, before its children.
    const COLLECTION: Size = Size { nodes: 1, bytes: 0, height: 1 };

    /// A scalar of `bytes` bytes.
    fn scalar(bytes: usize) -> Size {
        Size { nodes: 1, bytes, height: 0 }
    }

    /// This collection with `child` (and `key_bytes` of its key) in it.
    fn hold(&mut self, child: Size, key_bytes: usize) {
        self.nodes = self.nodes.saturating_add(child.nodes);
        self.bytes = self.bytes.saturating_add(child.bytes).saturating_add(key_bytes);
        self.height = self.height.max(child.height + 1);
    }
}

/// One step of a YAML path.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Seg {
    /// A mapping key.
    Key(String),
    /// A sequence index.
    Index(usize),
}

/// A YAML path such as `routes[2].id.formats[1]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct YamlPath(pub Vec<Seg>);

impl YamlPath {
    /// The document root.
    pub fn root() -> Self {
        YamlPath(Vec::new())
    }

    /// This path extended by a key.
    pub fn k(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Key(key.to_owned()));
        p
    }

    /// This path extended by an index.
    pub fn i(&self, index: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Seg::Index(index));
        p
    }
}

impl fmt::Display for YamlPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Index(i) => write!(f, "[{i}]")?,
                Seg::Key(k) if is_plain_key(k) => {
                    if n > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Seg::Key(k) => write!(f, "[{:?}]", k)?,
            }
        }
        Ok(())
    }
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A 1-based position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Pos {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub col: usize,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    key: Option<Pos>,
    value: Pos,
}

/// Where each node of the document is, by YAML path.
#[derive(Debug, Default)]
pub struct SpanIndex {
    map: HashMap<YamlPath, Entry>,
}

impl SpanIndex {
    /// Position of the value at `path`, or of its nearest recorded ancestor
    /// (nodes inside an alias expansion have no position of their own).
    ///
    /// A value that starts on a later line than its key (a block mapping or
    /// list) is reported at its key, the line a reader looks for.
    pub fn value_pos(&self, path: &YamlPath) -> Pos {
        self.lookup(path)
            .map(|e| match e.key {
                Some(k) if k.line < e.value.line => k,
                _ => e.value,
            })
            .unwrap_or(Pos { line: 1, col: 1 })
    }

    /// Position of the key that introduced `path` (falls back like [`Self::value_pos`]).
    pub fn key_pos(&self, path: &YamlPath) -> Pos {
        self.lookup(path).map(|e| e.key.unwrap_or(e.value)).unwrap_or(Pos { line: 1, col: 1 })
    }

    fn lookup(&self, path: &YamlPath) -> Option<&Entry> {
        let mut p = path.clone();
        loop {
            if let Some(e) = self.map.get(&p) {
                return Some(e);
            }
            p.0.pop()?;
        }
    }
}

/// What the walk produced: the tree, the positions and the key problems.
#[derive(Debug)]
pub struct Walked {
    /// The document as a value tree (unknown keys and repeated keys left out).
    pub root: Value,
    /// Positions by path.
    pub index: SpanIndex,
    /// Duplicate keys, unknown keys, unsupported tags.
    pub errors: Vec<ConfigError>,
}

/// The expected shape of a node, for unknown-key detection
/// ([`super::keys::shape`]).
#[derive(Debug)]
pub enum Shape {
    /// Anything (checked later by serde).
    Any,
    /// A mapping with exactly these keys allowed.
    Struct(Vec<(&'static str, Shape)>),
    /// A mapping with free keys whose values have this shape.
    Map(Box<Shape>),
    /// A sequence whose items have this shape.
    Seq(Box<Shape>),
}

/// Walks `text`, checking keys against `shape`. `Err` holds the errors that
/// stopped the walk (syntax error, size or nesting limit); they include any
/// key errors found before it.
pub fn walk(text: &str, shape: &Shape) -> Result<Walked, Vec<ConfigError>> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(vec![err(
            &YamlPath::root(),
            Pos { line: 1, col: 1 },
            format!("config is {} bytes, more than the limit of {MAX_INPUT_BYTES}", text.len()),
            Some("split the table or remove unused entries"),
        )]);
    }
    let mut w = Walker {
        shape,
        parser: Parser::new(StrInput::new(text)),
        anchors: HashMap::new(),
        nodes: 0,
        bytes: 0,
        index: SpanIndex::default(),
        errors: Vec::new(),
    };
    match w.document() {
        Ok(root) => Ok(Walked { root, index: w.index, errors: w.errors }),
        Err(fatal) => {
            w.errors.push(fatal);
            Err(w.errors)
        }
    }
}

fn err(path: &YamlPath, pos: Pos, message: String, hint: Option<&str>) -> ConfigError {
    ConfigError { path: path.to_string(), line: pos.line, col: pos.col, message, hint: hint.map(str::to_owned) }
}

fn pos(span: &Span) -> Pos {
    Pos { line: span.start.line(), col: span.start.col() + 1 }
}

struct Walker<'a> {
    shape: &'a Shape,
    parser: Parser<'a, StrInput<'a>>,
    anchors: HashMap<usize, (Value, Size)>,
    nodes: usize,
    bytes: usize,
    index: SpanIndex,
    errors: Vec<ConfigError>,
}

type Fatal = ConfigError;

impl<'a> Walker<'a> {
    fn next(&mut self) -> Result<(Event<'a>, Span), Fatal> {
        match self.parser.next_event() {
            Some(Ok(ev)) => Ok(ev),
            Some(Err(e)) => {
                let m = e.marker();
                Err(err(
                    &YamlPath::root(),
                    Pos { line: m.line(), col: m.col() + 1 },
                    format!("yaml syntax error: {}", e.info()),
                    Some("check indentation, quoting and that every `key:` has a space after the colon"),
                ))
            }
            None => Err(err(&YamlPath::root(), Pos { line: 1, col: 1 }, "unexpected end of yaml input".into(), None)),
        }
    }

    fn document(&mut self) -> Result<Value, Fatal> {
        let mut root = Value::Null;
        let mut docs = 0usize;
        loop {
            let (ev, span) = self.next()?;
            match ev {
                Event::StreamStart | Event::DocumentEnd | Event::Nothing => {}
                Event::StreamEnd => return Ok(root),
                Event::DocumentStart(_) => {
                    docs += 1;
                    let (ev, span) = self.next()?;
                    if matches!(ev, Event::DocumentEnd) {
                        continue;
                    }
                    let path = YamlPath::root();
                    self.index.map.insert(path.clone(), Entry { key: None, value: pos(&span) });
                    let mut path = path;
                    let value = self.node(ev, span, &mut path, self.shape, 0)?.0;
                    if docs > 1 {
                        return Err(err(
                            &YamlPath::root(),
                            pos(&span),
                            "more than one yaml document in the file".into(),
                            Some("keep one table per file; remove the extra `---`"),
                        ));
                    }
                    root = value;
                }
                _ => {
                    return Err(err(&YamlPath::root(), pos(&span), "unexpected yaml event".into(), None));
                }
            }
        }
    }

    fn count(&mut self, n: Size, span: &Span) -> Result<(), Fatal> {
        self.nodes = self.nodes.saturating_add(n.nodes);
        self.bytes = self.bytes.saturating_add(n.bytes);
        let over = if self.nodes > MAX_NODES {
            format!("{MAX_NODES} nodes")
        } else if self.bytes > MAX_EXPANDED_BYTES {
            format!("{} MiB of text", MAX_EXPANDED_BYTES >> 20)
        } else {
            return Ok(());
        };
        Err(err(
            &YamlPath::root(),
            pos(span),
            format!("document expands to more than {over} (aliases included)"),
            Some("remove deeply repeated aliases"),
        ))
    }

    /// Builds the node that starts with `ev`; returns it and its size.
    fn node(
        &mut self,
        ev: Event<'a>,
        span: Span,
        path: &mut YamlPath,
        shape: &Shape,
        depth: usize,
    ) -> Result<(Value, Size), Fatal> {
        match ev {
            Event::Scalar(text, style, anchor, tag) => {
                let size = Size::scalar(text.len());
                self.count(size, &span)?;
                let force_str = match &tag {
                    None => false,
                    Some(t) if t.handle == "tag:yaml.org,2002:" && t.suffix == "str" => true,
                    Some(t) => {
                        self.errors.push(err(
                            path,
                            pos(&span),
                            format!("yaml tag {t} is not supported"),
                            Some("remove the tag; values are typed by their key"),
                        ));
                        false
                    }
                };
                let value = if force_str || style != ScalarStyle::Plain {
                    Value::String(text.into_owned())
                } else {
                    resolve_plain(&text)
                };
                if anchor > 0 {
                    self.anchors.insert(anchor, (value.clone(), size));
                }
                Ok((value, size))
            }
            Event::Alias(id) => {
                let Some(&(_, size)) = self.anchors.get(&id) else {
                    return Err(err(path, pos(&span), "alias to an unknown anchor".into(), None));
                };
                // Counted before it is copied: the copy is what costs.
                self.count(size, &span)?;
                if size.height > 0 {
                    self.check_depth(depth + size.height - 1, &span, path)?;
                }
                let value = self.anchors.get(&id).map(|(v, _)| v.clone()).unwrap_or(Value::Null);
                Ok((value, size))
            }
            Event::SequenceStart(anchor, tag) => {
                self.check_depth(depth, &span, path)?;
                self.check_tag(tag.is_some(), path, &span);
                self.count(Size::COLLECTION, &span)?;
                let item_shape = match shape {
                    Shape::Seq(inner) => inner,
                    _ => &Shape::Any,
                };
                let mut items = Vec::new();
                let mut total = Size::COLLECTION;
                loop {
                    let (ev, span) = self.next()?;
                    if matches!(ev, Event::SequenceEnd) {
                        break;
                    }
                    path.0.push(Seg::Index(items.len()));
                    self.index.map.insert(path.clone(), Entry { key: None, value: pos(&span) });
                    let (v, n) = self.node(ev, span, path, item_shape, depth + 1)?;
                    path.0.pop();
                    total.hold(n, 0);
                    items.push(v);
                }
                let value = Value::Sequence(items);
                if anchor > 0 {
                    self.anchors.insert(anchor, (value.clone(), total));
                }
                Ok((value, total))
            }
            Event::MappingStart(anchor, tag) => {
                self.check_depth(depth, &span, path)?;
                self.check_tag(tag.is_some(), path, &span);
                self.count(Size::COLLECTION, &span)?;
                let mut map = Mapping::new();
                let mut seen: HashMap<String, Pos> = HashMap::new();
                let mut total = Size::COLLECTION;
                loop {
                    let (kev, kspan) = self.next()?;
                    if matches!(kev, Event::MappingEnd) {
                        break;
                    }
                    let kpos = pos(&kspan);
                    let key = match kev {
                        Event::Scalar(text, ..) => Some(text.into_owned()),
                        other => {
                            self.errors.push(err(
                                path,
                                kpos,
                                "mapping keys must be plain strings".into(),
                                Some("write the key as a plain word"),
                            ));
                            // Consume the complex key so the walk stays in step.
                            self.node(other, kspan, path, &Shape::Any, depth + 1)?;
                            None
                        }
                    };
                    let (vev, vspan) = self.next()?;
                    let Some(key) = key else {
                        self.node(vev, vspan, path, &Shape::Any, depth + 1)?;
                        continue;
                    };
                    let child_path = path.k(&key);
                    let child_shape: Option<&Shape> = match shape {
                        Shape::Struct(fields) => fields.iter().find(|(n, _)| *n == key).map(|(_, s)| s),
                        Shape::Map(inner) => Some(inner),
                        _ => Some(&Shape::Any),
                    };
                    if let Some(first) = seen.get(&key) {
                        self.errors.push(err(
                            &child_path,
                            kpos,
                            format!("duplicate key {} (first defined at line {})", super::show(&key), first.line),
                            Some("remove or merge one of the two entries"),
                        ));
                        self.node(vev, vspan, path, &Shape::Any, depth + 1)?;
                        continue;
                    }
                    seen.insert(key.clone(), kpos);
                    let Some(child_shape) = child_shape else {
                        let hint = unknown_key_hint(&key, shape);
                        self.errors.push(err(
                            &child_path,
                            kpos,
                            format!("unknown key {}", super::show(&key)),
                            Some(&hint),
                        ));
                        self.node(vev, vspan, path, &Shape::Any, depth + 1)?;
                        continue;
                    };
                    self.index.map.insert(child_path, Entry { key: Some(kpos), value: pos(&vspan) });
                    path.0.push(Seg::Key(key.clone()));
                    let (v, n) = self.node(vev, vspan, path, child_shape, depth + 1)?;
                    path.0.pop();
                    // The key's bytes count once here, and again with every alias of the mapping.
                    self.count(Size { nodes: 0, ..Size::scalar(key.len()) }, &kspan)?;
                    total.hold(n, key.len());
                    map.insert(Value::String(key), v);
                }
                let value = Value::Mapping(map);
                if anchor > 0 {
                    self.anchors.insert(anchor, (value.clone(), total));
                }
                Ok((value, total))
            }
            _ => Err(err(path, pos(&span), "unexpected yaml event".into(), None)),
        }
    }

    fn check_depth(&self, depth: usize, span: &Span, path: &YamlPath) -> Result<(), Fatal> {
        if depth >= MAX_DEPTH {
            return Err(err(
                path,
                pos(span),
                format!("nesting deeper than {MAX_DEPTH} levels"),
                Some("the routing table needs at most a few levels of nesting"),
            ));
        }
        Ok(())
    }

    fn check_tag(&mut self, tagged: bool, path: &YamlPath, span: &Span) {
        if tagged {
            self.errors.push(err(
                path,
                pos(span),
                "yaml tags are not supported".into(),
                Some("remove the tag; values are typed by their key"),
            ));
        }
    }
}

fn unknown_key_hint(key: &str, shape: &Shape) -> String {
    if key == "<<" {
        return "merge keys are not supported; repeat the keys or use a plain alias".into();
    }
    let Shape::Struct(fields) = shape else {
        return "remove it".into();
    };
    let best = fields.iter().map(|(n, _)| (edit_distance(key, n), *n)).filter(|(d, n)| *d <= 2.max(n.len() / 3)).min();
    match best {
        Some((_, name)) => format!("did you mean `{name}`?"),
        None => {
            let names: Vec<&str> = fields.iter().map(|(n, _)| *n).collect();
            let mut list = names.join(", ");
            if list.len() > 120 {
                list.truncate(117);
                list.push_str("...");
            }
            format!("allowed keys here: {list}")
        }
    }
}

/// Levenshtein distance on characters (short keys only).
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().take(64).collect();
    let b: Vec<char> = b.chars().take(64).collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

/// YAML 1.2 core-schema resolution of a plain scalar.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => return Value::Number(Number::from(f64::INFINITY)),
        "-.inf" | "-.Inf" | "-.INF" => return Value::Number(Number::from(f64::NEG_INFINITY)),
        ".nan" | ".NaN" | ".NAN" => return Value::Number(Number::from(f64::NAN)),
        _ => {}
    }
    if let Some(hex) = text.strip_prefix("0x") {
        if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            if let Ok(n) = u64::from_str_radix(hex, 16) {
                return Value::Number(Number::from(n));
            }
        }
        return Value::String(text.to_owned());
    }
    if let Some(oct) = text.strip_prefix("0o") {
        if !oct.is_empty() && oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            if let Ok(n) = u64::from_str_radix(oct, 8) {
                return Value::Number(Number::from(n));
            }
        }
        return Value::String(text.to_owned());
    }
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !body.is_empty() && body.bytes().all(|b| b.is_ascii_digit()) {
        if text.starts_with('-') {
            if let Ok(n) = text.parse::<i64>() {
                return Value::Number(Number::from(n));
            }
        } else if let Ok(n) = body.parse::<u64>() {
            return Value::Number(Number::from(n));
        }
        return Value::String(text.to_owned());
    }
    if is_float(body) {
        if let Ok(f) = text.parse::<f64>() {
            return Value::Number(Number::from(f));
        }
    }
    Value::String(text.to_owned())
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?` (sign already stripped).
fn is_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    let int_digits = b.iter().take_while(|c| c.is_ascii_digit()).count();
    i += int_digits;
    let mut frac_digits = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        i += frac_digits;
    }
    if int_digits == 0 && frac_digits == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp = b[i..].iter().take_while(|c| c.is_ascii_digit()).count();
        if exp == 0 {
            return false;
        }
        i += exp;
    }
    i == b.len()
}

#[cfg(test)]
mod tests;
