//! The shape of the source tree, checked: no file over 700 lines; in the
//! request path (`src/server`, `src/proxy`, `src/upstream`, `src/http1`,
//! `src/merge`, `src/wire.rs`, `src/cork.rs`) no function over 80 lines and none with more
//! than six parameters (a stage takes the request's context and what else
//! it needs, not a list of loose values); and no import cycle between the
//! crate's top-level modules (the crate doc in `src/lib.rs` is the map of
//! their layers).
//!
//! `cargo test --test integration structure` runs these checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

fn relative(path: &Path) -> String {
    path.strip_prefix(src()).unwrap_or(path).display().to_string()
}

#[test]
fn structure_no_source_file_is_over_700_lines() -> TestResult {
    let mut long = Vec::new();
    for file in rust_files(&src())? {
        let lines = std::fs::read_to_string(&file)?.lines().count();
        if lines > 700 {
            long.push(format!("{}: {lines} lines", relative(&file)));
        }
    }
    assert!(long.is_empty(), "files over 700 lines:\n{}", long.join("\n"));
    Ok(())
}

/// The functions of `text` and their lengths in lines, found by their
/// signature and the closing brace at the signature's indentation
/// (the code is rustfmt-formatted).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let sig = trimmed
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ")
            .trim_start_matches("const ")
            .trim_start_matches("async ");
        let Some(rest) = sig.strip_prefix("fn ") else { continue };
        if trimmed.ends_with(';') {
            continue; // a declaration without a body
        }
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let close = format!("{}}}", " ".repeat(indent));
        let one_line = trimmed.ends_with('}');
        let end = if one_line { Some(0) } else { lines[i..].iter().position(|l| *l == close) };
        if let Some(end) = end {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

/// The request path's source files.
fn request_path() -> std::io::Result<Vec<PathBuf>> {
    let mut files = vec![src().join("wire.rs"), src().join("cork.rs")];
    for dir in ["server", "proxy", "upstream", "http1", "merge"] {
        files.extend(rust_files(&src().join(dir))?);
    }
    Ok(files)
}

#[test]
fn structure_no_function_of_the_request_path_is_over_80_lines() -> TestResult {
    let mut long = Vec::new();
    for file in request_path()? {
        for (name, line, len) in functions(&std::fs::read_to_string(&file)?) {
            if len > 80 {
                long.push(format!("{}:{line}: fn {name}: {len} lines", relative(&file)));
            }
        }
    }
    assert!(long.is_empty(), "functions over 80 lines:\n{}", long.join("\n"));
    Ok(())
}

/// The number of parameters of each function of `text` (`self` counts),
/// with its name and line: the commas at the top level of the parentheses
/// after `fn name` and its generics (`->` is not a closing bracket).
fn parameter_counts(text: &str) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    for (at, _) in text.match_indices("fn ") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &text[at + 3..];
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let Some(open) = rest.find('(') else { continue };
        if name.is_empty() || rest[name.len()..open].trim_start().chars().next().is_some_and(|c| c != '<' && c != '(') {
            continue;
        }
        let (mut depth, mut params, mut any) = (0i32, 0, false);
        let bytes = rest.as_bytes();
        for i in open..bytes.len() {
            match bytes[i] {
                b'(' | b'[' | b'{' | b'<' => depth += 1,
                b'>' if i > 0 && bytes[i - 1] == b'-' => {}
                b')' | b']' | b'}' | b'>' => depth -= 1,
                b',' if depth == 1 => params += 1,
                b if !b.is_ascii_whitespace() && depth == 1 => any = true,
                _ => {}
            }
            if depth == 0 {
                let trailing = rest[open..=i].trim_end_matches(')').trim_end().ends_with(',');
                let count = if !any {
                    0
                } else if trailing {
                    params
                } else {
                    params + 1
                };
                out.push((name, text[..at].lines().count() + 1, count));
                break;
            }
        }
    }
    out
}

#[test]
fn structure_no_function_of_the_request_path_has_more_than_six_parameters() -> TestResult {
    let mut wide = Vec::new();
    for file in request_path()? {
        let text = std::fs::read_to_string(&file)?;
        assert!(!text.contains("too_many_arguments"), "{}: a too_many_arguments allowance", relative(&file));
        for (name, line, count) in parameter_counts(&text) {
            if count > 6 {
                wide.push(format!("{}:{line}: fn {name}: {count} parameters", relative(&file)));
            }
        }
    }
    assert!(wide.is_empty(), "functions with more than six parameters:\n{}", wide.join("\n"));
    Ok(())
}

