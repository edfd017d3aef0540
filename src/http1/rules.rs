//! Header rules made once, when a table loads ([`Rules`]: the lines of one
//! direction of one route), and what they make of one message's fields
//! ([`RuleFields`]): which of the message's own fields are not written and
//! which fields are written after them.
//!
//! A rule line removes every field of its name, sets it (replacing the
//! message's fields of that name and earlier lines' of it) or adds beside
//! them. A value is fixed, or made per message of text and picks: the
//! message's entry of one of the [`Lists`] (the regions', countries' and
//! entities' names, by index) or the value given with the message (its
//! request id). A line whose value has nothing to pick from in a message
//! (a country of an id that has none) does not take effect in it.
//!
//! Per message nothing is allocated or copied: [`RuleFields`] holds the
//! lines (shared), the message's picks and which lines took effect; the
//! head writer asks it whether a field is kept ([`RuleFields::keeps`]) and
//! writes its lines ([`RuleFields::put`]). A message sent as a map gets
//! them from [`RuleFields::apply`]. Per name, the result is that of editing
//! the map in the lines' order.

use std::borrow::Cow;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue};

/// How many lists a value picks from.
pub const PICKS: usize = 3;

/// The most lines one direction of one route may have.
pub const MAX_LINES: usize = 64;

/// The bit of `needs` for the given value.
const GIVEN: u8 = 1 << PICKS;

/// The values a line may pick from, one list per pick, by index; `None`
/// where an entry is no field value.
pub type Lists = [Box<[Option<HeaderValue>]>; PICKS];

/// A piece of a value made per message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// As written.
    Text(String),
    /// The message's entry of list `k`.
    Pick(usize),
    /// The value given with the message.
    Given,
}

/// What a line writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// The same value for every message.
    Fixed(HeaderValue),
    /// Made per message.
    Pieces(Box<[Piece]>),
}

/// One rule line, as the table states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The field's name.
    pub name: HeaderName,
    /// `None`: removed.
    pub value: Option<Value>,
    /// Whether the line replaces the fields of its name (remove, set), or
    /// goes beside them (add).
    pub replaces: bool,
}

/// The lines of one direction of one route, ready for messages.
#[derive(Debug, PartialEq, Eq)]
pub struct Rules {
    lines: Box<[Compiled]>,
    lists: Arc<Lists>,
    /// Bit `n` set: a replacing line's name is `n` bytes long (63: longer),
    /// so that most of a message's fields are kept at a glance.
    replaced_lengths: u64,
    /// What any line's value picks (bit `k`: list `k`; [`GIVEN`]).
    needs: u8,
    /// Every line.
    all: u64,
}

#[derive(Debug, PartialEq, Eq)]
struct Compiled {
    line: Line,
    needs: u8,
    /// The later lines that replace this one's name.
    replaced_by: u64,
}

impl Rules {
    /// `lines`, in order, picking from `lists`; `None` when there are none
    /// or more than [`MAX_LINES`] (the table refuses more).
    pub fn new(lines: Vec<Line>, lists: Arc<Lists>) -> Option<Rules> {
        if lines.is_empty() || lines.len() > MAX_LINES {
            return None;
        }
        let needs_of = |line: &Line| match &line.value {
            Some(Value::Pieces(pieces)) => pieces.iter().fold(0, |n, p| match p {
                Piece::Text(_) => n,
                Piece::Pick(k) => n | (1 << k),
                Piece::Given => n | GIVEN,
            }),
            _ => 0,
        };
        let compiled: Box<[Compiled]> = lines
            .iter()
            .enumerate()
            .map(|(i, line)| Compiled {
                needs: needs_of(line),
                replaced_by: lines
                    .iter()
                    .enumerate()
                    .skip(i + 1)
                    .filter(|(_, later)| later.replaces && later.name == line.name)
                    .fold(0, |bits, (j, _)| bits | (1 << j)),
                line: line.clone(),
            })
            .collect();
        let replaced_lengths = lines.iter().filter(|l| l.replaces).fold(0, |bits, l| bits | length_bit(&l.name));
        let needs = compiled.iter().fold(0, |n, c| n | c.needs);
        let all = u64::MAX >> (64 - compiled.len());
        Some(Rules { lines: compiled, lists, replaced_lengths, needs, all })
    }

