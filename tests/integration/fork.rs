//! Tasks that start from another task's files, on the real engine (`A2A_TEST_DOCKER_HOST`)
//! with the controller's own image as `WORKSPACE_COPY_IMAGE`: a copy keeps files, modes,
//! owners and links (a link out of the workspace stays a link), leaves the source untouched,
//! and the new task's worker sees it; every refusal says why in one line; a copy cut off by a
//! killed controller is never handed to a worker and is removed by the next controller.

use std::path::Path;

use serde_json::{json, Value};

use crate::callers::{control_as, hash, ALICE, BOB};
use crate::docker_support::*;
use crate::support::*;
use crate::templates::{tell, test_dir, write_templates, VolumeCleanup};

/// The image that copies (the controller's own, built by `scripts/test.sh`).
fn copy_image() -> String {
    std::env::var("A2A_TEST_CONTROLLER_IMAGE")
        .unwrap_or_else(|_| "a2a-worker-controller:dev".to_string())
}

/// A refusal's (code, message), whether the task was rejected or failed.
fn refusal(task: &Value) -> (String, String) {
    let e = &task["status"]["message"]["parts"][1]["data"]["error"];
    assert!(e.is_object(), "not a refusal: {task}");
    (
        e["code"].as_str().unwrap().to_string(),
        e["message"].as_str().unwrap().to_string(),
    )
}

/// Templates `coder` (a workspace) and `plain` (none); callers alice (team-a), bob (team-b).
fn setup(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = test_dir(name);
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({
            "coder": {"image": worker_image(), "workspace": {"size": "1Gi"}},
            "plain": {"image": worker_image()}
        }),
    );
    let callers = dir.join("callers.json");
    std::fs::write(
        &callers,
        json!({"callers": [
            {"name": "alice", "token_sha256": hash(ALICE), "scope": "team-a"},
            {"name": "bob", "token_sha256": hash(BOB), "scope": "team-b"}
        ]})
        .to_string(),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&callers, std::fs::Permissions::from_mode(0o600)).unwrap();
    (file, callers)
}

fn start(socket: &Path, id: &str, file: &Path, callers: &Path) -> Proc {
    Proc::start(
        socket,
        id,
        &[
            &format!("-worker-templates-file={}", file.display()),
            &format!("-a2a-callers-file={}", callers.display()),
            &format!("-workspace-copy-image={}", copy_image()),
            "-reap-interval=1s",
        ],
    )
}

