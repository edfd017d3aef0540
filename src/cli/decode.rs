//! `shardgate decode`: ids from the arguments or standard input, each
//! decoded in every format it is valid in, printed as a table a support
//! engineer can paste into a ticket, or as one JSON object per input line.
//!
//! JSON is written by hand: each line is a flat object whose field names and
//! value types are fixed by the codecs, and writing it directly keeps a
//! million-line pipe well above a million ids per second (see README).

use std::io::{self, BufRead, Write};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;

use super::exit;
use crate::ids::{self, clock::iso8601, Decoded, Field, Format, IdError, Params, SnowflakeLayout, SonyflakeFlavor};

/// Arguments of `decode`.
#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// Only try this format (repeatable). Default: every format, and report each one the id is valid in.
    #[arg(long, short = 'f', value_parser = format_parser(|_| true))]
    pub format: Vec<Format>,
    /// Print one JSON object per input line.
    #[arg(long)]
    pub json: bool,
    /// uniqid: check the shard prefix strictly against this shard count.
    #[arg(long)]
    pub total_shards: Option<u32>,
    /// Snowflake and Instagram: epoch in Unix milliseconds (default: Twitter's / Instagram's).
    #[arg(long)]
    pub epoch: Option<u64>,
    /// Snowflake bit split as DATACENTER,WORKER,SEQUENCE widths (default 5,5,12).
    #[arg(long, value_parser = parse_bit_split)]
    pub snowflake_bits: Option<(u8, u8, u8)>,
    /// Sonyflake flavour: v1 (start 2014-09-01) or v2 (start 2025-01-01).
    #[arg(long, value_parser = ["v1", "v2"], default_value = "v1")]
    pub sonyflake_flavor: String,
    /// Ids to decode. With none, read one id per line from standard input.
    pub ids: Vec<String>,
}

/// A `--format` parser offering the formats `keep` accepts, by their
/// table names, with their titles as help.
pub fn format_parser(keep: fn(Format) -> bool) -> impl TypedValueParser<Value = Format> {
    let names = Format::ALL.into_iter().filter(|&f| keep(f)).map(|f| PossibleValue::new(f.name()).help(f.title()));
    PossibleValuesParser::new(names).try_map(|name: String| Format::from_name(&name).ok_or("unknown format"))
}

fn parse_bit_split(s: &str) -> Result<(u8, u8, u8), String> {
    let parts: Vec<&str> = s.split(',').collect();
    let [d, w, q] = parts.as_slice() else {
        return Err(format!("expected DATACENTER,WORKER,SEQUENCE, got {s:?}"));
    };
    let p =
        |x: &str| -> Result<u8, String> { ids::text_decimal_u8(x).ok_or_else(|| format!("not a bit width: {x:?}")) };
    let layout = (p(d)?, p(w)?, p(q)?);
    if u32::from(layout.0) + u32::from(layout.1) + u32::from(layout.2) >= 63 {
        return Err("the three widths must add up to less than 63".into());
    }
    Ok(layout)
}

/// `shardgate decode`: exit 0 when every id decoded, 1 otherwise.
pub fn run(args: DecodeArgs) -> io::Result<i32> {
    let mut params = Params { uniqid_total_shards: args.total_shards, ..Params::default() };
    if let Some(epoch) = args.epoch {
        params.snowflake.epoch_ms = epoch;
        params.instagram.epoch_ms = epoch;
    }
    if let Some((d, w, q)) = args.snowflake_bits {
        params.snowflake = SnowflakeLayout { datacenter_bits: d, worker_bits: w, sequence_bits: q, ..params.snowflake };
    }
    if args.sonyflake_flavor == "v2" {
        params.sonyflake = SonyflakeFlavor::V2;
    }
    let opts = DecodeOptions { formats: args.format, json: args.json, params };
    let stdout = io::stdout();
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut all_valid = true;
    if args.ids.is_empty() {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::with_capacity(64);
        loop {
            line.clear();
            if input.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            // The line terminator is not part of the id; nothing else is trimmed.
            if line.last() == Some(&b'\n') {
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
            }
            let text = String::from_utf8_lossy(&line);
            all_valid &= write_report(&text, &opts, &mut out)?;
        }
    } else {
        for id in &args.ids {
            all_valid &= write_report(id, &opts, &mut out)?;
        }
    }
    out.flush()?;
    Ok(if all_valid { exit::OK } else { exit::FAILURE })
}

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

// The JSON writer avoids `write!`: the formatting machinery (padding,
// `{:x}` on u128, one adapter call per piece) cost about 11,000 instructions
// per iUID line and held a million-line pipe to ~800,000 ids/s. Writing the
// bytes directly brings it well past a million (benches/decode_throughput.sh).

fn write_json(input: &str, o: &Outcome, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"{\"input\":")?;
    write_json_str(input, w)?;
    match o.decoded.split_first() {
        Some((first, rest)) => {
            w.write_all(b",\"valid\":true,\"format\":\"")?;
            w.write_all(first.format().name().as_bytes())?;
            w.write_all(b"\"")?;
            write_fields(first, w)?;
            if !rest.is_empty() {
                w.write_all(b",\"also_valid_as\":[")?;
                for (i, d) in rest.iter().enumerate() {
                    if i > 0 {
                        w.write_all(b",")?;
                    }
                    w.write_all(b"{\"format\":\"")?;
                    w.write_all(d.format().name().as_bytes())?;
                    w.write_all(b"\"")?;
                    write_fields(d, w)?;
                    w.write_all(b"}")?;
                }
                w.write_all(b"]")?;
            }
        }
        None => {
            w.write_all(b",\"valid\":false")?;
            if let Some(first) = o.rejected.first() {
                w.write_all(b",\"format\":\"")?;
                w.write_all(first.format.name().as_bytes())?;
                w.write_all(b"\",\"reason\":\"")?;
                w.write_all(first.reason.code().as_bytes())?;
                w.write_all(b"\"")?;
            }
            if o.rejected.len() > 1 {
                w.write_all(b",\"reasons\":{")?;
                for (i, e) in o.rejected.iter().enumerate() {
                    w.write_all(if i > 0 { b",\"" } else { b"\"" })?;
                    w.write_all(e.format.name().as_bytes())?;
                    w.write_all(b"\":\"")?;
                    w.write_all(e.reason.code().as_bytes())?;
                    w.write_all(b"\"")?;
                }
                w.write_all(b"}")?;
            }
        }
    }
    w.write_all(b"}\n")
}

