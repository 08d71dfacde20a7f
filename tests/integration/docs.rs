//! The documentation, checked: `docs/settings.md` is what the settings table generates and
//! says what the binary's `--help` says; every link between the README and `docs/` (and into
//! the sources) resolves, anchors included; every shell block is either run by
//! `scripts/test.sh` (a `<!-- begin: NAME -->` block it names) or says why not
//! (`<!-- not run: ... -->`); and the README stays a front door.
//!
//! `A2A_WRITE_DOCS=1 cargo test --test integration docs::` writes `docs/settings.md` again.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every Markdown file of docs/.
fn documents() -> Vec<PathBuf> {
    let mut docs = vec![root().join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("a docs/ folder")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn name(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

#[test]
fn settings_md_is_the_settings_table() {
    let path = root().join("docs/settings.md");
    let generated = a2a_worker_controller::settings::settings_markdown();
    if std::env::var("A2A_WRITE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &generated).unwrap();
    }
    assert!(
        read(&path) == generated,
        "docs/settings.md is not what the settings table generates: \
         A2A_WRITE_DOCS=1 cargo test --test integration docs:: writes it"
    );
}

/// `--help`'s entries: (flag, name, help, default), read from the binary's own output.
fn help_entries() -> Vec<(String, String, String, String)> {
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let mut entries = Vec::new();
    for pair in lines.windows(2) {
        let (first, second) = (pair[0], pair[1]);
        let Some(flag_line) = first.strip_prefix("  -") else {
            continue;
        };
        let mut words = flag_line.split_whitespace();
        let (Some(flag), Some(name), None) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if !name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            continue;
        }
        let Some((help, default)) = second.trim().rsplit_once("; default ") else {
            panic!("--help entry of {name} has no default: {second:?}");
        };
        entries.push((flag.into(), name.into(), help.into(), default.into()));
    }
    entries
}

#[test]
fn settings_md_says_what_help_says() {
    let doc = read(&root().join("docs/settings.md"));
    let entries = help_entries();
    assert!(entries.len() > 40, "{} settings in --help", entries.len());
    for (flag, name, help, default) in &entries {
        let row = format!(
            "| `{name}` | `-{flag}` | {} | {} |",
            default.replace('|', "\\|"),
            help.replace('|', "\\|")
        );
        assert!(
            doc.lines().any(|l| l == row),
            "docs/settings.md has no row for {name} as --help shows it:\n{row}"
        );
    }
    let rows = doc.lines().filter(|l| l.starts_with("| `")).count();
    assert_eq!(
        rows,
        entries.len(),
        "settings in docs/settings.md and in --help"
    );
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_code = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        } else if !in_code && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of a document's inline links `[text](target)`, outside code.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        // Inline code spans are not links.
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_string());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn the_slugs_are_githubs() {
    assert_eq!(
        slug(" The local backend (WezTerm tabs)"),
        "the-local-backend-wezterm-tabs"
    );
    assert_eq!(slug(" `check`: what it proves"), "check-what-it-proves");
    assert_eq!(
        links("see [a](docs/x.md#y) and `[b](not)` or [c](https://e.org)"),
        ["docs/x.md#y", "https://e.org"]
    );
}

#[test]
fn every_link_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().unwrap();
        for target in links(&text) {
            if target.starts_with("http://") || target.starts_with("https://") {
                continue;
            }
            checked += 1;
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            if !path.exists() {
                broken.push(format!("{}: {target} (no such file)", name(&doc)));
                continue;
            }
            if let Some(anchor) = anchor {
                let is_md = path.extension().is_some_and(|e| e == "md");
                if !is_md || !anchors(&read(&path)).contains(anchor) {
                    broken.push(format!("{}: {target} (no such heading)", name(&doc)));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked > 30, "only {checked} links checked");
}

#[test]
fn every_shell_block_is_run_or_says_why_not() {
    let test_sh = read(&root().join("scripts/test.sh"));
    let mut unmarked = Vec::new();
    let mut run = 0;
    for doc in documents() {
        let text = read(&doc);
        let lines: Vec<&str> = text.lines().collect();
        let mut in_code = false;
        for (i, line) in lines.iter().enumerate() {
            if !line.trim_start().starts_with("```") {
                continue;
            }
            in_code = !in_code;
            if !in_code || !matches!(line.trim(), "```sh" | "```bash" | "```console") {
                continue;
            }
            // The marker is the nearest non-blank line above the block.
            let marker = lines[..i]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim())
                .unwrap_or("");
            if let Some(block) = marker
                .strip_prefix("<!-- begin: ")
                .and_then(|m| m.strip_suffix(" -->"))
            {
                let named = [format!("doc_block {block}"), format!("against_run {block}")];
                assert!(
                    named.iter().any(|n| test_sh.contains(n.as_str())),
                    "{}:{}: block {block:?} is marked to run, but scripts/test.sh never runs it",
                    name(&doc),
                    i + 1
                );
                run += 1;
            } else if !(marker.starts_with("<!-- not run: ") && marker.ends_with("-->")) {
                unmarked.push(format!("{}:{}", name(&doc), i + 1));
            }
        }
    }
    assert!(
        unmarked.is_empty(),
        "shell blocks neither run by scripts/test.sh (<!-- begin: NAME -->) nor saying why not \
         (<!-- not run: ... -->):\n{}",
        unmarked.join("\n")
    );
    assert!(run >= 6, "only {run} blocks are run");
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 260,
        "README.md has {lines} lines: move detail to docs/"
    );
    for doc in documents().iter().skip(1) {
        let file = doc.file_name().unwrap().to_string_lossy();
        assert!(
            readme.contains(&format!("](docs/{file}")),
            "the README does not link docs/{file}"
        );
    }
}
