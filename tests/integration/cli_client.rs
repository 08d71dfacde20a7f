//! The command line for people against a running controller (in this process, with the
//! backend test double): tables, `--json`, tokens shown only when asked, one-line failures
//! with the contract's error code, and `check`.

use std::process::Command;

use serde_json::Value;

use crate::support::{controller, TOKEN};

fn cli(url: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .args(args)
        .env_clear()
        .env("A2A_PUBLIC_URL", url)
        .env("A2A_AUTH_TOKEN", TOKEN)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn create_list_stop_for_people_and_scripts() {
    let c = controller();
    let url = c.url();
    let (code, out, _) = cli(&url, &["list"]);
    assert_eq!((code, out.as_str()), (0, "no workers\n"));

    let (code, out, err) = cli(&url, &["create", "fix the build"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("WORKER_ID") && lines[1].contains("fix the build"),
        "{out}"
    );
    assert!(out.contains("token: not shown"), "{out}");
    let token = c.backend.tokens.lock().unwrap().last().cloned().unwrap();
    crate::secrets::remember(&token);
    assert!(
        !out.contains(&token),
        "the token is printed only when asked"
    );

    let (code, out, _) = cli(&url, &["create", "second", "--show-token"]);
    assert_eq!(code, 0);
    let token = c.backend.tokens.lock().unwrap().last().cloned().unwrap();
    crate::secrets::remember(&token);
    assert!(out.contains(&format!("token: {token}")), "{out}");

    let (code, out, _) = cli(&url, &["list", "--json"]);
    assert_eq!(code, 0);
    let data: Value = serde_json::from_str(&out).unwrap();
    let workers = data["workers"].as_array().unwrap();
    assert_eq!(workers.len(), 2);
    let (_, table, _) = cli(&url, &["list"]);
    assert_eq!(
        table.lines().count(),
        3,
        "a header and one line per worker: {table}"
    );

    let (code, out, err) = cli(&url, &["create", "fix the build"]);
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("a2a-worker-controller create: worker_exists: "),
        "{err}"
    );

    let id = workers[0]["worker_id"].as_str().unwrap();
    let (code, out, _) = cli(&url, &["stop", id]);
    assert_eq!(code, 0);
    assert_eq!(out, format!("stopped worker {id} (task fix the build)\n"));
    let (code, _, err) = cli(&url, &["stop", id]);
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");

    let (code, _, err) = cli(&url, &["create", ""]);
    assert_eq!(code, 1);
    assert!(err.contains("invalid_request"), "{err}");
}

#[test]
fn create_with_a_ttl_and_read_a_workers_logs() {
    let c = crate::support::Builder::default()
        .flag("-max-worker-ttl=2h")
        .start();
    let url = c.url();
    let (code, out, err) = cli(
        &url,
        &["create", "expiring", "--ttl", "90m", "--json", "--progress"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        err, "  fake: starting\n  fake: ready\n",
        "each step on stderr as it streamed"
    );
    let data: Value = serde_json::from_str(&out).unwrap();
    crate::secrets::remember(data["token"].as_str().unwrap());
    let expires = data["worker"]["expires_at"].as_str().unwrap().to_string();
    assert!(!expires.is_empty());
    let (_, table, _) = cli(&url, &["list"]);
    assert!(
        table.lines().next().unwrap().contains("EXPIRES") && table.contains(&expires),
        "{table}"
    );
    let (code, _, err) = cli(&url, &["create", "too long", "--ttl", "3h"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("invalid_request: ttl 3h is longer than MAX_WORKER_TTL (2h)"),
        "{err}"
    );

    let id = data["worker"]["worker_id"].as_str().unwrap();
    let (code, out, err) = cli(&url, &["logs", id, "--tail", "2"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{id} line 2\n{id} line 3\n"));
    let (code, _, err) = cli(&url, &["logs", "000000000000"]);
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");
    for (args, says) in [
        (vec!["list", "--ttl", "1h"], "--ttl is for create only"),
        (
            vec!["create", "x", "--tail", "5"],
            "--tail is for logs only",
        ),
        (
            vec!["logs", id, "--tail", "many"],
            "is not a number of lines",
        ),
        (vec!["logs"], "usage: a2a-worker-controller logs WORKER_ID"),
    ] {
        let (code, _, err) = cli(&url, &args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn a_refused_token_and_a_token_file() {
    let c = controller();
    let url = c.url();
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .args(["list", "--url", &url])
        .env_clear()
        .env("A2A_AUTH_TOKEN", "wrong-token-0123456789")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unauthorized: the bearer token is not valid"),
        "{err}"
    );
    assert!(!err.contains("wrong-token"));

    let file = std::env::temp_dir().join(format!("a2a-cli-token-{}", std::process::id()));
    std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .args(["list", "--url", &url])
        .env_clear()
        .env("A2A_AUTH_TOKEN_FILE", &file)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&file);
}

/// `a2a-worker-controller check ARGS` over a clean environment plus `env`: exit code, stdout,
/// stderr.
pub fn check(args: &[String], env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .arg("check")
        .args(args)
        .env_clear()
        .env("HOME", std::env::temp_dir())
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The environment `check` needs besides the backend's settings.
pub const CHECK_ENV: [(&str, &str); 2] = [
    ("A2A_AUTH_TOKEN", TOKEN),
    ("A2A_PUBLIC_URL", "http://localhost:8080"),
];

#[test]
fn check_reports_settings_and_the_backend() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        check(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>(), env)
    };
    let base = CHECK_ENV;
    let (code, _, err) = run(&[], &base[1..]);
    assert_eq!(code, Some(2));
    assert!(
        err.starts_with("settings: setting A2A_AUTH_TOKEN is required"),
        "{err}"
    );
    let (code, out, err) = run(
        &[
            "-worker-image=a2a-echo-worker:dev",
            "-docker-host=unix:///nonexistent/docker.sock",
        ],
        &base,
    );
    assert_eq!(code, Some(1));
    assert!(out.starts_with("settings: ok"), "{out}");
    assert!(
        err.starts_with("backend docker: FAILED: backend unavailable"),
        "{err}"
    );
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN));
}

/// `create --meta k=v` (repeatable) tags a worker; `list --meta k=v --state S --task T`
/// filters; the table shows the tags; misplaced or malformed flags are usage errors.
#[test]
fn metadata_and_list_filters_from_the_command_line() {
    let c = controller();
    let url = c.url();
    let (code, out, err) = cli(
        &url,
        &[
            "create",
            "tagged",
            "--meta",
            "team=infra",
            "--meta=ticket=JIRA-1",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("team=infra,ticket=JIRA-1"), "{out}");
    cli(&url, &["create", "plain"]);
    let json_of = |args: &[&str]| -> Value {
        let (code, out, err) = cli(&url, args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let tasks = |v: &Value| -> Vec<String> {
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["task"].as_str().unwrap().to_string())
            .collect()
    };
    let tagged = json_of(&["list", "--json", "--meta", "team=infra"]);
    assert_eq!(tasks(&tagged), ["tagged"]);
    assert_eq!(tagged["workers"][0]["metadata"]["ticket"], "JIRA-1");
    assert_eq!(
        tasks(&json_of(&["list", "--json", "--task", "plain"])),
        ["plain"]
    );
    assert_eq!(
        tasks(&json_of(&["list", "--json", "--state", "running"])).len(),
        2
    );
    assert!(tasks(&json_of(&["list", "--json", "--state", "exited"])).is_empty());
    for (args, says) in [
        (
            &["create", "x", "--meta", "novalue"][..],
            "is not KEY=VALUE",
        ),
        (
            &["create", "x", "--meta", "a=1", "--meta", "a=2"][..],
            "given twice",
        ),
        (
            &["stop", "abc", "--meta", "a=1"][..],
            "--meta is for create, list and watch only",
        ),
        (
            &["create", "x", "--state", "running"][..],
            "--state is for list and watch only",
        ),
    ] {
        let (code, _, err) = cli(&url, args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let (code, _, err) = cli(&url, &["create", "x", "--meta", "Bad=1"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("invalid_request") && err.contains("\"Bad\""),
        "{err}"
    );
}

/// `watch` prints what happens as it happens (JSON lines with `--json`, one line per event for
/// people), with list's filters; killing it ends the watch on the controller.
#[test]
fn watch_prints_events_until_it_is_ended() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let c = controller();
    let url = c.url();
    cli(&url, &["create", "seen-first", "--meta", "team=a"]);
    let spawn = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
            .args(args)
            .env_clear()
            .env("A2A_PUBLIC_URL", &url)
            .env("A2A_AUTH_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut json_watch = spawn(&["watch", "--json", "--meta", "team=a"]);
    let mut people = spawn(&["watch"]);
    let mut json_lines = BufReader::new(json_watch.stdout.take().unwrap()).lines();
    let mut people_lines = BufReader::new(people.stdout.take().unwrap()).lines();
    let mut next =
        || -> Value { serde_json::from_str(&json_lines.next().unwrap().unwrap()).unwrap() };
    let first = next();
    assert_eq!(
        (first["type"].as_str(), first["worker"]["task"].as_str()),
        (Some("added"), Some("seen-first"))
    );
    assert_eq!(next()["type"], "synced");
    cli(&url, &["create", "other-team", "--meta", "team=b"]);
    cli(&url, &["create", "seen-second", "--meta", "team=a"]);
    let e = next();
    assert_eq!(
        e["worker"]["task"], "seen-second",
        "the filter left other-team out: {e}"
    );
    let line = people_lines.next().unwrap().unwrap();
    assert!(
        line.contains(" added ") && line.contains("task seen-first running"),
        "{line}"
    );
    json_watch.kill().unwrap();
    people.kill().unwrap();
    let _ = (json_watch.wait(), people.wait());
    // The controller notices at its next writes: a few events, then both watches are over.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for n in 0.. {
        cli(&url, &["create", &format!("after-{n}"), "--meta", "team=a"]);
        let working = c.rpc(
            "ListTasks",
            serde_json::json!({"status": "TASK_STATE_WORKING"}),
        );
        if working["result"]["tasks"].as_array().unwrap().is_empty() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{working}");
    }
}

#[test]
fn templates_and_workspaces_from_the_command_line() {
    let dir = crate::templates::test_dir("cli");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        serde_json::json!({"coder": {"image": "coder:1", "memory": "1g", "ttl": "2h",
                                     "workspace": {"size": "2Gi"}, "description": "writes code"}}),
    );
    let c = crate::support::Builder::default()
        .flag(&format!("-worker-templates-file={}", file.display()))
        .start();
    let url = c.url();
    let (code, out, err) = cli(&url, &["templates"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("TEMPLATE  IMAGE"), "{out}");
    assert!(
        lines[1].starts_with("coder")
            && lines[1].contains("coder:1")
            && lines[1].contains("1024m")
            && lines[1].contains("2h")
            && lines[1].contains("/workspace (2Gi)")
            && lines[1].ends_with("writes code"),
        "{out}"
    );
    assert!(lines[2].starts_with("default"), "{out}");

    let (code, out, err) = cli(&url, &["create", "t1", "--template", "coder"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().next().unwrap().contains("TEMPLATE"), "{out}");
    assert!(out.lines().nth(1).unwrap().contains(" coder "), "{out}");
    let (_, out, _) = cli(&url, &["create", "t2"]);
    assert!(out.contains(" default "), "{out}");
    let (_, out, _) = cli(&url, &["list", "--template", "coder", "--json"]);
    let data: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(data["workers"].as_array().unwrap().len(), 1);
    let (code, _, err) = cli(&url, &["create", "t3", "--template", "nonesuch"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("unknown template \"nonesuch\": this caller may use coder, default"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");

    // The test double keeps no workspaces: the answers for none.
    let (code, out, _) = cli(&url, &["workspaces"]);
    assert_eq!((code, out.as_str()), (0, "no workspaces\n"));
    let (code, _, err) = cli(&url, &["delete-workspace", "t9"]);
    assert_eq!(code, 1);
    assert!(err.contains("not_found"), "{err}");
    let (code, _, err) = cli(&url, &["list", "--delete-workspace"]);
    assert_eq!(code, 2);
    assert!(err.contains("--delete-workspace is for stop only"), "{err}");
    for token in c.backend.tokens.lock().unwrap().iter() {
        crate::secrets::remember(token);
    }
}
