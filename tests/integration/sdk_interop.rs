//! Interoperability with the official A2A SDKs as real clients against a controller on a real
//! socket: Python `a2a-sdk==1.3.0` and JavaScript `@a2a-js/sdk` 1.3.0 (Node.js). Each script
//! reads the card, sends list and create with a bearer header, reads tasks back and checks a
//! rejected request; then, streaming, creates and lists and sees the progress events in order
//! and a final state, and subscribes to a returnImmediately create and sees it finish. `scripts/test.sh` installs both under `target/` and requires them; a bare
//! `cargo test` without them says it skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// Runs one client script against a fresh controller whose public URL is its listener.
fn run_client(program: &Path, script: &Path, ok_marker: &str) {
    let c = Builder::default().start_with_public_url_of_listener();
    // Creates take a moment, so a subscriber to a returnImmediately create sees it run.
    *c.backend.create_delay.lock().unwrap() = std::time::Duration::from_millis(300);
    let out = Command::new(program)
        .arg(script)
        .arg(c.url())
        .arg(TOKEN)
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
}

#[test]
fn official_python_sdk_reads_card_and_sends_control_requests() {
    let Some(python) = env_or_skip("A2A_TEST_PYTHON", "A2A_REQUIRE_PYTHON") else {
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/sdk_interop.py");
    run_client(Path::new(&python), Path::new(script), "a2a-sdk interop: ok");
}

#[test]
fn official_javascript_sdk_reads_card_and_sends_control_requests() {
    let Some(dir) = env_or_skip("A2A_TEST_JS_DIR", "A2A_REQUIRE_JS") else {
        return;
    };
    // ES modules resolve imports next to the script: run a copy beside node_modules.
    let script = PathBuf::from(dir).join("sdk_interop.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/sdk_interop.mjs"),
        &script,
    )
    .expect("copy the interop script");
    run_client(Path::new("node"), &script, "a2a-js interop: ok");
}