/// A worker of task `task` (template coder) as alice: (url, token, worker id).
fn worker(p: &Proc, data: Value) -> (String, String, String) {
    let made = reply_data(&control_as(p.addr, ALICE, data));
    (
        made["worker"]["a2a_url"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
        made["worker"]["worker_id"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_task_starts_from_a_copy_of_another_tasks_workspace_on_the_real_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("fork");
    // Dropped last: the containers go first, then their volumes.
    let _volumes = VolumeCleanup(socket.clone(), id.clone());
    let _cleanup = Cleanup::new(&socket, &id);
    let (file, callers) = setup("fork");
    let p = start(&socket, &id, &file, &callers);
    let as_alice = |data: Value| control_as(p.addr, ALICE, data);

    // The first task's worker leaves files, a mode and two links (one out of the workspace).
    let (url, token, base) = worker(
        &p,
        json!({"operation": "create", "task": "base", "template": "coder"}),
    );
    for (said, answer) in [
        ("workspace write notes.txt half done", "wrote notes.txt"),
        ("workspace write run.sh echo hi", "wrote run.sh"),
        ("workspace chmod run.sh 750", "mode of run.sh is 750"),
        ("workspace link inside notes.txt", "linked inside"),
        ("workspace link outside /etc/passwd", "linked outside"),
    ] {
        assert_eq!(tell(&url, &token, said), answer);
    }
    // As the source has it: its mode, and its owner (the worker image's user).
    let run_sh = tell(&url, &token, "workspace stat run.sh");
    assert!(run_sh.starts_with("file 750 "), "{run_sh}");

    // Refused, each in one line: the source's worker is running; no such source; the same
    // task; another scope's task; a target with a worker; a template without a workspace.
    let (code, why) = refusal(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork a"}),
    ));
    assert_eq!(code, "invalid_state");
    assert!(
        why.contains("is running and may still be writing its workspace: stop or suspend it first"),
        "{why}"
    );
    reply_data(&as_alice(
        json!({"operation": "suspend", "worker_id": base}),
    ));
    let (code, why) = refusal(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "nothing", "task": "fork a"}),
    ));
    assert_eq!(
        (code.as_str(), why.as_str()),
        (
            "not_found",
            "task \"nothing\" has no workspace (in this caller's scope) to copy"
        )
    );
    let (code, _) = refusal(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "base"}),
    ));
    assert_eq!(code, "invalid_request");
    let (code, why) = refusal(&control_as(
        p.addr,
        BOB,
        json!({"operation": "copy_workspace", "from_task": "base", "task": "bobs"}),
    ));
    assert_eq!(code, "not_found", "alice's task is none of bob's: {why}");
    let (_, _, busy) = worker(
        &p,
        json!({"operation": "create", "task": "busy", "template": "plain"}),
    );
    let (code, why) = refusal(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "busy"}),
    ));
    assert_eq!(code, "worker_exists");
    assert!(why.contains(&busy), "{why}");
    let (code, why) = refusal(&as_alice(
        json!({"operation": "create", "task": "x", "template": "plain", "from_task": "base"}),
    ));
    assert_eq!(
        (code.as_str(), why.as_str()),
        (
            "invalid_request",
            "from_task needs a template with a workspace: template plain has none"
        )
    );

    // Suspended, its files are copied: once alone, once by a create.
    let copied = reply_data(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork a"}),
    ));
    assert_eq!(copied["workspace"]["task"], "fork a");
    assert_eq!(copied["workspace"]["template"], "coder");
    let (code, why) = refusal(&as_alice(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork a"}),
    ));
    assert_eq!(code, "invalid_state");
    assert!(why.contains("has a workspace already"), "{why}");
    let (url_b, token_b, _) = worker(
        &p,
        json!({"operation": "create", "task": "fork b", "template": "coder", "from_task": "base"}),
    );
    assert_eq!(
        tell(&url_b, &token_b, "workspace read notes.txt"),
        "half done"
    );
    assert_eq!(tell(&url_b, &token_b, "workspace stat run.sh"), run_sh);
    assert_eq!(
        tell(&url_b, &token_b, "workspace stat inside"),
        "link -> notes.txt"
    );
    assert_eq!(
        tell(&url_b, &token_b, "workspace stat outside"),
        "link -> /etc/passwd"
    );
    // The copy's worker writes; the source is untouched.
    tell(&url_b, &token_b, "workspace write notes.txt changed");
    let resumed = reply_data(&as_alice(json!({"operation": "resume", "worker_id": base})));
    assert_eq!(resumed["worker"]["state"], "running");
    assert_eq!(tell(&url, &token, "workspace read notes.txt"), "half done");
    let (url_a, token_a, _) = worker(
        &p,
        json!({"operation": "create", "task": "fork a", "template": "coder"}),
    );
    assert_eq!(
        tell(&url_a, &token_a, "workspace read notes.txt"),
        "half done"
    );
    let spaces = reply_data(&as_alice(json!({"operation": "workspaces"})));
    let mut tasks: Vec<&str> = spaces["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["task"].as_str().unwrap())
        .collect();
    tasks.sort();
    assert_eq!(tasks, ["base", "fork a", "fork b"]);
    assert!(p
        .log_text()
        .contains("the workspace of task \"base\" was copied to task \"fork b\""));
}

