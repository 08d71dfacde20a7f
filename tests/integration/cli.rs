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

/// Whether this test runs as root (only root can make files of another user to copy).
fn as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// What the Kubernetes copy Job does: `copy-files` run by the workers' user (not root, who
/// may not give files away), reading through the workers' group, into a volume root that is
/// root's. Every file, mode and link is copied; the entries are the copier's own, and the
/// summary counts the owners and modes it could not keep.
#[test]
fn copy_files_as_a_user_other_than_root_copies_what_its_group_reads_and_counts_the_owners_not_kept()
{
    use std::fs;
    use std::os::unix::fs::{chown, lchown, symlink, MetadataExt, PermissionsExt};
    if !as_root() || !std::path::Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: needs root and setpriv (util-linux) to copy as another user");
        return;
    }
    // Under /tmp, which every user may pass through (the suite's own TMPDIR may not be).
    let root =
        std::path::Path::new("/tmp").join(format!("a2a-copy-as-user-{}", std::process::id()));
    let _ = fs::remove_dir_all(&root);
    let (src, dst) = (root.join("src"), root.join("dst"));
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::create_dir_all(&dst).unwrap();
    fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
    fs::write(src.join("notes"), "half done").unwrap();
    fs::write(src.join("sub/deep"), "deeper").unwrap();
    symlink("../..", src.join("up")).unwrap();
    // The workers' files: another user's, readable by the group the copier runs in.
    for (path, mode) in [
        (src.join("notes"), 0o640),
        (src.join("sub/deep"), 0o640),
        (src.join("sub"), 0o750),
        (src.clone(), 0o750),
    ] {
        chown(&path, Some(1234), Some(65534)).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    }
    lchown(src.join("up"), Some(1234), Some(65534)).unwrap();
    // A fresh volume's root, as the kubelet leaves it with an fsGroup: root's, the group's to write.
    chown(&dst, Some(0), Some(65534)).unwrap();
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o770)).unwrap();

    let out = Command::new("/usr/bin/setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .arg("copy-files")
        .args([&src, &dst])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains("copied 2 files (15 bytes), 1 directories, 1 links")
            && said.contains("6 entries' owner or mode not kept"),
        "{said}"
    );
    assert_eq!(fs::read_to_string(dst.join("sub/deep")).unwrap(), "deeper");
    assert_eq!(
        fs::read_link(dst.join("up")).unwrap().to_str(),
        Some("../..")
    );
    let meta = |p: &std::path::Path| fs::symlink_metadata(p).unwrap();
    assert_eq!(meta(&dst.join("notes")).mode() & 0o7777, 0o640);
    assert_eq!(meta(&dst.join("sub")).mode() & 0o7777, 0o750);
    // What the copier may not change is counted, not an error: the root's owner and mode.
    assert_eq!(meta(&dst).mode() & 0o7777, 0o770);
    assert_eq!(meta(&dst).uid(), 0);
    assert_eq!(meta(&dst.join("notes")).uid(), 65534);
    // The source is untouched.
    assert_eq!(meta(&src.join("notes")).uid(), 1234);
    fs::remove_dir_all(&root).unwrap();
}