#[test]
fn structure_parameters_are_counted_as_written() {
    let text = "fn a() {}\nfn b<'t, T>(x: &'t T, f: impl Fn(u8) -> u8,\n    y: [u8; 2],\n) -> u8 {}\n\
                fn c(&self, m: HashMap<K, V>, z: (u8, u8)) {}";
    let counts: Vec<(String, usize)> = parameter_counts(text).into_iter().map(|(n, _, c)| (n, c)).collect();
    assert_eq!(counts, [("a".to_string(), 0), ("b".to_string(), 3), ("c".to_string(), 3)]);
}

/// The top-level module a file belongs to (`proxy` for `src/proxy/forward.rs`).
fn module_of(file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src()).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib" && name != "main").then(|| name.to_string())
}

/// Which top-level modules each one names through `crate::`.
fn module_graph() -> Result<BTreeMap<String, BTreeSet<String>>, Box<dyn std::error::Error>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&src())? {
        let Some(from) = module_of(&file) else { continue };
        // Code only: a doc link to a higher layer is not an import.
        let text: String = std::fs::read_to_string(&file)?
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let uses = graph.entry(from.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let to: String = text[i + 7..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !to.is_empty() && to != from {
                uses.insert(to);
            }
        }
    }
    Ok(graph)
}

/// A cycle in `graph`, if it has one (depth-first search for a back edge).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = path.iter().position(|p| p == node) {
            let mut cycle = path[pos..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn structure_top_level_modules_import_each_other_without_a_cycle() -> TestResult {
    let graph = module_graph()?;
    if let Some(cycle) = find_cycle(&graph) {
        let edges: Vec<String> = graph.iter().map(|(m, to)| format!("{m} -> {to:?}")).collect();
        return Err(format!("import cycle: {}\n{}", cycle.join(" -> "), edges.join("\n")).into());
    }
    // The layers, lowest first, as src/lib.rs draws them.
    let http1 = &graph["http1"];
    assert!(http1.is_empty(), "http1 depends on {http1:?}: the wire format knows nothing of routing");
    let grpc = &graph["grpc"];
    assert!(grpc.is_empty(), "grpc depends on {grpc:?}: reading a message knows nothing of routing");
    Ok(())
}

#[test]
fn structure_the_id_library_links_no_proxy_crate() -> TestResult {
    // `cargo tree -p entity-ids -e normal` shows the same; this reads the
    // manifest so the rule holds without running cargo inside a test.
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/entity-ids/Cargo.toml"))?;
    let deps: Vec<&str> = manifest
        .split("\n[")
        .filter(|section| section.starts_with("dependencies]"))
        .flat_map(|section| section.lines().skip(1))
        .filter_map(|line| line.split('=').next().map(str::trim))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    assert!(deps.contains(&"rand_core"), "the manifest was not read: {deps:?}");
    for banned in ["tokio", "hyper", "http", "serde_json", "shardgate", "yaml_serde", "clap"] {
        assert!(!deps.contains(&banned), "entity-ids depends on {banned}: it must stay a library of its own");
    }
    let sources = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/entity-ids/src"))?;
    for entry in sources {
        let text = std::fs::read_to_string(entry?.path())?;
        assert!(!text.contains("shardgate::"), "entity-ids refers to the proxy crate");
    }
    Ok(())
}

/// Which sibling files each file of one directory module names through
/// `super::` (the parent `mod.rs`, which declares them all, left out).
fn sibling_graph(dir: &Path) -> Result<BTreeMap<String, BTreeSet<String>>, Box<dyn std::error::Error>> {
    let stem = |p: &Path| p.file_stem().and_then(|s| s.to_str()).unwrap_or("").to_string();
    let files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rs") && stem(p) != "mod")
        .collect();
    let names: BTreeSet<String> = files.iter().map(|p| stem(p)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let text: String = std::fs::read_to_string(file)?
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let mut uses = BTreeSet::new();
        for (i, _) in text.match_indices("super::") {
            let rest = &text[i + 7..];
            // `super::{a, b::C}` names several.
            let named: Vec<String> = match rest.strip_prefix('{') {
                Some(list) => list
                    .split('}')
                    .next()
                    .unwrap_or("")
                    .split(',')
                    .map(|n| n.trim().split("::").next().unwrap_or("").to_string())
                    .collect(),
                None => vec![rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()],
            };
            uses.extend(named.into_iter().filter(|n| names.contains(n) && *n != stem(file)));
        }
        graph.insert(stem(file), uses);
    }
    Ok(graph)
}

#[test]
fn structure_the_files_of_each_module_import_each_other_without_a_cycle() -> TestResult {
    let mut checked = 0;
    for entry in std::fs::read_dir(src())? {
        let dir = entry?.path();
        if !dir.is_dir() {
            continue;
        }
        let graph = sibling_graph(&dir)?;
        if let Some(cycle) = find_cycle(&graph) {
            return Err(format!("import cycle in {}: {}", relative(&dir), cycle.join(" -> ")).into());
        }
        checked += graph.len();
    }
    assert!(checked > 20, "only {checked} files looked at");
    Ok(())
}
