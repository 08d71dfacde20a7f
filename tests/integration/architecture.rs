//! The architecture, checked mechanically from the sources: every module sits in a layer,
//! no module imports one from a higher layer, the module graph has no cycle, and nothing
//! outside `backend/` names a backend except the composition root (`lib.rs`, and `testing.rs`
//! beside it).
//!
//! A folder's `mod.rs` may re-export its own children (`pub use server::Server`): that is its
//! table of contents, not a dependency, so such edges do not count as cycles. Every other
//! import does, parent to child included.
//!
//! A new module fails this test until it is given a layer below: that is deliberate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers, outermost last; a module may use its own layer and those before it.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaf utilities",
        &[
            "time",
            "token",
            "hash",
            "json",
            "metrics",
            "sentry",
            "malloc",
            "pem",
            "secret_file",
            "base64",
            "fork",
            // A seam of its own, which whatever lists replicas implements (k8s does).
            "replicas::discovery",
        ],
    ),
    (
        "wire types, HTTP, settings",
        &[
            "http",
            "http::wire",
            "http::server",
            "http::conn",
            "ui",
            "a2a::types",
            "settings",
            "settings::types",
            "settings::raw",
            "settings::auth",
            "settings::specs",
            "settings::table",
            "settings::table::controller",
            "settings::table::workers",
            "settings::table::backends",
            "settings::table::egress",
            "settings::help",
            "settings::values",
            "settings::backends",
            "settings::error",
            "settings::template",
            "settings::entry",
            "settings::templates",
            "settings::watched",
            "settings::egress",
        ],
    ),
    (
        "backend seam, its abilities and backends",
        &[
            "backend",
            "backend::validation",
            "backend::changes",
            "backend::workspaces",
            "backend::copies",
            "backend::pools",
            "backend::renewal",
            "backend::suspension",
            "backend::lease",
            "backend::fake",
            "backend::probe",
            "backend::labels",
            "backend::worker_env",
            "backend::api_call",
            "backend::tail",
            "backend::members",
            "backend::docker",
            "backend::docker::engine",
            "backend::docker::wire",
            "backend::docker::create",
            "backend::docker::status",
            "backend::docker::unix_socket",
            "backend::docker::workspace",
            "backend::docker::copy",
            "backend::docker::pool",
            "backend::docker::ended",
            "backend::docker::check",
            "backend::docker::watcher",
            "backend::docker::fence",
            "backend::docker::lifetime",
            "backend::k8s",
            "backend::k8s::config",
            "backend::k8s::api",
            "backend::k8s::create",
            "backend::k8s::pod",
            "backend::k8s::status",
            "backend::k8s::watch",
            "backend::k8s::check",
            "backend::k8s::refusals",
            "backend::k8s::workspace",
            "backend::k8s::copy",
            "backend::k8s::copy_by_job",
            "backend::k8s::copy_job",
            "backend::k8s::pool",
            "backend::k8s::claim",
            "backend::k8s::replicas",
            "backend::k8s::fence",
            "backend::k8s::lifetime",
            "backend::k8s::suspend",
            "backend::local",
            "backend::local::store",
            "backend::local::create",
            "backend::local::status",
            "backend::local::command",
            "backend::local::task",
            "backend::local::gui",
            "backend::local::wezterm",
            "backend::local::workspaces",
            "backend::local::check",
            "backend::local::lifetime",
        ],
    ),
    (
        "control operations",
        &[
            "control::error",
            "control::request",
            "control::caller",
            "control::templates",
            "control::fork",
            "control::pool",
            "control::pool::plan",
            "control::pool::key",
            "control::pool::demand",
            "control::watch",
            "control::watch::follow",
            "control",
            "control::create",
            "control::lifetime",
            "control::reaper",
            "control::egress",
        ],
    ),
    (
        "push notifications (webhook delivery)",
        &["push", "push::guard", "push::deliver"],
    ),
    (
        "replicas (task ids naming their replica, the relay to it)",
        &["replicas", "replicas::relay"],
    ),
    (
        "A2A service and authentication",
        &[
            "a2a::decode",
            "a2a::updates",
            "a2a::tasks",
            "a2a::card",
            "a2a::stream",
            "a2a::service::record",
            "a2a::service",
            "a2a::service::background",
            "a2a::service::watching",
            "a2a::service::queries",
            "a2a::service::push_configs",
            "a2a::service::everywhere",
            "auth",
            "auth::callers",
            "auth::jwt",
            "auth::oidc",
            "auth::limits",
            "auth::turns",
        ],
    ),
    (
        "A2A bindings (they only translate)",
        &["a2a", "a2a::jsonrpc", "a2a::rest"],
    ),
    (
        "the MCP front door (tools and resources over the control operations)",
        &[
            "mcp::wire",
            "mcp::exchange",
            "mcp::session",
            "mcp::tools",
            "mcp::era",
            "mcp::resources",
            "mcp::listen",
            "mcp::call",
            "mcp",
        ],
    ),
    ("routes", &["routes", "routes::bindings", "routes::mcp"]),
    (
        "the egress proxy (its own process: `a2a-worker-controller egress`)",
        &[
            "egress",
            "egress::who",
            "egress::tunnel",
            "egress::forward",
            "egress::chunked",
        ],
    ),
    (
        "composition root and the command line",
        &[
            "crate",
            "testing",
            "main",
            "process",
            "cli",
            "cli::flags",
            "cli::request",
            "cli::check",
            "cli::client",
            "cli::output",
        ],
    ),
];

