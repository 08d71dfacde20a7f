//! Secrets in files: `A2A_AUTH_TOKEN_FILE` instead of the variable (what Kubernetes Secrets
//! and launchd wrappers provide), rotated without a restart with a bounded overlap in which
//! both tokens work, and checked at startup like the variable.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::request;
use crate::support::Proc;

const FIRST: &str = "first-token-0123456789abcdef";
const SECOND: &str = "second-token-0123456789abcdef";

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("a2a-tokenfile-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// Writes a secret the way a rotation should: a new file renamed over the old one.
fn rotate(path: &Path, token: &str, mode: u32) {
    let tmp = path.with_extension("new");
    fs::write(&tmp, format!("{token}\n")).unwrap();
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
    fs::rename(&tmp, path).unwrap();
}

fn status_with(p: &Proc, token: &str) -> u16 {
    let auth = format!("Bearer {token}");
    let body = br#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}"#;
    request(
        p.addr,
        "POST",
        "/a2a",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
        ],
        body,
    )
    .status
}

fn controller(file: &Path, extra: &[&str]) -> Proc {
    let mut args = vec![
        format!("-a2a-auth-token-file={}", file.display()),
        "-backend=docker".to_string(),
        "-docker-host=unix:///nonexistent/docker.sock".to_string(),
        "-worker-image=a2a-echo-worker:dev".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    Proc::prepare("tokenfile", args, Vec::new())
}

#[test]
fn a_token_file_rotates_without_restart_and_the_old_token_expires() {
    crate::secrets::remember(FIRST);
    crate::secrets::remember(SECOND);
    let d = dir("rotate");
    let file = d.join("token");
    rotate(&file, FIRST, 0o600);
    // An overlap long enough that the check right after the change falls inside it on a busy
    // machine too.
    let mut p = controller(&file, &["-a2a-auth-token-overlap=6s"]);
    p.start_now();
    assert_eq!(status_with(&p, FIRST), 200);
    assert_eq!(status_with(&p, SECOND), 401);

    rotate(&file, SECOND, 0o600);
    let deadline = Instant::now() + Duration::from_secs(20);
    while status_with(&p, SECOND) != 200 {
        assert!(
            Instant::now() < deadline,
            "the new token was never picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let rotated = Instant::now();
    assert_eq!(status_with(&p, FIRST), 200, "both work during the overlap");
    crate::support::wait_until("the old token refused", Duration::from_secs(20), || {
        status_with(&p, FIRST) == 401
    });
    // The overlap began when the change was seen, just before `rotated`.
    assert!(
        rotated.elapsed() >= Duration::from_millis(5500),
        "the old token ends with the overlap, not before: {:?}",
        rotated.elapsed()
    );
    assert_eq!(status_with(&p, SECOND), 200);

    // Emptied or half-written, the file changes nothing (and the log says so, once each: the
    // file is looked at when a request comes, at most once a second).
    let refusals = |p: &Proc| p.log_text().matches("holds no usable token").count();
    fs::write(&file, "").unwrap();
    crate::support::wait_until("the emptied file refused", Duration::from_secs(20), || {
        assert_eq!(status_with(&p, SECOND), 200);
        refusals(&p) == 1
    });
    fs::write(&file, "short").unwrap();
    crate::support::wait_until(
        "the half-written file refused",
        Duration::from_secs(20),
        || {
            assert_eq!(status_with(&p, SECOND), 200);
            refusals(&p) == 2
        },
    );
    let log = p.log_text();
    assert!(log.contains("the new token is in use"), "{log}");
    assert!(!log.contains("short"), "file contents never reach the log");
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn token_files_are_checked_at_startup() {
    let d = dir("startup");
    let file = d.join("token");
    rotate(&file, FIRST, 0o644);
    // Readable by others: it starts, and says so.
    let mut p = controller(&file, &[]);
    p.start_now();
    assert_eq!(status_with(&p, FIRST), 200);
    assert!(p.log_text().contains("make it 0600"), "{}", p.log_text());
    drop(p);

    rotate(&file, "tooshort", 0o600);
    let (code, out) = controller(&file, &[]).run_to_exit();
    assert_eq!(code, Some(2));
    assert!(
        out.contains("A2A_AUTH_TOKEN_FILE") && !out.contains("tooshort"),
        "{out}"
    );

    let (code, out) = controller(&d.join("absent"), &[]).run_to_exit();
    assert_eq!(code, Some(2));
    assert!(out.contains("A2A_AUTH_TOKEN_FILE"), "{out}");

    rotate(&file, FIRST, 0o600);
    let both = format!("-a2a-auth-token={SECOND}");
    let (code, out) = controller(&file, &[&both]).run_to_exit();
    assert_eq!(code, Some(2));
    assert!(
        out.contains("set one of them") && !out.contains(SECOND),
        "{out}"
    );
    let _ = fs::remove_dir_all(&d);
}

#[test]
fn a_callers_token_file_is_read_again_when_it_changes() {
    crate::secrets::remember(FIRST);
    crate::secrets::remember(SECOND);
    let d = dir("callers");
    let token = d.join("ops-token");
    rotate(&token, FIRST, 0o600);
    let callers = d.join("callers.json");
    let text = format!(
        r#"{{"callers": [{{"name": "ops", "token_file": "{}", "scope": "ops"}}]}}"#,
        token.display()
    );
    fs::write(&callers, text).unwrap();
    fs::set_permissions(&callers, fs::Permissions::from_mode(0o600)).unwrap();
    let mut p = Proc::prepare(
        "callers-tokenfile",
        vec![
            format!("-a2a-callers-file={}", callers.display()),
            "-backend=docker".to_string(),
            "-docker-host=unix:///nonexistent/docker.sock".to_string(),
            "-worker-image=a2a-echo-worker:dev".to_string(),
        ],
        Vec::new(),
    );
    p.start_now();
    assert_eq!(status_with(&p, FIRST), 200);
    assert_eq!(status_with(&p, SECOND), 401);
    // Only the token file changes; the callers file is left as it was.
    rotate(&token, SECOND, 0o600);
    let deadline = Instant::now() + Duration::from_secs(20);
    while status_with(&p, SECOND) != 200 {
        assert!(
            Instant::now() < deadline,
            "the token file's new token was never picked up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        status_with(&p, FIRST),
        401,
        "the old token is gone with the file's change"
    );
    let log = p.log_text();
    assert!(
        log.contains(&format!(
            ": its token file {} changed: 1 callers now",
            token.display()
        )),
        "{log}"
    );
    assert!(
        !log.contains(SECOND) && !log.contains(FIRST),
        "tokens never reach the log"
    );
    let _ = fs::remove_dir_all(&d);
}