#[test]
fn a_copy_cut_off_by_a_killed_controller_is_never_handed_out_and_is_removed() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("fork-cut");
    // Dropped last: the containers go first, then their volumes.
    let _volumes = VolumeCleanup(socket.clone(), id.clone());
    let _cleanup = Cleanup::new(&socket, &id);
    let (file, callers) = setup("fork-cut");
    let mut p = start(&socket, &id, &file, &callers);
    let q = start(&socket, &id, &file, &callers);
    let (url, token, base) = worker(
        &p,
        json!({"operation": "create", "task": "base", "template": "coder"}),
    );
    assert_eq!(
        tell(&url, &token, "workspace fill big.bin 400"),
        "filled big.bin"
    );
    tell(&url, &token, "workspace write notes.txt whole");
    reply_data(&control_as(
        p.addr,
        ALICE,
        json!({"operation": "stop", "worker_id": base}),
    ));

    // The copy runs through p; its container is paused where it stands.
    let addr = p.addr;
    let copying = std::thread::spawn(move || {
        std::panic::catch_unwind(|| {
            control_as(
                addr,
                ALICE,
                json!({"operation": "copy_workspace", "from_task": "base", "task": "cut"}),
            )
        })
    });
    let copier = || {
        crate::pool::ps(
            &socket,
            &id,
            "a2a-worker-controller/workspace=copy",
            "{{.ID}}",
        )
        .trim()
        .to_string()
    };
    let mut container = String::new();
    wait_until("the copy container", PATIENCE, || {
        container = copier();
        !container.is_empty()
    });
    docker_cli(&socket, &["pause", &container], None);

    // Meanwhile the half-made workspace is handed to no worker, on either controller.
    let (code, why) = refusal(&control_as(
        q.addr,
        ALICE,
        json!({"operation": "create", "task": "cut", "template": "coder"}),
    ));
    assert_eq!(code, "invalid_state");
    assert!(why.contains("is still being copied"), "{why}");
    let (code, why) = refusal(&control_as(
        q.addr,
        ALICE,
        json!({"operation": "copy_workspace", "from_task": "base", "task": "cut"}),
    ));
    assert_eq!(code, "invalid_state", "{why}");

    // The controller is killed, and so is its copy (the machine went down mid-copy).
    p.kill();
    let _ = copying.join();
    docker_cli(&socket, &["kill", &container], None);
    drop(q);
    // The next controller's first pass removes the cut-off copy: container and volume.
    let r = start(&socket, &id, &file, &callers);
    // Its log line comes once container, volume and mark are gone.
    wait_until("the cut-off copy removed", PATIENCE, || {
        r.log_text()
            .contains("the copy to task \"cut\"'s workspace was cut off")
    });
    assert!(copier().is_empty());
    let spaces = reply_data(&control_as(
        r.addr,
        ALICE,
        json!({"operation": "workspaces"}),
    ));
    let tasks: Vec<&str> = spaces["workspaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["task"].as_str().unwrap())
        .collect();
    assert_eq!(tasks, ["base"], "nothing of the cut-off copy is left");
    // And the task can start from the source again, whole.
    let (url_c, token_c, _) = worker(
        &r,
        json!({"operation": "create", "task": "cut", "template": "coder", "from_task": "base"}),
    );
    assert_eq!(tell(&url_c, &token_c, "workspace read notes.txt"), "whole");
}

#[test]
fn check_says_whether_the_copy_image_is_on_the_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let present = format!("-workspace-copy-image={}", copy_image());
    let args = crate::templates::engine_args(&socket, &present);
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    let said = format!("WORKSPACE_COPY_IMAGE {} is present", copy_image());
    assert!(out.contains(&said), "{out}");
    let args = crate::templates::engine_args(&socket, "-workspace-copy-image=a2a-no-such:1");
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("WORKSPACE_COPY_IMAGE a2a-no-such:1 is not on the engine"),
        "{out}{err}"
    );
}