    /// Whether a line's value picks from list `k`.
    pub fn picks(&self, k: usize) -> bool {
        k < PICKS && self.needs & (1 << k) != 0
    }
}

fn length_bit(name: &HeaderName) -> u64 {
    1 << name.as_str().len().min(63)
}

/// What a route's rules make of one message's fields. Empty, it is the
/// message's fields as they are.
#[derive(Clone, Debug, Default)]
pub struct RuleFields {
    rules: Option<Arc<Rules>>,
    /// The message's index in each list (`u16::MAX`: none).
    at: [u16; PICKS],
    /// Held only when a value holds it (a box: the common message's
    /// fields stay small, and are moved about with the request).
    given: Option<Box<[u8]>>,
    /// Bit `i`: line `i` takes effect.
    effective: u64,
}

impl RuleFields {
    /// None.
    pub const fn new() -> RuleFields {
        RuleFields { rules: None, at: [u16::MAX; PICKS], given: None, effective: 0 }
    }

    /// `rules` for a message whose entry in list `k` is `at[k]`, given
    /// `given`.
    pub fn of(rules: &Arc<Rules>, at: [Option<usize>; PICKS], given: &HeaderValue) -> RuleFields {
        let mut fields =
            RuleFields { rules: Some(Arc::clone(rules)), at: [u16::MAX; PICKS], given: None, effective: rules.all };
        if rules.needs == 0 {
            return fields;
        }
        let mut has = GIVEN;
        for (k, (list, i)) in rules.lists.iter().zip(at).enumerate() {
            if rules.needs & (1 << k) == 0 {
                continue;
            }
            if let Some(i) = i.filter(|&i| list.get(i).is_some_and(Option::is_some)) {
                // Lists are the table's regions, countries and entities:
                // a u16's range at most.
                fields.at[k] = u16::try_from(i).unwrap_or(u16::MAX);
                has |= 1 << k;
            }
        }
        if rules.needs & GIVEN != 0 {
            fields.given = Some(given.as_bytes().into());
        }
        if rules.needs & !has != 0 {
            fields.effective = rules
                .lines
                .iter()
                .enumerate()
                .filter(|(_, c)| c.needs & !has == 0)
                .fold(0, |bits, (i, _)| bits | (1 << i));
        }
        fields
    }

    /// Whether a message's own field named `name` (as sent) is written.
    #[inline]
    pub fn keeps(&self, name: &[u8]) -> bool {
        match &self.rules {
            Some(rules) if rules.replaced_lengths & (1 << name.len().min(63)) != 0 => !self.replaced(rules, name),
            _ => true,
        }
    }

    fn replaced(&self, rules: &Rules, name: &[u8]) -> bool {
        rules.lines.iter().enumerate().any(|(i, c)| {
            self.effective & (1 << i) != 0
                && c.line.replaces
                && name.eq_ignore_ascii_case(c.line.name.as_str().as_bytes())
        })
    }

    /// The fields written after the message's own, in order.
    pub fn put(&self) -> impl Iterator<Item = (&HeaderName, Cow<'_, [u8]>)> {
        let (lines, effective) = match &self.rules {
            Some(rules) => (&rules.lines[..], self.effective),
            None => (&[][..], 0),
        };
        lines.iter().enumerate().filter_map(move |(i, c)| {
            let written = effective & (1 << i) != 0 && c.replaced_by & effective == 0;
            let value = c.line.value.as_ref().filter(|_| written)?;
            Some((&c.line.name, self.value(value)?))
        })
    }

    fn value<'a>(&'a self, value: &'a Value) -> Option<Cow<'a, [u8]>> {
        match value {
            Value::Fixed(v) => Some(Cow::Borrowed(v.as_bytes())),
            Value::Pieces(pieces) => match &pieces[..] {
                [one] => self.piece(one).map(Cow::Borrowed),
                _ => {
                    let mut text = Vec::new();
                    for p in pieces.iter() {
                        text.extend_from_slice(self.piece(p)?);
                    }
                    Some(Cow::Owned(text))
                }
            },
        }
    }

    fn piece<'a>(&'a self, piece: &'a Piece) -> Option<&'a [u8]> {
        match piece {
            Piece::Text(t) => Some(t.as_bytes()),
            Piece::Given => self.given.as_deref(),
            Piece::Pick(k) => {
                let rules = self.rules.as_ref()?;
                let i = usize::from(*self.at.get(*k)?);
                rules.lists.get(*k)?.get(i)?.as_ref().map(HeaderValue::as_bytes)
            }
        }
    }