/// The backend implementations: only `backend/` itself and the root may name them.
const BACKENDS: &[&str] = &["backend::docker", "backend::k8s", "backend::local"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// `src/backend/docker/mod.rs` → `backend::docker`; `src/lib.rs` → `crate`.
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).ok()?;
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts.first().map(String::as_str) == Some("bin") {
        return None; // binaries use the library from outside, through its public surface
    }
    Some(match parts.as_slice() {
        [one] if one == "lib" => "crate".into(),
        [one] => one.clone(),
        [dirs @ .., last] if last == "mod" => dirs.join("::"),
        all => all.join("::"),
    })
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `a::{b, c::{d, e}}` → `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or("").trim();
        return vec![path.trim_end_matches("::*").to_string()];
    };
    let prefix = tree[..open].trim().trim_end_matches("::");
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&inner[start..]);
    items
        .into_iter()
        .filter(|i| !i.trim().is_empty())
        .flat_map(expand)
        .map(|rest| match rest.as_str() {
            "self" => prefix.to_string(),
            _ if prefix.is_empty() => rest,
            _ => format!("{prefix}::{rest}"),
        })
        .collect()
}

/// The paths a file refers to: its `use` trees and inline `crate::` paths, without comments
/// and without its `#[cfg(test)]` tail; each with whether it is a `pub use` re-export.
fn references(text: &str) -> Vec<(String, bool)> {
    let code: String = text
        .lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut refs = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("use ") {
        let before = &rest[..at];
        let at_statement = before.is_empty()
            || before.ends_with('\n')
            || before.ends_with(' ')
            || before.ends_with(')');
        rest = &rest[at + 4..];
        let line_start = before.rsplit('\n').next().unwrap_or("").trim();
        if !at_statement || !matches!(line_start, "" | "pub" | "pub(crate)" | "pub(super)") {
            continue;
        }
        let reexport = line_start.starts_with("pub");
        if let Some(end) = rest.find(';') {
            refs.extend(expand(&rest[..end]).into_iter().map(|p| (p, reexport)));
            rest = &rest[end + 1..];
        }
    }
    for anchor in ["crate::", "super::"] {
        // Positions in the whole text, so that the second `super::` of `super::super::x` is
        // seen as the middle of a path, not the start of one.
        let mut from = 0;
        while let Some(found) = code[from..].find(anchor) {
            let at = from + found;
            let whole_word =
                !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if whole_word {
                refs.push((path.trim_end_matches(':').to_string(), false));
            }
            from = at + anchor.len();
        }
    }
    refs
}

