//! Tasks that start from another task's files on the local backend (its WezTerm stand-in):
//! the new task's directory is a copy of the source's — contents, modes, links as links (one
//! out of the workspace copies nothing from out there) — the source untouched, the copy's tab
//! started in it; a copy's refusals; what a copy cut off left is removed by the next start.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::local_support::*;
use crate::support::{reply_data, Controls, Proc};

/// The `--cwd` of the `n`th spawned tab.
fn cwd_of(wez: &Wez, n: usize) -> PathBuf {
    let spawn = &wez.calls_of("spawn")[n]["argv"];
    let args = spawn.as_array().unwrap();
    PathBuf::from(
        args[args.iter().position(|a| a == "--cwd").unwrap() + 1]
            .as_str()
            .unwrap(),
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The controller on `wez` with a template with a workspace (`coder`) and one without
/// (`plain`), plus `extra` flags, started; and its workspaces directory.
fn started(wez: &Wez, extra: &[&str]) -> (Proc, PathBuf) {
    let spaces = wez.root.join("workspaces");
    let file = wez.root.join("templates.json");
    std::fs::write(
        &file,
        json!({"templates": {"coder": {"workspace": {"size": "1Gi"}}, "plain": {}}}).to_string(),
    )
    .unwrap();
    let mut flags = vec![
        format!("-worker-templates-file={}", file.display()),
        format!("-local-workspaces-dir={}", spaces.display()),
    ];
    flags.extend(extra.iter().map(|f| f.to_string()));
    let mut p = wez.prepared(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    p.start_now();
    (p, spaces)
}

fn create(p: &Proc, data: Value) -> Value {
    reply_data(&p.control(data))
}

#[test]
fn a_local_task_starts_from_a_copy_of_another_tasks_directory() {
    let wez = Wez::new("fork");
    let _gui = wez.gui();
    let (mut p, spaces) = started(&wez, &[]);

    // The first task's tab leaves files, a mode and two links in its directory.
    let base = create(
        &p,
        json!({"operation": "create", "task": "base", "template": "coder"}),
    );
    let dir = cwd_of(&wez, 0);
    std::fs::create_dir(dir.join("src")).unwrap();
    std::fs::write(dir.join("src/notes"), "half done").unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o750)).unwrap();
    symlink("src/notes", dir.join("inside")).unwrap();
    let secret = wez.root.join("secret");
    std::fs::write(&secret, "never copied").unwrap();
    symlink(&secret, dir.join("outside")).unwrap();

    // While its tab runs, its files may still change: refused.
    let e = p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"}),
        "invalid_state",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("stop or suspend it first"),
        "{e}"
    );
    reply_data(&p.control(json!({"operation": "stop", "worker_id": base["worker"]["worker_id"]})));
    p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "nothing", "task": "fork"}),
        "not_found",
    );
    let e = crate::support::control_error(
        &p.control(json!({"operation": "create", "task": "fork", "template": "plain", "from_task": "base"})),
        "TASK_STATE_REJECTED",
    );
    assert_eq!(e["code"], "invalid_request", "{e}");

    // A create from it: its tab starts in the copy.
    create(
        &p,
        json!({"operation": "create", "task": "fork", "template": "coder", "from_task": "base"}),
    );
    let copy = cwd_of(&wez, 1);
    assert_ne!(copy, dir);
    assert_eq!(
        std::fs::read_to_string(copy.join("src/notes")).unwrap(),
        "half done"
    );
    assert_eq!(mode(&copy.join("run.sh")), 0o750);
    assert_eq!(mode(&copy), mode(&dir), "the directory's own mode");
    assert_eq!(
        std::fs::read_link(copy.join("inside")).unwrap(),
        Path::new("src/notes")
    );
    assert_eq!(std::fs::read_link(copy.join("outside")).unwrap(), secret);
    // The copy changes; the source does not.
    std::fs::write(copy.join("src/notes"), "changed").unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("src/notes")).unwrap(),
        "half done"
    );
    p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"}),
        "worker_exists",
    );
    let spaces_listed = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(spaces_listed["workspaces"].as_array().unwrap().len(), 2);

    // What a copy cut off before its rename left is never a workspace, and goes at the next
    // start.
    let cut = spaces.join("ws-cut-0123.copying-dead");
    std::fs::create_dir_all(cut.join("half")).unwrap();
    p.restart();
    crate::support::wait_until("the cut-off copy removed", crate::support::PATIENCE, || {
        !cut.exists()
    });
    let spaces_listed = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(spaces_listed["workspaces"].as_array().unwrap().len(), 2);
    assert!(p
        .log_text()
        .contains("1 workspace copies that were cut off were settled"));
}

/// A create from another task's files that `MAX_WORKERS` would refuse is refused before the
/// copy: nothing is copied for it.
#[test]
fn a_create_from_another_task_at_max_workers_is_refused_before_any_copy() {
    let wez = Wez::new("fork-full");
    let _gui = wez.gui();
    let (p, _) = started(&wez, &["-max-workers=1"]);
    let base = create(
        &p,
        json!({"operation": "create", "task": "base", "template": "coder"}),
    );
    std::fs::write(cwd_of(&wez, 0).join("notes"), "half done").unwrap();
    reply_data(&p.control(json!({"operation": "stop", "worker_id": base["worker"]["worker_id"]})));
    create(
        &p,
        json!({"operation": "create", "task": "busy", "template": "plain"}),
    );
    let e = p.expect_failure(
        json!({"operation": "create", "task": "fork", "template": "coder", "from_task": "base"}),
        "capacity",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("MAX_WORKERS (1) reached"),
        "{e}"
    );
    let listed = reply_data(&p.control(json!({"operation": "workspaces"})));
    let tasks: Vec<&str> = listed["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["base"], "nothing was copied for the refused create");
    assert!(!p.log_text().contains("was copied to task \"fork\""));
}
