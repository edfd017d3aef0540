use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::value::RawValue;

use super::*;
use crate::merge::pick;

/// What `serde_json` makes of `text`: its elements, each with the member
/// `id` of an object (`None` for anything else); `None` when it refuses
/// the text as an array.
fn parser(text: &str) -> Option<Vec<(String, Option<Option<String>>)>> {
    let elements: Vec<&RawValue> = serde_json::from_str(text).ok()?;
    let mut out = Vec::new();
    for e in elements {
        let t = e.get();
        let member = if t.starts_with('{') {
            let found = pick::field(t, "id").ok()?;
            Some(found.map(|v| v.get().to_string()))
        } else {
            None
        };
        out.push((t.to_string(), member));
    }
    Some(out)
}

fn scanned(text: &str) -> Option<Vec<(String, Option<Option<String>>)>> {
    let elements = elements(text, "id")?;
    let member = |m| match m {
        Member::NotAnObject => None,
        Member::Absent => Some(None),
        Member::Value(v) => {
            // Plain exactly when a string has no escapes; then its value is
            // the text between its quotes, as the parser reads it.
            let string = v.text.starts_with('"');
            assert_eq!(v.plain, string && !v.text.contains('\\'), "{v:?}");
            if v.plain {
                let read: Result<String, _> = serde_json::from_str(v.text);
                assert_eq!(read.ok().as_deref(), v.text.get(1..v.text.len() - 1), "{v:?}");
            }
            Some(Some(v.text.to_string()))
        }
    };
    Some(elements.into_iter().map(|e| (e.text.to_string(), member(e.member))).collect())
}

#[test]
fn valid_arrays_split_as_the_parser_splits_them() {
    let arrays = [
        "[]",
        " [ ] ",
        "\n[\t]\r\n",
        r#"[{"id":"a","n":1},{"n":2,"id":"b"}]"#,
        r#"[ { "id" : "a" } , { } , {"x":1} ]"#,
        r#"[{"id":"first","id":"last"}]"#,
        r#"[{"x":{"id":"inner","y":[1,{"id":2}]},"id":"outer"}]"#,
        r#"[{"x":"a \"quoted\" } ] , id","id":"after \\"}]"#,
        r#"[{"id":"\u00e9\n\t\/\b\f\r","k":"\uD83D\uDE00"}]"#,
        r#"[{"id":{"a":[1,2,{"b":"}"}]},"z":null}]"#,
        r#"[{"id":[]},{"id":{}},{"id":[[]]},{"id":[{}]}]"#,
        r#"[{"id":-1.5e+3,"z":true},{"id":0},{"id":-0.0},{"id":1E9},{"id":2e-7},{"id":10.25}]"#,
        r#"[{"id":false},{"id":null},{"id":true}]"#,
        r#"[1,"two",3.5,null,true,false,[1,[2,[3]]],"{"]"#,
        r#"[{"id":"ünïcödé ✓","n":"😀"}]"#,
        r#"[{"idx":"a","i":"b"}]"#,
        r#"[{"a":{"i\u0064":1}},{"id":"nested escaped keys are skipped"}]"#,
        r#"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"#,
    ];
    for text in arrays {
        let got = scanned(text);
        assert!(got.is_some(), "not read: {text}");
        assert_eq!(got, parser(text), "{text}");
    }
}