/// The module a path names, from inside `module`; `None` for other crates.
fn resolve(module: &str, path: &str, known: &BTreeSet<String>) -> Option<String> {
    let segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let here: Vec<&str> = if module == "crate" {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let absolute: Vec<&str> = match segments.first().copied()? {
        "crate" => segments[1..].to_vec(),
        "self" => here
            .iter()
            .copied()
            .chain(segments[1..].iter().copied())
            .collect(),
        "super" => {
            let mut base = here.clone();
            let mut s = &segments[..];
            while s.first() == Some(&"super") {
                base.pop();
                s = &s[1..];
            }
            base.into_iter().chain(s.iter().copied()).collect()
        }
        first => {
            // A child module named without `self::` (2018 uniform paths).
            let child = if module == "crate" {
                first.to_string()
            } else {
                format!("{module}::{first}")
            };
            if !known.contains(&child) {
                return None;
            }
            here.iter()
                .copied()
                .chain(segments.iter().copied())
                .collect()
        }
    };
    (0..=absolute.len())
        .rev()
        .map(|n| {
            if n == 0 {
                "crate".to_string()
            } else {
                absolute[..n].join("::")
            }
        })
        .find(|m| known.contains(m))
}

/// Every import edge, re-exports included.
fn module_graph() -> BTreeMap<String, BTreeSet<String>> {
    edges(true)
}

/// The dependency edges: without a folder's re-exports of its own children.
fn dependency_graph() -> BTreeMap<String, BTreeSet<String>> {
    edges(false)
}

fn is_descendant(module: &str, of: &str) -> bool {
    of == "crate" || module.starts_with(&format!("{of}::"))
}

fn edges(with_reexports: bool) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let modules: Vec<(String, PathBuf)> = files
        .into_iter()
        .filter_map(|f| Some((module_of(&f)?, f)))
        .collect();
    let known: BTreeSet<String> = modules.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = BTreeMap::new();
    for (module, file) in &modules {
        let text = std::fs::read_to_string(file).unwrap();
        let targets: BTreeSet<String> = references(&text)
            .iter()
            .filter_map(|(p, reexport)| {
                let to = resolve(module, p, &known)?;
                let facade = *reexport && is_descendant(&to, module);
                (with_reexports || !facade).then_some(to)
            })
            .filter(|t| t != module)
            .collect();
        graph.insert(module.clone(), targets);
    }
    graph
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

#[test]
fn the_scanner_reads_use_trees_and_paths() {
    assert_eq!(
        expand("super::{a, b::{C, D as E}, self}"),
        ["super::a", "super::b::C", "super::b::D", "super"]
    );
    let known: BTreeSet<String> = ["crate", "backend", "backend::docker", "a2a", "a2a::decode"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        resolve("backend::docker", "super::Backend", &known).as_deref(),
        Some("backend")
    );
    assert_eq!(
        resolve("a2a", "decode::ServiceParams", &known).as_deref(),
        Some("a2a::decode")
    );
    assert_eq!(
        resolve("crate", "crate::backend::docker::DockerBackend", &known).as_deref(),
        Some("backend::docker")
    );
    assert_eq!(resolve("a2a", "std::fmt", &known), None);
    let refs = references(
        "// use crate::nope;\npub use self::x::Y;\nfn f() { crate::a2a::thing(); }\n#[cfg(test)]\nuse crate::z;\n",
    );
    assert_eq!(
        refs,
        [
            ("self::x::Y".to_string(), true),
            ("crate::a2a::thing".to_string(), false)
        ]
    );
    let inline = references("fn g() { super::wire::encode(); }\n");
    assert_eq!(inline, [("super::wire::encode".to_string(), false)]);
    // The second `super::` of a path is its middle, not a path of its own.
    let nested = references("fn h() { super::super::stream::open(); }\n");
    assert_eq!(nested, [("super::super::stream::open".to_string(), false)]);
}

#[test]
fn every_module_has_a_layer_and_imports_only_downward() {
    let graph = module_graph();
    let unplaced: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unplaced.is_empty(),
        "modules without a layer (add them to LAYERS in tests/integration/architecture.rs): {unplaced:?}"
    );
    let mut upward = Vec::new();
    for (from, targets) in &graph {
        for to in targets {
            if layer_of(to) > layer_of(from) {
                upward.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports from a lower layer up: {upward:?}"
    );
    // Sanity: the scan sees the edges that must exist.
    assert!(graph["routes"].contains("a2a") && graph["control"].contains("backend"));
    assert!(graph["backend::docker"].contains("backend::probe"));
}

#[test]
fn the_module_graph_has_no_cycle() {
    let graph = dependency_graph();
    // Depth-first search with colours; a grey node reached again closes a cycle.
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            match state.get(next.as_str()).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(next, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node.as_str()).copied().unwrap_or(0) == 0 {
            let cycle = visit(node, &graph, &mut state, &mut Vec::new());
            assert!(
                cycle.is_none(),
                "import cycle: {}",
                cycle.unwrap().join(" -> ")
            );
        }
    }
}

#[test]
fn nothing_above_the_seam_names_a_backend() {
    let graph = module_graph();
    let mut named = Vec::new();
    for (from, targets) in &graph {
        // The composition root builds backends; `testing` (its part for tests) exposes them.
        let inside = matches!(from.as_str(), "crate" | "testing" | "backend")
            || from.starts_with("backend::");
        for to in targets {
            let names_backend = BACKENDS
                .iter()
                .any(|b| to == b || to.starts_with(&format!("{b}::")));
            if names_backend && !inside {
                named.push(format!("{from} -> {to}"));
            }
        }
    }
    assert!(named.is_empty(), "backends named above the seam: {named:?}");
    // The seam itself imports no implementation (the old backend -> docker -> backend cycle).
    assert!(
        graph["backend"]
            .iter()
            .all(|t| !BACKENDS.contains(&t.as_str())),
        "{:?}",
        graph["backend"]
    );
}

/// The abilities a backend may have, each a small trait beside the seam.
const ABILITIES: &[&str] = &[
    "backend::validation",
    "backend::changes",
    "backend::workspaces",
    "backend::pools",
];

#[test]
fn the_abilities_beside_the_seam_name_no_backend_and_nothing_uses_the_fake() {
    let graph = module_graph();
    for ability in ABILITIES {
        let named: Vec<&String> = graph[*ability]
            .iter()
            .filter(|t| {
                BACKENDS
                    .iter()
                    .any(|b| t == b || t.starts_with(&format!("{b}::")))
            })
            .collect();
        assert!(named.is_empty(), "{ability} names a backend: {named:?}");
    }
    // The seam re-exports each ability: one door to everything a backend may do.
    for ability in ABILITIES {
        assert!(
            graph["backend"].contains(*ability),
            "backend/mod.rs does not re-export {ability}"
        );
    }
    let users: Vec<&String> = graph
        .iter()
        .filter(|(from, targets)| *from != "backend" && targets.contains("backend::fake"))
        .map(|(from, _)| from)
        .collect();
    assert!(
        users.is_empty(),
        "the test double is for tests only, yet these modules use it: {users:?}"
    );
}

#[test]
fn the_backend_trait_stays_small() {
    let text = std::fs::read_to_string(src().join("backend/mod.rs")).unwrap();
    let start = text
        .find("pub trait Backend: Send + Sync {")
        .expect("the seam's trait");
    let body = &text[start..];
    let body = &body[..body.find("\n}\n").expect("its end")];
    let methods: Vec<&str> = body
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("fn "))
        .collect();
    assert!(
        methods.len() <= 12,
        "Backend has {} methods; a new ability is a trait of its own beside the seam (backend/changes.rs, workspaces.rs, pools.rs show how): {methods:?}",
        methods.len()
    );
    assert!(methods.len() >= 7, "the scan found the trait: {methods:?}");
}

