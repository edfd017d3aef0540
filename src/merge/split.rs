//! One pass over a region's answer: the elements of a JSON array, each with
//! the value of the member the merge sorts by, the whole text checked as
//! JSON on the way.
//!
//! ```text
//!  [ {"id":"…","n":1} , {"n":2,"id":"…"} , 42 ]
//!    └── element ───┘   └── element ───┘   └ element (not an object)
//!         └ member "id"          └ member "id"
//! ```
//!
//! Written by hand because a profile of a fan-out found `serde_json`'s split
//! of the array (`Vec<&RawValue>`) and a second walk over every element for
//! its sort member to be nearly half of a fan-out's instructions; here both
//! are one pass. It reads a subset of JSON and says so: an answer it does
//! not read (a key with escapes, text that is not an array, anything that is
//! not JSON) is `None`, and the caller hands it to `serde_json`, whose
//! answer and messages stand. Everything it accepts is JSON (RFC 8259), which
//! a test holds it to against `serde_json` on valid, invalid and mutated
//! answers.

/// One element of the array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Element<'b> {
    /// The element's text, as written.
    pub text: &'b str,
    /// What it holds of the member looked for.
    pub member: Member<'b>,
}

/// What an element holds of the member looked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Member<'b> {
    /// The element is not an object.
    NotAnObject,
    /// An object without the member.
    Absent,
    /// The member's value (the last, when the member repeats).
    Value(Raw<'b>),
}

/// A member's value as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Raw<'b> {
    /// The JSON text.
    pub text: &'b str,
    /// It is a string without escapes: its value is the text between its
    /// quotes, with no second look.
    pub plain: bool,
}

/// The elements of the JSON array `text` with their member `name`; `None`
/// where `text` is not a JSON array or holds what this pass does not read.
pub(super) fn elements<'b>(text: &'b str, name: &str) -> Option<Vec<Element<'b>>> {
    let b = text.as_bytes();
    let mut i = blank(b, 0);
    if *b.get(i)? != b'[' {
        return None;
    }
    let mut out = Vec::with_capacity(32);
    let mut scan = Scan { text, name: name.as_bytes(), stack: Vec::new() };
    i = blank(b, i + 1);
    if *b.get(i)? == b']' {
        return (blank(b, i + 1) == b.len()).then_some(out);
    }
    loop {
        let (end, member) = if *b.get(i)? == b'{' { scan.object(i)? } else { (scan.value(i)?, Member::NotAnObject) };
        out.push(Element { text: text.get(i..end)?, member });
        i = blank(b, end);
        match *b.get(i)? {
            b',' => i = blank(b, i + 1),
            b']' => return (blank(b, i + 1) == b.len()).then_some(out),
            _ => return None,
        }
    }
}

/// The text and what the pass looks for.
struct Scan<'t, 'n> {
    text: &'t str,
    name: &'n [u8],
    /// The open brackets of the value being skipped (`true`: an object).
    stack: Vec<bool>,
}

impl<'t> Scan<'t, '_> {
    /// An element that is an object, opening at `i`: the index just past
    /// it and what it holds of the member.
    fn object(&mut self, i: usize) -> Option<(usize, Member<'t>)> {
        let b = self.text.as_bytes();
        let mut found = Member::Absent;
        let mut j = blank(b, i + 1);
        if *b.get(j)? == b'}' {
            return Some((j + 1, found));
        }
        loop {
            if *b.get(j)? != b'"' {
                return None;
            }
            let (end, escaped) = string_end(b, j)?;
            if escaped {
                return None;
            }
            let key = b.get(j + 1..end)?;
            j = blank(b, end + 1);
            if *b.get(j)? != b':' {
                return None;
            }
            let start = blank(b, j + 1);
            let (stop, plain) = match *b.get(start)? {
                b'{' | b'[' => (self.value(start)?, false),
                b'"' => string_end(b, start).map(|(end, escaped)| (end + 1, !escaped))?,
                _ => (scalar(b, start)?, false),
            };
            if key == self.name {
                // The range lies on ASCII delimiters, so on `str` boundaries.
                found = Member::Value(Raw { text: self.text.get(start..stop)?, plain });
            }
            j = blank(b, stop);
            match *b.get(j)? {
                b',' => j = blank(b, j + 1),
                b'}' => break,
                _ => return None,
            }
        }
        Some((j + 1, found))
    }

    /// The index just past the JSON value starting at `i`, nested to any
    /// depth (without recursion: each open container goes on the stack);
    /// `None` where there is none.
    fn value(&mut self, i: usize) -> Option<usize> {
        let b = self.text.as_bytes();
        self.stack.clear();
        let mut j = i;
        loop {
            // A value starts at `j`.
            match *b.get(j)? {
                open @ (b'{' | b'[') => {
                    let object = open == b'{';
                    let k = blank(b, j + 1);
                    if *b.get(k)? == close(object) {
                        j = k + 1;
                    } else {
                        self.stack.push(object);
                        j = if object { value_of(b, k)? } else { k };
                        continue;
                    }
                }
                _ => j = scalar(b, j)?,
            }
            // A value ended just before `j`: the next entry of the
            // container around it, or the container's end.
            loop {
                let Some(&object) = self.stack.last() else { return Some(j) };
                j = blank(b, j);
                match *b.get(j)? {
                    b',' => {
                        let k = blank(b, j + 1);
                        j = if object { value_of(b, k)? } else { k };
                        break;
                    }
                    c if c == close(object) => {
                        self.stack.pop();
                        j += 1;
                    }
                    _ => return None,
                }
            }
        }
    }
}

