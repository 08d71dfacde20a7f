//! The LaunchAgent install (`scripts/install.sh`) and its wrapper, with recording stand-ins for
//! codesign, launchctl and PlistBuddy (`tests/python/install_test.py` says what each mimics):
//! the order of calls, the binary replaced by a rename, a failed signature or verification
//! stopping before anything is replaced, the installed plist parsed by plistlib (and linted by
//! plutil where it exists), and the wrapper's secrets.

use std::process::Command;

#[test]
fn install_signs_then_renames_then_reloads_and_stops_before_the_swap_on_failure() {
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/tests/python/install_test.py"))
        .arg(root)
        .arg(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("install tests: ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
