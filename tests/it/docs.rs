//! The manual's lists that the code also lists, compared: one fact, kept
//! in one place in the code, and documented as the code has it.

use std::path::Path;

use shardgate::config;
use shardgate::outcome::Outcome;

fn read(doc: &str) -> Result<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(doc);
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The backticked words of `text`, in order.
fn code_words(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

#[test]
fn docs_restart_only_keys_are_documented_as_the_code_lists_them() -> Result<(), String> {
    let doc = read("docs/config.md")?;
    let section = doc.split("## Restart-only keys").nth(1).ok_or("docs/config.md has no restart-only section")?;
    let section = section.split("\n## ").next().unwrap_or("");
    let listed: Vec<&str> =
        section.lines().filter_map(|l| l.strip_prefix("- `").and_then(|l| l.strip_suffix('`'))).collect();
    assert_eq!(listed, config::restart::RESTART_ONLY, "docs/config.md and config::restart::RESTART_ONLY differ");
    Ok(())
}

#[test]
fn docs_request_outcomes_are_documented_as_the_code_lists_them() -> Result<(), String> {
    let operating = read("docs/operating.md")?;
    let paragraph = operating
        .split("\n\n")
        .find(|p| p.starts_with("A request's `outcome` is"))
        .ok_or("docs/operating.md has no paragraph listing the request outcomes")?;
    let listed: Vec<&str> = code_words(paragraph).into_iter().skip(1).collect();
    let code: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(listed, code, "docs/operating.md's outcomes and shardgate::outcome::Outcome differ");
    Ok(())
}

#[test]
fn docs_the_readme_walkthrough_tables_load() -> Result<(), String> {
    let readme = read("README.md")?;
    let blocks: Vec<&str> = readme.split("```yaml\n").skip(1).filter_map(|b| b.split("```").next()).collect();
    let (first, rest) = match blocks.as_slice() {
        [first, rest, ..] => (*first, *rest),
        _ => return Err("README.md has fewer than two yaml blocks (the first table and its step 5)".into()),
    };
    config::load_str(first, "README first.yaml").map_err(|e| e.to_string())?;
    // Step 5: its top-level keys go before `routes:`, its routes after the first table's.
    let top: Vec<&str> = rest.lines().filter(|l| !l.is_empty() && !l.starts_with(' ') && !l.starts_with('#')).collect();
    let routes: Vec<&str> = rest.lines().filter(|l| l.starts_with("  - ")).collect();
    let whole = first.replace("routes:\n", &format!("{}\nroutes:\n", top.join("\n"))) + &routes.join("\n") + "\n";
    let cfg = config::load_str(&whole, "README first.yaml, step 5").map_err(|e| e.to_string())?;
    assert_eq!(cfg.routes.len(), 4, "{whole}");
    Ok(())
}
