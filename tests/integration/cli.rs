//! The binary's command line: help, version, and one-line refusals with exit code 2.

use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"));
    c.env_clear().env("HOME", "/tmp");
    c
}

#[test]
fn help_and_version_print_every_setting_and_exit_0() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for s in [
        "A2A_AUTH_TOKEN",
        "-a2a-public-url",
        "LISTEN",
        "127.0.0.1:8080",
        "WORKER_READY_TIMEOUT",
        "60s",
        "LOCAL_WEZTERM",
    ] {
        assert!(text.contains(s), "{s}");
    }
    let out = bin().arg("-version").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with(&format!(
            "a2a-worker-controller {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{text}"
    );
}

fn refusal(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = bin().args(args).envs(env.iter().copied()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn refusals_are_one_line_naming_the_setting() {
    let ok = [
        ("A2A_AUTH_TOKEN", "0123456789abcdef-secret"),
        ("A2A_PUBLIC_URL", "http://localhost:8080"),
    ];
    assert!(refusal(&[], &[]).contains("A2A_AUTH_TOKEN"));
    let e = refusal(
        &[],
        &[
            ("A2A_AUTH_TOKEN", "tooshort"),
            ("A2A_PUBLIC_URL", "http://x"),
        ],
    );
    assert!(
        e.contains("A2A_AUTH_TOKEN") && !e.contains("tooshort"),
        "{e}"
    );
    assert!(refusal(&["-a2a-public-url=localhost:8080"], &ok).contains("A2A_PUBLIC_URL"));
    assert!(refusal(&["--listen", "8080"], &ok).contains("LISTEN"));
    assert!(refusal(&["--bogus=1"], &ok).contains("unknown flag"));
    assert!(refusal(&["stray"], &ok).contains("unknown flag"));
    assert!(
        refusal(&[], &ok).contains("WORKER_IMAGE"),
        "docker needs an image"
    );
    let e = refusal(
        &[
            "-backend=local",
            "-local-task-dir=/tmp",
            "-local-command=x",
            "-local-wezterm=wezterm",
        ],
        &ok,
    );
    assert!(e.contains("LOCAL_WEZTERM"));
}
