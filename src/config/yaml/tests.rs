//! The event walk: positions, duplicate and unknown keys, scalars, and the limits.

#![allow(clippy::unwrap_used)]

use super::*;

/// Walks `text` against the routing table's schema.
fn walk(text: &str) -> Result<Walked, Vec<ConfigError>> {
    super::walk(text, crate::config::keys::shape())
}

#[test]
fn records_positions_and_paths() {
    let w = walk("version: 1\nregions:\n  eu:\n    upstreams: [\"http://a:1\", \"http://b:2\"]\n").unwrap();
    assert!(w.errors.is_empty());
    let p = YamlPath::root().k("regions").k("eu").k("upstreams").i(1);
    assert_eq!(p.to_string(), "regions.eu.upstreams[1]");
    assert_eq!(w.index.value_pos(&p), Pos { line: 4, col: 31 });
    assert_eq!(w.index.key_pos(&YamlPath::root().k("regions").k("eu")), Pos { line: 3, col: 3 });
}

#[test]
fn reports_every_duplicate_and_unknown_key() {
    let w = walk("version: 1\nversion: 2\nregoins: {}\nregions:\n  eu: { upstreamz: [], peer: x, peer: y }\n").unwrap();
    let msgs: Vec<String> = w.errors.iter().map(|e| format!("{}:{} {}", e.line, e.path, e.message)).collect();
    assert_eq!(msgs.len(), 4, "{msgs:?}");
    assert!(msgs[0].starts_with("2:version duplicate key"));
    assert!(msgs[1].starts_with("3:regoins unknown key"));
    assert_eq!(w.errors[1].hint.as_deref(), Some("did you mean `regions`?"));
    assert!(msgs[2].starts_with("5:regions.eu.upstreamz unknown key"));
    assert!(msgs[3].starts_with("5:regions.eu.peer duplicate key"));
}

#[test]
fn resolves_scalars_like_yaml_1_2() {
    assert_eq!(resolve_plain("16"), Value::Number(Number::from(16u64)));
    assert_eq!(resolve_plain("-3"), Value::Number(Number::from(-3i64)));
    assert_eq!(resolve_plain("0x10"), Value::Number(Number::from(16u64)));
    assert_eq!(resolve_plain("0-7"), Value::String("0-7".into()));
    assert_eq!(resolve_plain("yes"), Value::String("yes".into()));
    assert_eq!(resolve_plain("~"), Value::Null);
    assert_eq!(resolve_plain("1.5"), Value::Number(Number::from(1.5)));
    assert_eq!(resolve_plain("1e3"), Value::Number(Number::from(1e3)));
    assert_eq!(resolve_plain("c110002"), Value::String("c110002".into()));
}

#[test]
fn stops_billion_laughs_and_deep_nesting() {
    let mut doc = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        doc.push_str(&format!("a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"));
    }
    let errs = walk(&doc).unwrap_err();
    assert!(errs.iter().any(|e| e.message.contains("nodes")), "{errs:?}");

    // Flow nesting: the scanner's own recursion limit or ours, either way an error.
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let errs = walk(&deep).unwrap_err();
    assert!(errs.iter().any(|e| e.message.contains("nesting") || e.message.contains("recursion")), "{errs:?}");
    // Block nesting below the scanner's limit: ours.
    let mut block = String::new();
    for depth in 0..100 {
        block.push_str(&"  ".repeat(depth));
        block.push_str("a:\n");
    }
    let errs = walk(&block).unwrap_err();
    assert!(errs.iter().any(|e| e.message.contains("nesting deeper than 64")), "{errs:?}");
}

#[test]
fn stops_a_long_string_repeated_by_aliases_before_copying_it() {
    // 1 MiB, then 100 aliases of it: under the node limit, over the text one.
    let mut doc = format!("s: &s \"{}\"\nl: [", "x".repeat(1 << 20));
    doc.push_str(&vec!["*s"; 100].join(", "));
    doc.push_str("]\n");
    let errs = walk(&doc).unwrap_err();
    assert!(errs.iter().any(|e| e.message.contains("more than 64 MiB of text")), "{errs:?}");
    // 50 aliases of it are within both.
    let fifty = doc.replace(&vec!["*s"; 100].join(", "), &vec!["*s"; 50].join(", "));
    // (Its keys are not the table's: those errors are the only ones.)
    let errs = walk(&fifty).err().unwrap_or_default();
    assert!(errs.iter().all(|e| e.message.starts_with("unknown key")), "{errs:?}");
}

#[test]
fn an_alias_counts_the_nesting_of_its_anchor() {
    // Each anchor nests the one before two levels deeper: 40 of them,
    // about 80 levels, written with none deeper than 3 in the text.
    let mut doc = String::from("a0: &a0 [x]\n");
    for i in 1..40 {
        doc.push_str(&format!("a{i}: &a{i} [[*a{}]]\n", i - 1));
    }
    let errs = walk(&doc).unwrap_err();
    assert!(errs.iter().any(|e| e.message.contains("nesting deeper than 64")), "{errs:?}");
    let shallow: String = doc.lines().take(20).map(|l| format!("{l}\n")).collect();
    let errs = walk(&shallow).err().unwrap_or_default();
    assert!(errs.iter().all(|e| e.message.starts_with("unknown key")), "{errs:?}");
}

#[test]
fn syntax_errors_have_positions() {
    let errs = walk("version: 1\nregions: [a, b\n").unwrap_err();
    assert!(errs[0].message.starts_with("yaml syntax error"));
    assert!(errs[0].line >= 2);
}
