//! `shardgate decode`: ids from the arguments or standard input, each
//! decoded in every format it is valid in, printed as a table a support
//! engineer can paste into a ticket, or as one JSON object per input line.
//!
//! JSON is written by hand: each line is a flat object whose field names and
//! value types are fixed by the codecs, and writing it directly keeps a
//! million-line pipe well above a million ids per second.

use std::io::{self, BufRead, Write};

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::Args;

use super::exit;
use crate::ids::{
    self, clock::iso8601, json, Decoded, Field, Format, IdError, Params, SnowflakeLayout, SonyflakeFlavor,
};

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
    grow_pipe(&stdout);
    let mut out = io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut all_valid = true;
    let mut reporter = Reporter::default();
    if args.ids.is_empty() {
        let stdin = io::stdin();
        let mut input = stdin.lock();
        let mut line = Vec::with_capacity(64);
        // Blank lines not yet answered: one answer per line keeps the output
        // aligned with the input, but blank lines at the end are no ids.
        let mut blanks = 0usize;
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
            if line.is_empty() {
                blanks += 1;
                continue;
            }
            for _ in 0..std::mem::take(&mut blanks) {
                all_valid &= reporter.write("", &opts, &mut out)?;
            }
            // Valid UTF-8 is checked at full speed; only a broken line pays
            // for the replacement characters.
            let text = match std::str::from_utf8(&line) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(&line),
            };
            all_valid &= reporter.write(&text, &opts, &mut out)?;
        }
    } else {
        for id in &args.ids {
            all_valid &= reporter.write(id, &opts, &mut out)?;
        }
    }
    out.flush()?;
    Ok(if all_valid { exit::OK } else { exit::FAILURE })
}

/// When standard output is a pipe, asks for a 1 MiB pipe buffer instead of
/// Linux's 64 KiB: a million-line `decode --json` moves ~440 MB, and with the
/// small buffer the writer blocks and wakes its reader every 64 KiB (the pipe
/// then cost more than the decoding; see `benches/decode_throughput.sh`).
/// Anything else (a file, a terminal, a size above the system's limit) is
/// left as it is: the size is a speed hint, never an error.
fn grow_pipe(stdout: &io::Stdout) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsFd;
        // On anything but a pipe the kernel refuses the size (EBADF).
        let _ = rustix::pipe::fcntl_setpipe_size(stdout.as_fd(), 1 << 20);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = stdout;
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
#[derive(Debug, Default)]
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

/// Decodes `input` with each format in `opts` (all when none are given)
/// into `out`, whose lists are cleared first and keep their room: a
/// million-line pipe then allocates them once, not per line (two or three
/// allocations and a growth, about a tenth of a line's cost).
fn decode_into(input: &str, opts: &DecodeOptions, out: &mut Outcome) {
    out.decoded.clear();
    out.rejected.clear();
    let formats: &[Format] = if opts.formats.is_empty() { &Format::ALL } else { &opts.formats };
    ids::parse_each(formats, input, &opts.params, |result| match result {
        Ok(d) => out.decoded.push(d),
        Err(e) => out.rejected.push(e),
    });
}

/// Writes the reports of one input after another, reusing its outcome's lists.
#[derive(Debug, Default)]
pub struct Reporter {
    outcome: Outcome,
}

impl Reporter {
    /// Decodes one input and writes its report. Returns whether it was valid.
    pub fn write(&mut self, input: &str, opts: &DecodeOptions, w: &mut impl Write) -> io::Result<bool> {
        decode_into(input, opts, &mut self.outcome);
        if opts.json {
            write_json(input, &self.outcome, w)?;
        } else {
            write_human(input, &self.outcome, w)?;
        }
        Ok(self.outcome.is_valid())
    }
}

/// Decodes one input and writes its report. Returns whether it was valid.
pub fn write_report(input: &str, opts: &DecodeOptions, w: &mut impl Write) -> io::Result<bool> {
    Reporter::default().write(input, opts, w)
}

// The JSON writer avoids `write!`: the formatting machinery (padding,
// `{:x}` on u128, one adapter call per piece) held a million-line pipe
// below a million ids per second; writing the bytes directly keeps it well
// above (`benches/decode_throughput.sh`).

fn write_json(input: &str, o: &Outcome, w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"{\"input\":")?;
    json::write_str(input, w)?;
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
    json::write_canonical(d, w)?;
    w.write_all(b"\"")?;
    json::write_field_pairs(d, true, w)
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
    fn json_lines_parse_for_every_format() -> Result<(), Box<dyn std::error::Error>> {
        let opts = DecodeOptions { formats: Vec::new(), json: true, params: Params::default() };
        for input in ["018E4282-D0BF-8007-8C3A-5D2E9B1F0A47", "36a016b019df3543ab", "1050118621198921728", "x"] {
            let mut line = Vec::new();
            write_report(input, &opts, &mut line)?;
            let v: serde_json::Value = serde_json::from_slice(&line)?;
            assert_eq!(v["valid"], serde_json::Value::Bool(input != "x"), "{input}");
        }
        Ok(())
    }
}
