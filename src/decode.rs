//! Output of `shardgate decode` (a table a support engineer can paste into a
//! ticket, or one JSON object per input line) and `shardgate mint`.
//!
//! JSON is written by hand: each line is a flat object whose field names and
//! value types are fixed by the codecs, and writing it directly keeps a
//! million-line pipe well above a million ids per second (see README).

use std::io::{self, Write};

use crate::ids::{self, clock::iso8601, Decoded, Field, Format, IdError, Params};

/// What `decode` tries and how it prints.
#[derive(Clone, Debug)]
pub struct DecodeOptions {
    /// Formats to try; empty means every format.
    pub formats: Vec<Format>,
    /// One JSON object per input instead of the human table.
    pub json: bool,
    /// Format parameters (epochs, shard count).
    pub params: Params,
}

/// The outcome of decoding one input against the chosen formats.
#[derive(Debug)]
pub struct Outcome {
    /// Every format that accepted the input, in order.
    pub decoded: Vec<Decoded>,
    /// For every format that rejected it, why.
    pub rejected: Vec<IdError>,
}

impl Outcome {
    /// Whether at least one format accepted the input.
    pub fn is_valid(&self) -> bool {
        !self.decoded.is_empty()
    }
}

/// Decodes `input` with each format in `opts` (all when none are given).
pub fn decode(input: &str, opts: &DecodeOptions) -> Outcome {
    let formats: &[Format] = if opts.formats.is_empty() { &Format::ALL } else { &opts.formats };
    let mut out = Outcome { decoded: Vec::with_capacity(1), rejected: Vec::new() };
    for &f in formats {
        match ids::parse(f, input, &opts.params) {
            Ok(d) => out.decoded.push(d),
            Err(e) => out.rejected.push(e),
        }
    }
    out
}

/// Decodes one input and writes its report. Returns whether it was valid.
pub fn write_report(input: &str, opts: &DecodeOptions, w: &mut impl Write) -> io::Result<bool> {
    let outcome = decode(input, opts);
    if opts.json {
        write_json(input, &outcome, w)?;
    } else {
        write_human(input, &outcome, w)?;
    }
    Ok(outcome.is_valid())
}

fn write_json(input: &str, o: &Outcome, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"{\"input\":")?;
    write_json_str(input, w)?;
    match o.decoded.split_first() {
        Some((first, rest)) => {
            write!(w, ",\"valid\":true,\"format\":\"{}\"", first.format())?;
            write_fields(first, w)?;
            if !rest.is_empty() {
                w.write_all(b",\"also_valid_as\":[")?;
                for (i, d) in rest.iter().enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    write!(w, "{{\"format\":\"{}\"", d.format())?;
                    write_fields(d, w)?;
                    w.write_all(b"}")?;
                }
                w.write_all(b"]")?;
            }
        }
        None => {
            w.write_all(b",\"valid\":false")?;
            if let Some(first) = o.rejected.first() {
                write!(w, ",\"format\":\"{}\",\"reason\":\"{}\"", first.format, first.reason.code())?;
            }
            if o.rejected.len() > 1 {
                w.write_all(b",\"reasons\":{")?;
                for (i, e) in o.rejected.iter().enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    write!(w, "\"{}\":\"{}\"", e.format, e.reason.code())?;
                }
                w.write_all(b"}")?;
            }
        }
    }
    w.write_all(b"}\n")
}

fn write_fields(d: &Decoded, w: &mut impl Write) -> io::Result<()> {
    write!(w, ",\"canonical\":\"{d}\"")?;
    let mut res = Ok(());
    d.for_each_field(&mut |name, value| {
        if res.is_ok() {
            res = write!(w, ",\"{name}\":").and_then(|()| write_json_value(value, w));
        }
    });
    res
}

fn write_json_value(v: Field, w: &mut impl Write) -> io::Result<()> {
    match v {
        Field::Int(n) => w.write_all(itoa::Buffer::new().format(n).as_bytes()),
        Field::Bool(b) => w.write_all(if b { b"true" } else { b"false" }),
        Field::Hex { value, width } => write!(w, "\"{value:0width$x}\"", width = usize::from(width)),
        Field::Str(s) => write!(w, "\"{s}\""),
        Field::TimeMs(ms) => write_iso(ms.saturating_mul(1000), 3, w),
        Field::TimeUs(us) => write_iso(us, 6, w),
    }
}

fn write_iso(us: u64, digits: u8, w: &mut impl Write) -> io::Result<()> {
    match iso8601(us, digits) {
        Some(t) => write!(w, "\"{t}\""),
        None => w.write_all(b"null"),
    }
}

/// Writes `s` as a JSON string (RFC 8259 escaping).
pub fn write_json_str(s: &str, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"\"")?;
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f | 0x7f => {
                w.write_all(&bytes[start..i])?;
                write!(w, "\\u{b:04x}")?;
                start = i + 1;
                continue;
            }
            _ => continue,
        };
        w.write_all(&bytes[start..i])?;
        w.write_all(esc)?;
        start = i + 1;
    }
    w.write_all(&bytes[start..])?;
    w.write_all(b"\"")
}

fn write_human(input: &str, o: &Outcome, w: &mut impl Write) -> io::Result<()> {
    let shown = crate::ids::escape_for_display(input, 80);
    if o.decoded.is_empty() {
        let reasons: Vec<String> = o.rejected.iter().map(|e| format!("{}: {}", e.format, e.reason.code())).collect();
        return writeln!(w, "{shown}: invalid ({})", reasons.join(", "));
    }
    writeln!(w, "{shown}")?;
    for d in &o.decoded {
        writeln!(w, "  format                 {}", d.format())?;
        writeln!(w, "  canonical              {d}")?;
        let mut res = Ok(());
        d.for_each_field(&mut |name, value| {
            if res.is_ok() {
                res = write!(w, "  {name:<22} ").and_then(|()| write_human_value(value, w)).and_then(|()| writeln!(w));
            }
        });
        res?;
    }
    Ok(())
}

fn write_human_value(v: Field, w: &mut impl Write) -> io::Result<()> {
    match v {
        Field::Int(n) => write!(w, "{n}"),
        Field::Bool(b) => write!(w, "{b}"),
        Field::Hex { value, width } => write!(w, "{value:0width$x}", width = usize::from(width)),
        Field::Str(s) => w.write_all(s.as_bytes()),
        Field::TimeMs(ms) => match iso8601(ms.saturating_mul(1000), 3) {
            Some(t) => write!(w, "{t}"),
            None => write!(w, "(after year 9999)"),
        },
        Field::TimeUs(us) => match iso8601(us, 6) {
            Some(t) => write!(w, "{t}"),
            None => write!(w, "(after year 9999)"),
        },
    }
}