    /// Edits `map` as the rules say, for a message sent as a map.
    pub fn apply(&self, map: &mut HeaderMap) {
        let Some(rules) = &self.rules else { return };
        for (i, c) in rules.lines.iter().enumerate() {
            if self.effective & (1 << i) != 0 && c.line.replaces {
                map.remove(&c.line.name);
            }
        }
        for (name, value) in self.put() {
            // Text and names were field values when the table loaded, and
            // so is what is made of them.
            if let Ok(value) = HeaderValue::from_bytes(&value) {
                map.append(name.clone(), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &'static str) -> HeaderName {
        HeaderName::from_static(n)
    }

    fn fixed(v: &'static str) -> Option<Value> {
        Some(Value::Fixed(HeaderValue::from_static(v)))
    }

    fn lists() -> Arc<Lists> {
        let list = |names: &[Option<&'static str>]| names.iter().map(|n| n.map(HeaderValue::from_static)).collect();
        Arc::new([list(&[Some("eu"), Some("us")]), list(&[None, Some("de")]), list(&[Some("orders")])])
    }

    #[test]
    fn lines_take_effect_in_order_and_only_with_their_values() -> Result<(), Box<dyn std::error::Error>> {
        let line = |n, value, replaces| Line { name: name(n), value, replaces };
        let rules = Arc::new(
            Rules::new(
                vec![
                    line("x-b", fixed("added-then-removed"), false),
                    line("x-b", None, true),
                    line("x-a", fixed("set"), true),
                    line("x-a", fixed("and-added"), false),
                    line("x-c", Some(Value::Pieces(Box::new([Piece::Text("c-".into()), Piece::Pick(1)]))), true),
                    line(
                        "x-d",
                        Some(Value::Pieces(Box::new([Piece::Pick(0), Piece::Text("/".into()), Piece::Given]))),
                        false,
                    ),
                ],
                lists(),
            )
            .ok_or("rules")?,
        );
        assert!(rules.picks(0) && rules.picks(1) && !rules.picks(2));
        let id = HeaderValue::from_static("r-1");
        let written = |f: &RuleFields| -> Vec<String> {
            f.put().map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(&v))).collect()
        };
        let all = RuleFields::of(&rules, [Some(1), Some(1), None], &id);
        assert_eq!(written(&all), ["x-a: set", "x-a: and-added", "x-c: c-de", "x-d: us/r-1"]);
        assert!(
            !all.keeps(b"X-B") && !all.keeps(b"x-a") && !all.keeps(b"x-c") && all.keeps(b"x-d") && all.keeps(b"x-e")
        );
        // Country 0 has no name, so x-c does not take effect: the message's is kept.
        let nameless = RuleFields::of(&rules, [None, Some(0), None], &id);
        assert_eq!(written(&nameless), ["x-a: set", "x-a: and-added"]);
        assert!(nameless.keeps(b"x-c"));
        let mut map = HeaderMap::new();
        for (n, v) in [("x-a", "1"), ("x-b", "1"), ("x-c", "1"), ("x-d", "1")] {
            map.append(n, HeaderValue::from_static(v));
        }
        all.apply(&mut map);
        let values = |n: &str| map.get_all(n).iter().map(|v| v.to_str().unwrap_or("?").to_string()).collect::<Vec<_>>();
        assert_eq!(values("x-a"), ["set", "and-added"]);
        assert!(values("x-b").is_empty());
        assert_eq!(values("x-c"), ["c-de"]);
        assert_eq!(values("x-d"), ["1", "us/r-1"]);
        Ok(())
    }

    #[test]
    fn no_rules_keep_everything_and_too_many_lines_are_none() {
        let none = RuleFields::new();
        assert!(none.keeps(b"x-a"));
        assert_eq!(none.put().count(), 0);
        let line = Line { name: name("x-a"), value: None, replaces: true };
        assert!(Rules::new(vec![line.clone(); MAX_LINES + 1], lists()).is_none());
        assert!(Rules::new(vec![line; MAX_LINES], lists()).is_some());
        assert!(Rules::new(Vec::new(), lists()).is_none());
    }
}