fn write_fields(d: &Decoded, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b",\"canonical\":\"")?;
    write_canonical(d, w)?;
    w.write_all(b"\"")?;
    let mut res = Ok(());
    d.for_each_field(&mut |name, value| {
        if res.is_ok() {
            res = write_field(name, value, w);
        }
    });
    res
}

fn write_field(name: &str, value: Field, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b",\"")?;
    w.write_all(name.as_bytes())?;
    w.write_all(b"\":")?;
    write_json_value(value, w)
}

/// The id's canonical text, as its `Display` writes it (checked by a test).
fn write_canonical(d: &Decoded, w: &mut impl Write) -> io::Result<()> {
    match d {
        Decoded::Iuid(id) => write_uuid(id.as_u128(), w),
        Decoded::Locality(id) => write_uuid(id.as_u128(), w),
        Decoded::Uuidv7(id) => write_uuid(id.as_u128(), w),
        Decoded::Snowflake(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Sonyflake(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Instagram(id) => w.write_all(itoa::Buffer::new().format(id.value()).as_bytes()),
        Decoded::Uniqid(_) => write!(w, "{d}"),
    }
}

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";

/// Lowercase `8-4-4-4-12` text of a 128-bit value.
fn write_uuid(v: u128, w: &mut impl Write) -> io::Result<()> {
    let mut out = [b'-'; 36];
    let mut shift = 128;
    for (i, o) in out.iter_mut().enumerate() {
        if !matches!(i, 8 | 13 | 18 | 23) {
            shift -= 4;
            *o = LOWER_HEX[((v >> shift) & 0xf) as usize];
        }
    }
    w.write_all(&out)
}

/// `value` in lowercase hex, zero-padded to `width` digits (more digits when
/// the value needs them, like `{:0width$x}`).
fn write_hex(value: u128, width: u8, w: &mut impl Write) -> io::Result<()> {
    let needed = (128 - value.leading_zeros()).div_ceil(4).max(1) as usize;
    let n = needed.max(usize::from(width)).min(32);
    let mut out = [b'0'; 32];
    for (i, o) in out[32 - n..].iter_mut().rev().enumerate() {
        *o = LOWER_HEX[((value >> (4 * i)) & 0xf) as usize];
    }
    w.write_all(&out[32 - n..])
}

fn write_json_value(v: Field, w: &mut impl Write) -> io::Result<()> {
    match v {
        Field::Int(n) => w.write_all(itoa::Buffer::new().format(n).as_bytes()),
        Field::Bool(b) => w.write_all(if b { b"true" } else { b"false" }),
        Field::Hex { value, width } => {
            w.write_all(b"\"")?;
            write_hex(value, width, w)?;
            w.write_all(b"\"")
        }
        Field::Str(s) => write_json_str(s, w),
        Field::TimeMs(ms) => write_iso(ms.saturating_mul(1000), 3, w),
        Field::TimeUs(us) => write_iso(us, 6, w),
    }
}

fn write_iso(us: u64, digits: u8, w: &mut impl Write) -> io::Result<()> {
    match iso8601(us, digits) {
        Some(t) => {
            let (bytes, len) = t.to_ascii();
            w.write_all(b"\"")?;
            w.write_all(&bytes[..len])?;
            w.write_all(b"\"")
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_canonical_is_the_display_form_for_every_format() -> Result<(), Box<dyn std::error::Error>> {
        let opts = DecodeOptions { formats: Vec::new(), json: true, params: Params::default() };
        for input in [
            "018E4282-D0BF-8007-8C3A-5D2E9B1F0A47",
            "20be0ffc-314a-bd53-7a50-013a65ca76d2",
            "017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
            "36a016b019df3543ab",
            "1050118621198921728",
            "0",
        ] {
            let outcome = decode(input, &opts);
            assert!(outcome.is_valid(), "{input}");
            for d in &outcome.decoded {
                let mut ours = Vec::new();
                write_canonical(d, &mut ours)?;
                assert_eq!(String::from_utf8(ours)?, d.to_string(), "{input} as {}", d.format());
            }
            let mut line = Vec::new();
            write_report(input, &opts, &mut line)?;
            let v: serde_json::Value = serde_json::from_slice(&line)?;
            assert_eq!(v["valid"], serde_json::Value::Bool(true));
        }
        Ok(())
    }

    #[test]
    fn hex_matches_std_formatting() -> Result<(), Box<dyn std::error::Error>> {
        for value in [0u128, 1, 0xf, 0x10, 0xdead_beef, u128::from(u64::MAX), u128::MAX, 1 << 100] {
            for width in [0u8, 1, 4, 7, 8, 14, 16, 17, 32] {
                let mut ours = Vec::new();
                write_hex(value, width, &mut ours)?;
                let std = format!("{value:0width$x}", width = usize::from(width));
                assert_eq!(String::from_utf8(ours)?, std, "{value:#x} width {width}");
            }
        }
        Ok(())
    }
}
