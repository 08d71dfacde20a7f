//! Interoperability with the official A2A JavaScript SDK (`@a2a-js/sdk` 1.3.0, Node.js), as a
//! real client against a controller on a real socket. `scripts/test.sh` installs the SDK into
//! `target/js-interop` and sets `A2A_TEST_JS_DIR` and `A2A_REQUIRE_JS=1`; a bare `cargo test`
//! without it says it skipped.

use std::process::Command;

use crate::support::*;

#[test]
fn official_javascript_sdk_reads_card_and_sends_control_requests() {
    let Some(dir) = std::env::var_os("A2A_TEST_JS_DIR") else {
        assert!(
            std::env::var("A2A_REQUIRE_JS").as_deref() != Ok("1"),
            "A2A_REQUIRE_JS=1 but A2A_TEST_JS_DIR is not set"
        );
        eprintln!("SKIPPED: A2A_TEST_JS_DIR is not set (scripts/test.sh sets it)");
        return;
    };
    // ES modules resolve imports next to the script: run a copy beside node_modules.
    let script = std::path::Path::new(&dir).join("sdk_interop.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/sdk_interop.mjs"),
        &script,
    )
    .expect("copy the interop script");
    let c = Builder::default().start_with_public_url_of_listener();
    let out = Command::new("node")
        .arg(&script)
        .arg(c.url())
        .arg(TOKEN)
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "JS SDK interop failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("a2a-js interop: ok"), "{stdout}");
}