/// The closing bracket of an object (`true`) or an array.
fn close(object: bool) -> u8 {
    if object {
        b'}'
    } else {
        b']'
    }
}

/// Where the value of the member whose key starts at `i` starts.
fn value_of(b: &[u8], i: usize) -> Option<usize> {
    if *b.get(i)? != b'"' {
        return None;
    }
    let j = blank(b, string_end(b, i)?.0 + 1);
    (*b.get(j)? == b':').then(|| blank(b, j + 1))
}

/// The index just past the string, `true`, `false`, `null` or number at `i`.
fn scalar(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => string_end(b, i).map(|(e, _)| e + 1),
        b't' => literal(b, i, b"true"),
        b'f' => literal(b, i, b"false"),
        b'n' => literal(b, i, b"null"),
        _ => number(b, i),
    }
}

/// The first index at or after `i` that is not JSON whitespace.
fn blank(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The index of the quote that closes the string opening at `i`, and
/// whether the string has escapes; `None` for a string that is not JSON
/// (a control character, an unknown escape, a `\u` without four hex
/// digits) or has no end. Inlined into each caller: strings are most of
/// an answer's bytes, and most are short, so the call itself weighed.
#[inline(always)]
fn string_end(b: &[u8], i: usize) -> Option<(usize, bool)> {
    let (mut j, mut escaped) = (i + 1, false);
    loop {
        j = plain_run(b, j);
        match *b.get(j)? {
            b'"' => return Some((j, escaped)),
            b'\\' => {
                escaped = true;
                j += match *b.get(j + 1)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => 2,
                    b'u' if b.get(j + 2..j + 6)?.iter().all(u8::is_ascii_hexdigit) => 6,
                    _ => return None,
                };
            }
            _ => return None,
        }
    }
}

/// The index of the first quote, backslash or control character at or
/// after `i` (`b.len()` when there is none): the bytes a string's scan
/// stops at. Eight bytes at a time: each of the three tests sets the high
/// bit of every byte that matches (and, by the subtraction's borrow, maybe
/// of bytes above a match, never below one), so the lowest bit set is the
/// first match. Inlined where strings are scanned, as `string_end` is.
#[inline(always)]
fn plain_run(b: &[u8], mut i: usize) -> usize {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    while let Some(chunk) = b.get(i..i + 8) {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else { break };
        let w = u64::from_le_bytes(bytes);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (w.wrapping_sub(ONES * 0x20) & !w);
        if found & HIGH != 0 {
            return i + (found & HIGH).trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    while b.get(i).is_some_and(|&c| c != b'"' && c != b'\\' && c >= 0x20) {
        i += 1;
    }
    i
}

/// The index just past `word` at `i`.
fn literal(b: &[u8], i: usize, word: &[u8]) -> Option<usize> {
    (b.get(i..i + word.len())? == word).then_some(i + word.len())
}

/// The index just past the JSON number at `i`:
/// `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
fn number(b: &[u8], i: usize) -> Option<usize> {
    let digits = |from: usize| from + b.get(from..).map_or(0, |r| r.iter().take_while(|c| c.is_ascii_digit()).count());
    let mut j = i + usize::from(b.get(i) == Some(&b'-'));
    match *b.get(j)? {
        b'0' => j += 1,
        b'1'..=b'9' => j = digits(j),
        _ => return None,
    }
    if b.get(j) == Some(&b'.') {
        let end = digits(j + 1);
        if end == j + 1 {
            return None;
        }
        j = end;
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let end = digits(j);
        if end == j {
            return None;
        }
        j = end;
    }
    Some(j)
}

#[cfg(test)]
mod tests;