/// Any member name, as written in the answer; one the answer must escape
/// is the parser's. Nesting has no depth limit, as in the parser.
#[test]
fn members_of_any_name_and_any_depth() {
    let member = |text, name| elements(text, name).map(|e| e.iter().map(|e| e.member).collect::<Vec<_>>());
    assert_eq!(member(r#"[{"":1,"a":2}]"#, ""), Some(vec![Member::Value(Raw { text: "1", plain: false })]));
    assert_eq!(
        member(r#"[{"é":"x"},{"e":1}]"#, "é"),
        Some(vec![Member::Value(Raw { text: r#""x""#, plain: true }), Member::Absent])
    );
    assert_eq!(member(r#"[{"a\"b":1}]"#, "a\"b"), None);
    assert_eq!(member(r#"[1,{}]"#, "id"), Some(vec![Member::NotAnObject, Member::Absent]));
    let deep = format!(r#"[{{"id":1,"x":{}{}}}]"#, "[".repeat(500), "]".repeat(500));
    assert_eq!(scanned(&deep).map(|e| e.len()), Some(1));
    assert_eq!(scanned(&deep), parser(&deep), "the parser reads any depth too");
}

#[test]
fn what_is_not_json_is_not_read() {
    let texts = [
        "",
        "[",
        "]",
        "[,]",
        "[1,]",
        "[1 2]",
        "[1,,2]",
        "[}",
        "[{]",
        r#"[{"id"}]"#,
        r#"[{"id":}]"#,
        r#"[{"id":1,}]"#,
        r#"[{"id":1 "n":2}]"#,
        r#"[{id:1}]"#,
        r#"[{"a":[1,]}]"#,
        r#"[{"a":[1}]}]"#,
        r#"[{"a":{"b":1]}]"#,
        r#"[{"a":{"b"}}]"#,
        r#"[{"a":{"b":1,}}]"#,
        "[\"tab\tin a string\"]",
        "[\"new\nline\"]",
        r#"["bad \x escape"]"#,
        r#"["short \u12 escape"]"#,
        r#"["\uzzzz"]"#,
        r#"["unterminated]"#,
        "[01]",
        "[-]",
        "[+1]",
        "[1.]",
        "[.5]",
        "[1e]",
        "[1e+]",
        "[0x10]",
        "[NaN]",
        "[Infinity]",
        "[tru]",
        "[nul]",
        "[True]",
        "[1] x",
        "[1][2]",
        "\u{feff}[1]",
        "[1]\u{a0}",
        "[\u{a0}1]",
    ];
    for text in texts {
        assert_eq!(scanned(text), None, "read: {text:?}");
        assert_eq!(parser(text), None, "the parser reads {text:?}: fix the list");
    }
    // JSON this pass leaves to the parser.
    for text in [r#"{"items":[]}"#, "42", r#""[]""#, r#"[{"i\u0064":"escaped key"}]"#, r#"[{"\"":1}]"#] {
        assert_eq!(scanned(text), None, "read: {text}");
        assert!(serde_json::from_str::<&RawValue>(text).is_ok(), "{text}");
    }
}

/// Random JSON, `depth` levels at most.
fn value(rng: &mut StdRng, depth: u32, out: &mut String) {
    let pick = if depth == 0 { rng.random_range(0..5) } else { rng.random_range(0..7) };
    match pick {
        0 => string(rng, out),
        1 => {
            const NUMBERS: [&str; 10] = ["0", "-1", "12.5", "1e3", "-0.25E-2", "7", "100", "3.0e+1", "-0", "42"];
            out.push_str(NUMBERS[rng.random_range(0..NUMBERS.len())]);
        }
        2 => out.push_str(["true", "false", "null"][rng.random_range(0..3)]),
        3 | 4 => string(rng, out),
        5 => {
            out.push('[');
            for k in 0..rng.random_range(0..4) {
                if k > 0 {
                    out.push(',');
                }
                value(rng, depth - 1, out);
            }
            out.push(']');
        }
        _ => object(rng, depth - 1, out),
    }
}

fn object(rng: &mut StdRng, depth: u32, out: &mut String) {
    out.push('{');
    for k in 0..rng.random_range(0..4) {
        if k > 0 {
            out.push_str([",", " , ", ",\n"][rng.random_range(0..3)]);
        }
        const KEYS: [&str; 5] = [r#""id""#, r#""n""#, r#""idx""#, r#""i\u0064""#, r#""""#];
        out.push_str(KEYS[rng.random_range(0..KEYS.len())]);
        out.push_str([":", " : "][rng.random_range(0..2)]);
        value(rng, depth, out);
    }
    out.push('}');
}

fn string(rng: &mut StdRng, out: &mut String) {
    const PIECES: [&str; 12] = ["a", "id", " ", "\\\"", "\\\\", "\\n", "\\u00e9", "é", "✓", "}", "]", ","];
    out.push('"');
    for _ in 0..rng.random_range(0..5) {
        out.push_str(PIECES[rng.random_range(0..PIECES.len())]);
    }
    out.push('"');
}

/// Arrays of random objects and values, then the same with random edits:
/// whatever the pass reads, the parser reads the same way. Most of the
/// unedited arrays are read (the pass is not a stub that refuses all), and
/// most of the edited ones are refused by both.
#[test]
fn edited_answers_are_read_as_the_parser_reads_them_or_not_at_all() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let (mut read, mut edited_read, mut edited) = (0, 0, 0);
    const EDITS: [&str; 16] = ["{", "}", "[", "]", ",", ":", "\"", "\\", "1", "-", ".", "e", "n", " ", "\u{1}", "é"];
    for round in 0..20_000 {
        let mut text = String::from("[");
        for k in 0..rng.random_range(0..5) {
            if k > 0 {
                text.push(',');
            }
            if rng.random_bool(0.8) {
                object(&mut rng, 3, &mut text);
            } else {
                value(&mut rng, 3, &mut text);
            }
        }
        text.push(']');
        // The one key the generator escapes is the only JSON it writes
        // that the pass leaves to the parser (where it is an element's key).
        let escaped_key = text.contains(r#""i\u0064""#);
        match scanned(&text) {
            Some(got) => {
                assert_eq!(Some(got), parser(&text), "{text}");
                read += 1;
            }
            None => assert!(escaped_key && parser(&text).is_some(), "not read: {text}"),
        }
        // One to three edits: a byte inserted, removed or replaced (on
        // character boundaries, so the text stays a `str`).
        let mut bytes: Vec<char> = text.chars().collect();
        for _ in 0..rng.random_range(1..4) {
            let at = rng.random_range(0..=bytes.len());
            let piece = EDITS[rng.random_range(0..EDITS.len())].chars().next().unwrap_or(' ');
            match rng.random_range(0..3) {
                0 => bytes.insert(at, piece),
                1 if at < bytes.len() => {
                    bytes.remove(at);
                }
                _ if at < bytes.len() => bytes[at] = piece,
                _ => bytes.push(piece),
            }
        }
        let text: String = bytes.into_iter().collect();
        edited += 1;
        if let Some(got) = scanned(&text) {
            assert_eq!(Some(got), parser(&text), "round {round}: read differently: {text}");
            edited_read += 1;
        }
    }
    assert!(read > 5000, "only {read} of 20,000 valid arrays read");
    assert!(edited_read > 500 && edited_read < edited / 2, "{edited_read} of {edited} edited arrays read");
}

/// The eight-bytes-at-a-time stop finder agrees with a plain loop at
/// every start, on bytes with every stop at every position.
#[test]
fn a_string_scan_stops_where_a_byte_loop_stops() {
    let naive = |b: &[u8], i: usize| (i..b.len()).find(|&k| matches!(b[k], b'"' | b'\\' | 0..=0x1f)).unwrap_or(b.len());
    let mut rng = StdRng::seed_from_u64(7);
    const BYTES: [u8; 12] = [b'a', b'"', b'\\', 0x00, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xa0, 0xff, b'0'];
    for _ in 0..20_000 {
        let len = rng.random_range(0..40);
        let b: Vec<u8> = (0..len)
            .map(|_| if rng.random_bool(0.9) { b'x' } else { BYTES[rng.random_range(0..BYTES.len())] })
            .collect();
        for i in 0..=len {
            assert_eq!(plain_run(&b, i), naive(&b, i), "{b:?} from {i}");
        }
    }
}