/// An image holding the host's own `cp` (GNU coreutils) and the libraries it links: the
/// baseline's copy, in a container of its own as the controller's copy is. `None` off Linux
/// (or without `ldd`), said by the caller.
fn cp_image(socket: &Path) -> Option<String> {
    let tag = "a2a-bench-cp:dev".to_string();
    let ldd = std::process::Command::new("ldd")
        .arg("/usr/bin/cp")
        .output()
        .ok()?;
    let dir = std::env::temp_dir().join(format!("a2a-bench-cp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut files = vec!["/usr/bin/cp".to_string()];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // `libc.so.6 => /lib/.../libc.so.6 (0x...)`, or `/lib64/ld-linux-x86-64.so.2 (0x...)`.
        let path = line
            .split("=>")
            .last()?
            .split_whitespace()
            .next()?
            .to_string();
        if path.starts_with('/') {
            files.push(path);
        }
    }
    for f in &files {
        let to = dir.join(f.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent()?).ok()?;
        std::fs::copy(f, &to).ok()?;
    }
    std::fs::write(dir.join("Dockerfile"), "FROM scratch\nCOPY . /\n").ok()?;
    docker_cli(
        socket,
        &["build", "-q", "-t", &tag, &dir.display().to_string()],
        None,
    );
    let _ = std::fs::remove_dir_all(&dir);
    Some(tag)
}

/// scripts/bench.sh: a copy of a 200 MB workspace (one 200 MiB file and a few small ones)
/// through `copy_workspace` against `cp -a` between the same two kinds of volume in a
/// short-lived container of its own (`docker run --rm`: a container's start is the floor),
/// p50 of BENCH_FORK_ROUNDS (default 5), interleaved.
#[test]
#[ignore]
fn docker_bench_fork() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let Some(cp) = cp_image(&socket) else {
        println!("BENCH fork: skipped (no ldd here to build the cp -a baseline's image)");
        return;
    };
    let rounds = rounds("BENCH_FORK_ROUNDS", 5).max(1);
    let mib = crate::support::rounds("BENCH_FORK_MIB", 200);
    let id = controller_id("bench-fork");
    let _volumes = VolumeCleanup(socket.clone(), id.clone());
    let _cleanup = Cleanup::new(&socket, &id);
    let (file, callers) = setup("bench-fork");
    let p = start(&socket, &id, &file, &callers);
    let (url, token, base) = worker(
        &p,
        json!({"operation": "create", "task": "base", "template": "coder"}),
    );
    assert_eq!(
        tell(&url, &token, &format!("workspace fill big.bin {mib}")),
        "filled big.bin"
    );
    for i in 0..20 {
        tell(
            &url,
            &token,
            &format!("workspace write small-{i}.txt some text {i}"),
        );
    }
    reply_data(&control_as(
        p.addr,
        ALICE,
        json!({"operation": "stop", "worker_id": base}),
    ));
    let source = reply_data(&control_as(
        p.addr,
        ALICE,
        json!({"operation": "workspaces"}),
    ))["workspaces"][0]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let task = format!("copy {i}");
        let started = std::time::Instant::now();
        reply_data(&control_as(
            p.addr,
            ALICE,
            json!({"operation": "copy_workspace", "from_task": "base", "task": task}),
        ));
        ours.push(started.elapsed());
        reply_data(&control_as(
            p.addr,
            ALICE,
            json!({"operation": "delete_workspace", "task": task}),
        ));
        let target = format!("{id}-bench-cp-{i}");
        let started = std::time::Instant::now();
        docker_cli(
            &socket,
            &[
                "run",
                "--rm",
                "--network",
                "none",
                "-v",
                &format!("{source}:/from:ro"),
                "-v",
                &format!("{target}:/to"),
                &cp,
                "/usr/bin/cp",
                "-a",
                "/from/.",
                "/to/",
            ],
            None,
        );
        theirs.push(started.elapsed());
        docker_cli(&socket, &["volume", "rm", "-f", &target], None);
    }
    let (a, b) = (p50(ours), p50(theirs));
    println!("BENCH fork: copy_workspace p50 {a:?}, cp -a in a container p50 {b:?} ({rounds} rounds, {mib} MiB)");
    println!(
        "ROW|copy of a {mib} MB workspace (1 file of {mib} MiB + 20 small), Docker, p50 of {rounds}|{:.1} ms ÷ cp -a in a short-lived container {:.1} ms = ×{:.2}|≤ ×1.3",
        a.as_secs_f64() * 1000.0,
        b.as_secs_f64() * 1000.0,
        a.as_secs_f64() / b.as_secs_f64()
    );
}
