//! Interoperability with the official A2A SDKs as real clients against a controller on a real
//! socket: Python `a2a-sdk==1.3.0` and JavaScript `@a2a-js/sdk` 1.3.0 (Node.js), each over
//! both bindings, JSON-RPC and HTTP+JSON, choosing the interface from the card. Each script
//! reads the card, sends list and create with a bearer header, reads tasks back and checks a
//! rejected request; then, streaming, creates and lists and sees the progress events in order
//! and a final state, subscribes to a returnImmediately create and sees it finish, and reads
//! the extended card. The controller's own request counts prove which binding carried the
//! calls. `scripts/test.sh` installs both under `target/` and requires them; a bare `cargo
//! test` without them says it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// Runs one client script against a fresh controller whose public URL is its listener, over
/// `binding`; checks from `/metrics` that the calls went through that binding's route only.
fn run_client(program: &Path, script: &Path, binding: &str, ok_marker: &str) {
    let c = Builder::default().start_with_public_url_of_listener();
    // Creates take a moment, so a subscriber to a returnImmediately create sees it run.
    *c.backend.create_delay.lock().unwrap() = std::time::Duration::from_millis(300);
    let out = Command::new(program)
        .arg(script)
        .arg(c.url())
        .arg(TOKEN)
        .arg(binding)
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{stderr}",
        script.display()
    );
    assert!(stdout.contains(ok_marker), "{stdout}");
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    let calls = |route: &str| -> u64 {
        metrics
            .lines()
            .filter(|l| {
                l.starts_with(&format!(
                    "a2a_controller_http_requests_total{{route=\"{route}\""
                ))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    };
    let (used, unused) = match binding {
        "HTTP+JSON" => ("a2a_rest", "a2a"),
        _ => ("a2a", "a2a_rest"),
    };
    assert!(calls(used) >= 10, "{binding}: {metrics}");
    assert_eq!(calls(unused), 0, "{binding} only: {metrics}");
}

#[test]
fn official_python_sdk_over_json_rpc() {
    python_client("JSONRPC");
}

#[test]
fn official_python_sdk_over_http_json() {
    python_client("HTTP+JSON");
}

#[test]
fn official_javascript_sdk_over_json_rpc() {
    javascript_client("JSONRPC");
}

#[test]
fn official_javascript_sdk_over_http_json() {
    javascript_client("HTTP+JSON");
}

fn python_client(binding: &str) {
    let Some(python) = env_or_skip("A2A_TEST_PYTHON", "A2A_REQUIRE_PYTHON") else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_interop.py");
    run_client(
        Path::new(&python),
        Path::new(script),
        binding,
        &format!("a2a-sdk interop over {binding}: ok"),
    );
}

fn javascript_client(binding: &str) {
    let Some(dir) = env_or_skip("A2A_TEST_JS_DIR", "A2A_REQUIRE_JS") else {
        return;
    };
    // ES modules resolve imports next to the script: run a copy beside node_modules (one
    // per binding: the two tests run at once).
    let script = PathBuf::from(dir).join(format!(
        "sdk_interop_{}.mjs",
        binding.replace('+', "_").to_lowercase()
    ));
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/sdk_interop.mjs"),
        &script,
    )
    .expect("copy the interop script");
    run_client(
        Path::new("node"),
        &script,
        binding,
        &format!("a2a-js interop over {binding}: ok"),
    );
}