/// The files the layout map in docs/development.md names, as paths below `src/`: a line that
/// starts with `src/DIR/` names the `.rs` files after it (and on its continuation lines) in
/// that folder; a path that starts with `src/` is one file itself; bare names on a line whose
/// first path is a file (`src/main.rs, lib.rs`) are beside it. After `sub/` in a folder's
/// lines, a name is in `sub/` when such a file exists there, else in the folder.
fn files_in_the_layout_map() -> BTreeSet<String> {
    let doc = std::fs::read_to_string(src().join("../docs/development.md")).unwrap();
    let start = doc
        .find("## Architecture")
        .expect("the Architecture section");
    let block = &doc[start..];
    let open = block.find("```text\n").expect("its map") + "```text\n".len();
    let map = &block[open..open + block[open..].find("```").expect("the map's end")];
    let mut named = BTreeSet::new();
    let (mut dir, mut sub) = (String::new(), String::new());
    for line in map.lines() {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || ",;:()".contains(c))
            .filter(|w| !w.is_empty())
            .collect();
        if let Some(first) = words.first().filter(|w| w.starts_with("src/")) {
            let first = first.trim_start_matches("src/");
            dir = match first.rfind('/') {
                Some(end) => first[..=end].to_string(),
                None => String::new(),
            };
            sub.clear();
            if first.ends_with(".rs") {
                named.insert(first.to_string());
            }
        }
        for w in words.iter().filter(|w| !w.starts_with("src/")) {
            if w.ends_with('/')
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '/')
            {
                sub = w.to_string();
            } else if w.ends_with(".rs")
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
            {
                let in_sub = format!("{dir}{sub}{w}");
                let here = format!("{dir}{w}");
                named.insert(if !sub.is_empty() && src().join(&in_sub).exists() {
                    in_sub
                } else {
                    here
                });
            }
        }
    }
    named
}

#[test]
fn the_layout_map_in_the_docs_names_every_file_and_only_real_ones() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let tree: BTreeSet<String> = files
        .iter()
        .map(|p| {
            p.strip_prefix(src())
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let map = files_in_the_layout_map();
    let unnamed: Vec<&String> = tree.difference(&map).collect();
    let missing: Vec<&String> = map.difference(&tree).collect();
    assert!(
        unnamed.is_empty(),
        "files of src/ that docs/development.md's layout map does not name: {unnamed:?}"
    );
    assert!(
        missing.is_empty(),
        "files docs/development.md's layout map names that do not exist: {missing:?}"
    );
}
