//! The local backend end to end: the controller binary, `-backend=local`, the stand-in
//! `wezterm` (see `local_support`). Every test also checks, when its harness drops, that each
//! CLI call named the program by its absolute path and passed `--no-auto-start`, and that the
//! state file holds no task content and no token.

use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::local_support::*;
use crate::support::Proc;
use crate::support::{control_error, one_winner, reply_data, Controls};

fn create(p: &Proc, task: &str) -> Value {
    let task = p.control(json!({"operation": "create", "task": task}));
    let data = reply_data(&task);
    assert_eq!(
        data["token"], "",
        "a local worker has no endpoint and no token"
    );
    data["worker"].clone()
}

fn list(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .clone()
}

fn stop(p: &Proc, worker_id: &Value) -> Value {
    reply_data(&p.control(json!({"operation": "stop", "worker_id": worker_id})))["worker"].clone()
}

fn ids(workers: &[Value]) -> HashSet<String> {
    workers
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_string())
        .collect()
}

fn assert_log_private(p: &Proc) {
    let log = p.log_text();
    assert!(!log.contains(BODY_MARKER), "task file content in the log");
}

#[test]
fn create_list_stop_one_tab_per_task() {
    let wez = Wez::new("basic");
    let gui = wez.gui();
    wez.task("fix the build", Some("sess-from-before"));
    let p = wez.controller();
    assert_eq!(p.get("/readiness").status, 200);

    let w = create(&p, "fix the build");
    assert_eq!(w["backend"], "local");
    assert_eq!(w["state"], "running");
    assert_eq!(w["a2a_url"], "");
    assert_eq!(w["reason"], "");
    assert_eq!(
        w["session_id"], "",
        "the session id present at create is not the worker's"
    );
    let wid = w["worker_id"].as_str().unwrap().to_string();
    let pane = pane_of(&w);
    assert_eq!(
        gui.panes(),
        [0, pane],
        "the operator's pane 0 and the new tab"
    );

    // The tab runs LOCAL_COMMAND with the placeholders filled per argument, in a new window,
    // in the task directory — and it went to the GUI the discovery found.
    let spawn = &wez.calls_of("spawn")[0];
    let task_file = wez.tasks.join("fix the build.md");
    assert_eq!(
        spawn["argv"].as_array().unwrap()[4..].to_vec(),
        [
            json!("--new-window"),
            json!("--cwd"),
            json!(wez.tasks.display().to_string()),
            json!("--"),
            json!(wez.agent().display().to_string()),
            json!("--task-file"),
            json!(task_file.display().to_string()),
            json!("--name"),
            json!(format!("worker {wid} for fix the build")),
        ]
    );
    assert_eq!(socket_of(spawn), gui.socket);

    let listed = list(&p);
    assert_eq!(listed, vec![w], "list reports the worker as create did");
    let records = wez.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["pane_id"], pane);
    assert_eq!(records[0]["gui_socket"], json!(gui.socket));
    assert_eq!(records[0]["baseline_session_id"], "sess-from-before");
    let mode = std::fs::metadata(&wez.state_file)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);

    let e = p.expect_failure(
        json!({"operation": "create", "task": "fix the build"}),
        "worker_exists",
    );
    assert_eq!(e["worker_id"], wid.as_str());
    assert_eq!(e["state"], "running");
    assert_eq!(wez.calls_of("spawn").len(), 1, "no second tab for the task");

    let stopped = stop(&p, &json!(wid));
    assert_eq!(stopped["worker_id"], wid.as_str());
    assert_eq!(
        gui.panes(),
        [0],
        "the tab is closed, the operator's pane is not"
    );
    let kill = &wez.calls_of("kill-pane")[0];
    assert_eq!(kill["argv"][5], pane.to_string());
    assert!(list(&p).is_empty());
    assert!(wez.records().is_empty());
    p.expect_failure(json!({"operation": "stop", "worker_id": wid}), "not_found");

    // Restarted, the controller finds its workers in the state file, metadata included.
    let meta = json!({"team": "infra & ops", "ticket.id": "JIRA-1234: \"x\" ✓"});
    let w2 = reply_data(
        &p.control(json!({"operation": "create", "task": "fix the build", "metadata": meta})),
    )["worker"]
        .clone();
    assert_eq!(w2["metadata"], meta);
    assert_eq!(wez.records()[0]["metadata"], meta);
    drop(p);
    let p = wez.controller();
    assert_eq!(ids(&list(&p)), ids(std::slice::from_ref(&w2)));
    assert_eq!(list(&p)[0]["metadata"], meta);
    let filtered = reply_data(
        &p.control(json!({"operation": "list", "metadata": {"team": "web"}, "state": "running"})),
    );
    assert_eq!(filtered["workers"], json!([]));
    let stopped = stop(&p, &w2["worker_id"]);
    assert_eq!(stopped["metadata"], meta);
    assert_log_private(&p);
}

#[test]
fn a_tab_closed_by_hand_drops_out_and_stopping_it_is_not_an_error() {
    let wez = Wez::new("byhand");
    let gui = wez.gui();
    let p = wez.controller();
    let a = create(&p, "a");
    let b = create(&p, "b");
    let c = create(&p, "c");
    gui.close_by_hand(pane_of(&a));
    assert_eq!(ids(&list(&p)), ids(&[b.clone(), c.clone()]));
    assert_eq!(
        wez.records().len(),
        2,
        "the dropped record is gone from the file"
    );
    p.expect_failure(
        json!({"operation": "stop", "worker_id": a["worker_id"]}),
        "not_found",
    );
    // A pane that vanishes between list and stop: the stop still succeeds.
    gui.close_by_hand(pane_of(&b));
    let stopped = stop(&p, &b["worker_id"]);
    assert_eq!(stopped["state"], "exited");
    assert!(
        stopped["reason"].as_str().unwrap().contains("already gone"),
        "{stopped}"
    );
    assert_eq!(ids(&list(&p)), ids(&[c]));
    // The task of a worker whose tab was closed can have a new one.
    create(&p, "a");
}

#[test]
fn each_gui_keeps_its_own_panes_and_records() {
    let wez = Wez::new("twogui");
    let first = wez.gui();
    let p = wez.controller();
    let a = create(&p, "a");
    let second = wez.gui();
    let b = create(&p, "b");
    // Pane ids are per GUI: both tabs may well carry the same number.
    assert_eq!(pane_of(&a), pane_of(&b));
    assert_eq!(first.panes(), [0, pane_of(&a)]);
    assert_eq!(
        second.panes(),
        [0, pane_of(&b)],
        "new workers go to the newest GUI"
    );
    assert_eq!(ids(&list(&p)), ids(&[a.clone(), b.clone()]));
    // Stopping a worker of the older GUI goes through that GUI's socket.
    stop(&p, &a["worker_id"]);
    assert_eq!(first.panes(), [0]);
    assert_eq!(
        second.panes(),
        [0, pane_of(&b)],
        "the other GUI's pane of the same id is untouched"
    );
    let kill = wez.calls_of("kill-pane").pop().unwrap();
    assert_eq!(socket_of(&kill), first.socket);
    assert_eq!(ids(&list(&p)), ids(&[b]));
}

#[test]
fn a_dead_gui_erases_its_records_a_hung_one_keeps_them() {
    let mut wez = Wez::new("deadhung");
    wez.cli_timeout = "1s";
    let mut first = wez.gui();
    let p = wez.controller();
    let a = create(&p, "a");
    let second = wez.gui();
    let b = create(&p, "b");
    let third = wez.gui();
    let c = create(&p, "c");

    // The first GUI exits (its socket stays behind); the second stops answering.
    first.exit();
    second.hang(true);
    let started = Instant::now();
    let listed = list(&p);
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(15),
        "a hung GUI costs one timeout: {took:?}"
    );
    assert_eq!(
        ids(&listed),
        ids(&[b.clone(), c.clone()]),
        "the dead GUI's record is erased"
    );
    let hung = listed
        .iter()
        .find(|w| w["worker_id"] == b["worker_id"])
        .unwrap();
    assert_eq!(hung["state"], "unknown");
    assert!(
        hung["reason"].as_str().unwrap().contains("does not answer"),
        "{hung}"
    );
    assert_eq!(wez.records().len(), 2);
    // A stop through a hung GUI fails, bounded, and keeps the record: the worker is still ours.
    let started = Instant::now();
    p.expect_failure_saying(
        json!({"operation": "stop", "worker_id": b["worker_id"]}),
        "backend_unavailable",
        &["did not answer"],
    );
    // A few LOCAL_CLI_TIMEOUTs (1 s) at most, never the hung GUI's forever.
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(wez.records().len(), 2);

    // Answering again, its worker is running and stoppable.
    second.hang(false);
    let listed = list(&p);
    assert!(listed.iter().all(|w| w["state"] == "running"), "{listed:?}");
    stop(&p, &b["worker_id"]);
    // A GUI whose socket file is gone is gone too.
    std::fs::remove_file(&third.socket).unwrap();
    assert!(list(&p).is_empty());
    assert!(wez.records().is_empty());
    let _ = a;
}

#[test]
fn the_session_id_is_reported_once_it_changes_from_the_baseline() {
    let wez = Wez::new("session");
    let _gui = wez.gui();
    wez.task("with", Some("old-session"));
    wez.task("without", None);
    let p = wez.controller();
    let with = create(&p, "with");
    let without = create(&p, "without");
    let session = |id: &Value| {
        list(&p)
            .into_iter()
            .find(|w| w["worker_id"] == *id)
            .unwrap()["session_id"]
            .clone()
    };
    assert_eq!(
        session(&with["worker_id"]),
        "",
        "a value there at create is never reported"
    );
    assert_eq!(session(&without["worker_id"]), "");
    wez.task("with", Some("new-session-1"));
    wez.task("without", Some("first-session"));
    assert_eq!(session(&with["worker_id"]), "new-session-1");
    assert_eq!(session(&without["worker_id"]), "first-session");
    // Re-read on every list: back to the baseline, nothing new to report.
    wez.task("with", Some("old-session"));
    assert_eq!(session(&with["worker_id"]), "");
    assert_log_private(&p);
}

#[test]
fn racing_creates_for_one_task_open_one_tab() {
    let wez = Wez::new("race");
    let gui = wez.gui();
    gui.spawn_delay(150);
    let p = wez.controller();
    let addr = p.addr;
    let results: Vec<Value> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let r = crate::support::send_control(
                    addr,
                    json!({"operation": "create", "task": "contested"}),
                );
                r.json()["result"]["task"].clone()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    one_winner(&results);
    assert_eq!(wez.calls_of("spawn").len(), 1);
    assert_eq!(gui.panes().len(), 2);
    assert_eq!(wez.records().len(), 1);
}

#[test]
fn task_names_that_leave_the_task_directory_are_refused_before_anything_runs() {
    let wez = Wez::new("names");
    let _gui = wez.gui();
    let outside = wez.root.join("outside.md");
    std::fs::write(&outside, "---\nclaude_session_id: stolen\n---\n").unwrap();
    std::os::unix::fs::symlink(&outside, wez.tasks.join("linked.md")).unwrap();
    std::os::unix::fs::symlink(wez.root.join("nowhere"), wez.tasks.join("dangling.md")).unwrap();
    let p = wez.controller();
    for bad in [
        "../outside",
        "a/b",
        "..",
        ".hidden",
        "x..y",
        "tab\tname",
        "linked",
        "dangling",
    ] {
        let task = p.control(json!({"operation": "create", "task": bad}));
        let e = control_error(&task, "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request", "{bad}: {task}");
    }
    assert!(wez.calls().is_empty(), "nothing ran: {:?}", wez.calls());
    assert!(wez.records().is_empty());
}

#[test]
fn without_a_gui_it_starts_and_says_why_it_cannot_create() {
    let wez = Wez::new("nogui");
    let p = wez.controller();
    let r = p.get("/readiness");
    assert_eq!(r.status, 503);
    assert!(
        r.text().contains("no WezTerm GUI is running"),
        "{}",
        r.text()
    );
    p.expect_failure_saying(
        json!({"operation": "create", "task": "early"}),
        "backend_unavailable",
        &["no WezTerm GUI is running", "start WezTerm"],
    );
    assert!(list(&p).is_empty());
    assert!(wez.records().is_empty(), "a failed create leaves no record");
    // WezTerm starts later: no restart needed.
    let _gui = wez.gui();
    assert_eq!(p.get("/readiness").status, 200);
    create(&p, "early");
}

#[test]
fn a_corrupt_state_file_stops_startup_and_is_left_untouched() {
    let wez = Wez::new("corrupt");
    let _gui = wez.gui();
    std::fs::create_dir_all(wez.state_file.parent().unwrap()).unwrap();
    let bad = b"{\"version\": 1, \"workers\": [ {\"worker_id\": \"w\"";
    std::fs::write(&wez.state_file, bad).unwrap();
    let (code, out) = wez.prepared(&[]).run_to_exit();
    assert_eq!(code, Some(1), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains("LOCAL_STATE_FILE") && line.contains("left untouched"),
        "{line}"
    );
    assert_eq!(std::fs::read(&wez.state_file).unwrap(), bad);
    assert!(wez.calls().is_empty());
    std::fs::remove_file(&wez.state_file).unwrap();
}

#[test]
fn a_second_controller_on_the_same_state_file_refuses_naming_the_holder() {
    let wez = Wez::new("second");
    let _gui = wez.gui();
    let first = wez.controller();
    let (code, out) = wez.prepared(&[]).run_to_exit();
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("in use by another controller")
            && out.contains(&format!("pid {}", first.pid())),
        "{out}"
    );
    assert_eq!(first.get("/readiness").status, 200, "the holder serves on");
}

#[test]
fn startup_refuses_a_wezterm_that_is_not_an_executable_file_and_a_missing_task_dir() {
    let wez = Wez::new("program");
    let not_exec = wez.root.join("wezterm");
    std::fs::write(&not_exec, "#!/bin/sh\n").unwrap();
    for (program, says) in [
        (wez.root.join("absent/wezterm"), "install WezTerm"),
        (not_exec.clone(), "not executable"),
        (wez.root.clone(), "not a file"),
    ] {
        let flag = format!("-local-wezterm={}", program.display());
        let (code, out) = wez.prepared(&[&flag]).run_to_exit();
        assert_eq!(code, Some(1), "{out}");
        assert!(out.contains("LOCAL_WEZTERM") && out.contains(says), "{out}");
    }
    let (code, out) = wez.prepared(&["-local-wezterm=wezterm"]).run_to_exit();
    assert_eq!(code, Some(2));
    assert!(
        out.contains("absolute path") && out.contains("launchd"),
        "{out}"
    );
    let flag = format!("-local-task-dir={}", wez.root.join("no-tasks").display());
    let (code, out) = wez.prepared(&[&flag]).run_to_exit();
    assert_eq!(code, Some(1));
    assert!(out.contains("LOCAL_TASK_DIR"), "{out}");
    // A warm pool is refused in one line: tabs are not started ahead of their task.
    let (code, out) = wez.prepared(&["-worker-pool=2"]).run_to_exit();
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("pool: the local backend keeps no warm pools"),
        "{out}"
    );
}

#[test]
fn a_hung_wezterm_bounds_create_list_and_stop() {
    let mut wez = Wez::new("hung");
    wez.cli_timeout = "1s";
    let gui = wez.gui();
    let p = wez.controller();
    let w = create(&p, "before");
    gui.hang(true);
    let timed = |what: &str, f: &dyn Fn()| {
        let started = Instant::now();
        f();
        let took = started.elapsed();
        // One or two 1 s timeouts, never the hung GUI's forever.
        assert!(took < Duration::from_secs(15), "{what} took {took:?}");
    };
    timed("create for a task with a worker in the hung GUI", &|| {
        let e = p.expect_failure(
            json!({"operation": "create", "task": "before"}),
            "worker_exists",
        );
        assert_eq!(e["state"], "unknown");
    });
    timed("create", &|| {
        p.expect_failure_saying(
            json!({"operation": "create", "task": "during"}),
            "backend_unavailable",
            &["did not answer"],
        );
    });
    timed("list", &|| {
        let listed = list(&p);
        assert_eq!(listed[0]["state"], "unknown");
    });
    timed("stop", &|| {
        p.expect_failure(
            json!({"operation": "stop", "worker_id": w["worker_id"]}),
            "backend_unavailable",
        );
    });
    // Each CLI call that timed out was killed: no stand-in is left running (a killed process
    // is gone from /proc once it has been reaped, a moment later).
    crate::support::wait_until(
        "no timed-out CLI left running",
        Duration::from_secs(5),
        || running_standins(&gui.socket) == 0,
    );
    assert_eq!(wez.records().len(), 1, "a worker in a hung GUI is kept");
}

/// A GUI hung from the start: create itself times out.
#[test]
fn a_create_into_a_hung_gui_fails_bounded_and_records_nothing() {
    let mut wez = Wez::new("hungcreate");
    wez.cli_timeout = "1s";
    let gui = wez.gui();
    gui.hang(true);
    let p = wez.controller();
    let started = Instant::now();
    p.expect_failure_saying(
        json!({"operation": "create", "task": "t"}),
        "backend_unavailable",
        &["did not answer"],
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(wez.records().is_empty());
    crate::support::wait_until(
        "no timed-out CLI left running",
        Duration::from_secs(5),
        || running_standins(&gui.socket) == 0,
    );
}

/// Stand-in processes still running for `socket`, from /proc.
fn running_standins(socket: &std::path::Path) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let needle = format!("WEZTERM_UNIX_SOCKET={}", socket.display());
    entries
        .flatten()
        .filter(|e| {
            std::fs::read(e.path().join("environ"))
                .map(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
                .unwrap_or(false)
                && std::fs::read_to_string(e.path().join("stat"))
                    .map(|s| !s.contains(") Z"))
                    .unwrap_or(false)
        })
        .count()
}

/// SIGKILL while creates and stops are saving the state file, at many points: every restart
/// finds a readable file, no task has two workers, everything listed stops, and a tab opened
/// by a create the crash interrupted is never silent — the restart warns about each.
#[test]
fn sigkill_while_saving_leaves_a_readable_file_and_no_silent_tab() {
    let wez = Wez::new("sigkill");
    let gui = wez.gui();
    gui.spawn_delay(20);
    let mut warned = 0;
    for (round, delay_ms) in [0u64, 10, 25, 40, 60, 90, 130, 200].into_iter().enumerate() {
        let mut p = wez.controller();
        warned += p
            .log_text()
            .matches("was being created when the controller stopped")
            .count();
        let addr = p.addr;
        let tasks: Vec<String> = (0..4).map(|j| format!("round {round} task {j}")).collect();
        let threads: Vec<_> = tasks
            .into_iter()
            .map(|task| {
                std::thread::spawn(move || {
                    let _ = std::panic::catch_unwind(|| {
                        crate::support::send_control(
                            addr,
                            json!({"operation": "create", "task": task}),
                        )
                    });
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(delay_ms));
        p.kill();
        for t in threads {
            let _ = t.join();
        }
    }
    let p = wez.controller();
    warned += p
        .log_text()
        .matches("was being created when the controller stopped")
        .count();
    let workers = list(&p);
    let mut tasks = HashSet::new();
    for w in &workers {
        assert!(
            tasks.insert(w["task"].as_str().unwrap().to_string()),
            "two workers for a task"
        );
    }
    for w in &workers {
        stop(&p, &w["worker_id"]);
    }
    let orphans = gui.panes().len() - 1;
    eprintln!(
        "after 8 SIGKILLs: {} workers listed and stopped, {orphans} unrecorded tab(s), {warned} warning(s)",
        workers.len()
    );
    assert!(
        orphans <= warned,
        "{orphans} tabs left without a warning ({warned})"
    );
}

#[test]
fn check_finds_the_program_the_state_file_and_the_gui() {
    let wez = Wez::new("check");
    let (code, out, err) = crate::cli_client::check(&wez.args(&[]), &with_env(&wez));
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("backend local: configured; no WezTerm GUI is running"),
        "{out}"
    );
    let gui = wez.gui();
    let (code, out, _) = crate::cli_client::check(&wez.args(&[]), &with_env(&wez));
    assert_eq!(code, Some(0));
    assert!(
        out.contains(&format!(
            "WezTerm GUI {} answers (1 pane(s))",
            gui.socket.display()
        )),
        "{out}"
    );
    // check asks WezTerm itself: a program that is not WezTerm fails it (it passed before).
    let (code, _, err) =
        crate::cli_client::check(&wez.args(&["-local-wezterm=/bin/false"]), &with_env(&wez));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("WezTerm GUI") && err.contains("wezterm failed"),
        "{err}"
    );
    // Beside a running controller (which holds the state file's lock), check still works.
    let p = wez.controller();
    let (code, out, err) = crate::cli_client::check(&wez.args(&[]), &with_env(&wez));
    assert_eq!(code, Some(0), "{out}{err}");
    // A stopped GUI: /readiness asks it and says not ready (it said ready before).
    assert_eq!(p.get("/readiness").status, 200);
    gui.hang(true);
    let r = p.get("/readiness");
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("did not answer"), "{}", r.text());
    gui.hang(false);
    drop(p);
    let flag = format!("-local-wezterm={}", wez.root.join("absent").display());
    let (code, _, err) = crate::cli_client::check(&wez.args(&[&flag]), &with_env(&wez));
    assert_eq!(code, Some(1));
    assert!(err.contains("LOCAL_WEZTERM"), "{err}");
}

fn with_env(wez: &Wez) -> Vec<(&'static str, &str)> {
    let runtime = wez.runtime.parent().unwrap().to_str().unwrap();
    let mut env = crate::cli_client::CHECK_ENV.to_vec();
    env.push(("XDG_RUNTIME_DIR", runtime));
    env
}

/// Lifetime and output of a tab: a TTL is kept in the state file and listed as `expires_at`;
/// the reaper closes the tab after it (also after a restart); `logs` is the pane's text
/// (scrollback and screen, the unwritten rows left out), the last lines asked for.
#[test]
fn tabs_expire_and_show_their_output() {
    let wez = Wez::new("ttl");
    let gui = wez.gui();
    wez.task("short", None);
    wez.task("chatty", None);
    let mut p = Proc::launch("local-ttl", wez.args(&["-reap-interval=1s"]), wez.env());
    // Created by a stream: the local backend's steps, then the worker.
    let (_, events) = crate::streaming::stream(
        p.addr,
        "SendStreamingMessage",
        crate::streaming::control_message(
            json!({"operation": "create", "task": "short", "ttl": "3s"}),
        ),
    );
    let steps = crate::streaming::steps(&events);
    assert_eq!(steps.first(), Some(&"opening a tab in WezTerm"));
    assert!(steps[1].starts_with("tab opened (pane "), "{steps:?}");
    let short = crate::streaming::result_data(&events);
    let expires = short["worker"]["expires_at"].as_str().unwrap().to_string();
    assert!(!expires.is_empty());
    let chatty = create(&p, "chatty");
    assert_eq!(chatty["expires_at"], "");
    let record = wez
        .records()
        .into_iter()
        .find(|r| r["worker_id"] == short["worker"]["worker_id"])
        .expect("a record");
    assert_eq!(
        a2a_worker_controller::time::rfc3339_secs(record["expires_at"].as_u64().unwrap()),
        expires,
        "the expiry lives in the state file"
    );

    // Output: 40 lines, more than the 24-row screen holds.
    let pane = pane_of(&chatty);
    // WezTerm keeps the trailing spaces a program wrote and leaves its colours out.
    let mut printed: Vec<String> = (1..=40).map(|i| format!("step {i} done")).collect();
    printed[38] = "step 39 done  ".into();
    printed[37] = "\u{1b}[31mstep 38\u{1b}[0m done".into();
    gui.print(pane, &printed);
    let logs = reply_data(
        &p.control(json!({"operation": "logs", "worker_id": chatty["worker_id"], "tail": 30})),
    );
    let want: String = printed[10..]
        .iter()
        .map(|l| format!("{}\n", l.replace("\u{1b}[31m", "").replace("\u{1b}[0m", "")))
        .collect();
    assert_eq!(logs["text"], want);
    assert_eq!(logs["truncated"], false);
    let few = reply_data(
        &p.control(json!({"operation": "logs", "worker_id": chatty["worker_id"], "tail": 2})),
    );
    assert_eq!(few["text"], "step 39 done  \nstep 40 done\n");
    p.expect_failure(
        json!({"operation": "logs", "worker_id": "000000000000"}),
        "not_found",
    );
    assert!(
        !p.log_text().contains("step 39 done"),
        "logs' text is never logged"
    );

    // The reaper closes the expiring tab, across a restart, and leaves the other.
    p.restart();
    let deadline = Instant::now() + Duration::from_secs(15);
    while list(&p).len() != 1 {
        assert!(Instant::now() < deadline, "not reaped: {:?}", list(&p));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(list(&p)[0]["worker_id"], chatty["worker_id"]);
    assert!(
        !gui.panes().contains(&pane_of(&short["worker"])),
        "its tab is closed"
    );
    assert!(p.log_text().contains("reaper: stopped worker"));
    assert_log_private(&p);
}

/// Issue 19, defect 2: a program that ended while WezTerm holds its pane open
/// (`exit_behavior = "CloseOnCleanExit"` after a failure, or `"Hold"`), or that could not
/// start, is listed `exited` with the reason the pane shows, not `running`; stop closes the
/// pane. A LOCAL_COMMAND whose program is not an absolute path to an executable stops
/// startup naming the setting. LOCAL_WORKSPACE goes to spawn as `--workspace`.
#[test]
fn ended_programs_are_exited_and_bad_commands_are_refused() {
    let wez = Wez::new("ended");
    let gui = wez.gui();
    wez.task("fails", None);
    wez.task("held", None);
    wez.task("missing", None);
    let p = Proc::launch(
        "local-ended",
        wez.args(&["-local-workspace=agents"]),
        wez.env(),
    );
    let w = create(&p, "fails");
    let spawn = &wez.calls_of("spawn")[0];
    let argv: Vec<&str> = spawn["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let at = argv
        .iter()
        .position(|a| *a == "--workspace")
        .expect("--workspace");
    assert_eq!(argv[at + 1], "agents");
    gui.program_exits(pane_of(&w), 3, "CloseOnCleanExit");
    let h = create(&p, "held");
    gui.program_exits(pane_of(&h), 0, "Hold");
    let listed = list(&p);
    let by_task = |t: &str| listed.iter().find(|x| x["task"] == t).unwrap().clone();
    assert_eq!(by_task("fails")["state"], "exited", "{listed:?}");
    assert_eq!(by_task("fails")["reason"], "exited with code 3");
    assert_eq!(by_task("held")["state"], "exited");
    // The program is deleted after startup: WezTerm still opens a pane, holding its error.
    std::fs::remove_file(wez.agent()).unwrap();
    let m = create(&p, "missing");
    let listed = list(&p);
    let missing = listed.iter().find(|x| x["task"] == "missing").unwrap();
    assert_eq!(missing["state"], "exited", "{missing}");
    assert!(
        missing["reason"]
            .as_str()
            .unwrap()
            .starts_with("could not start: Unable to spawn"),
        "{missing}"
    );
    // Stop closes the held-open pane.
    stop(&p, &w["worker_id"]);
    assert!(!gui.panes().contains(&pane_of(&w)));
    stop(&p, &m["worker_id"]);
    drop(p);
    // Startup refuses a LOCAL_COMMAND it could never run, naming the setting.
    for (command, says) in [
        (
            r#"-local-command=["claude", "{task_file}"]"#.to_string(),
            "not an absolute path",
        ),
        (
            format!(
                r#"-local-command=["{}", "{{task_file}}"]"#,
                wez.agent().display()
            ),
            "cannot be used",
        ),
    ] {
        let (code, out) = wez.prepared(&[&command]).run_to_exit();
        assert_eq!(code, Some(1), "{out}");
        assert!(out.contains("LOCAL_COMMAND") && out.contains(says), "{out}");
    }
}

/// Issue 19, defect 1: a socket path without a pid (a mux server's `sock`, the GUI's own
/// symlink) may be bound again by a later server whose pane ids restart at 0. A symlink is
/// resolved to the `gui-sock-<pid>` it names before it is recorded, so the record dies with
/// that GUI; a path that still names no instance is never recorded; a record of one (an
/// earlier version wrote them) is listed `unknown` and never acted on: stop closes nothing.
#[test]
fn a_socket_that_names_no_server_is_never_trusted() {
    let wez = Wez::new("nopid");
    let mut gui = wez.gui();
    wez.task("linked", None);
    wez.task("muxed", None);
    // The GUI's symlink, as a real GUI makes it.
    let link = wez.runtime.join("x11-:0-org.wezfurlong.wezterm");
    std::os::unix::fs::symlink(&gui.socket, &link).unwrap();
    let mut env = wez.env();
    env.push(("WEZTERM_UNIX_SOCKET".into(), link.display().to_string()));
    let p = Proc::launch("local-nopid", wez.args(&[]), env.clone());
    let w = create(&p, "linked");
    assert_eq!(
        wez.records()[0]["gui_socket"],
        json!(gui.socket),
        "resolved"
    );
    // That GUI dies; a new one takes the symlink and has panes with the same ids.
    gui.exit();
    let newer = wez.gui();
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&newer.socket, &link).unwrap();
    while newer.panes().len() <= pane_of(&w) as usize {
        newer.print(0, &[]);
        let mut state = newer.state();
        let next = state["next_id"].as_u64().unwrap();
        state["panes"].as_array_mut().unwrap().push(json!({"window_id": next, "tab_id": next,
            "pane_id": next, "workspace": "default", "cwd": "/home/operator", "argv": ["/bin/zsh"]}));
        state["next_id"] = json!(next + 1);
        std::fs::write(
            format!("{}.standin.json", newer.socket.display()),
            state.to_string(),
        )
        .unwrap();
    }
    assert!(
        list(&p).is_empty(),
        "the old record is dropped, not re-bound to the newcomer"
    );
    p.expect_failure(
        json!({"operation": "stop", "worker_id": w["worker_id"]}),
        "not_found",
    );
    assert!(
        newer.panes().contains(&pane_of(&w)),
        "the newcomer's pane is untouched"
    );
    drop(p);

    // A mux server's `sock`: without its pid file nothing is recorded for it.
    let sock = wez.runtime.join("sock");
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let mux_state = |next: u64| {
        // A fresh server: pane ids from 0, the operator's own tabs first.
        let panes: Vec<Value> = (0..next)
            .map(|i| {
                json!({"window_id": i, "tab_id": i, "pane_id": i, "workspace": "default",
                            "cwd": "/home/operator", "argv": ["/bin/zsh"]})
            })
            .collect();
        std::fs::write(
            format!("{}.standin.json", sock.display()),
            json!({"next_id": next, "panes": panes}).to_string(),
        )
        .unwrap();
    };
    mux_state(1);
    let mut env = wez.env();
    env.push(("WEZTERM_UNIX_SOCKET".into(), sock.display().to_string()));
    let p = Proc::launch("local-nopid", wez.args(&[]), env.clone());
    p.expect_failure_saying(
        json!({"operation": "create", "task": "muxed"}),
        "backend_unavailable",
        &["names no server instance"],
    );
    // With the pid file `wezterm-mux-server --daemonize` writes, the server is named by it.
    let spawn_server = || {
        std::process::Command::new("sleep")
            .arg("3600")
            .spawn()
            .unwrap()
    };
    let mut server = spawn_server();
    std::fs::write(wez.runtime.join("pid"), server.id().to_string()).unwrap();
    let m = create(&p, "muxed");
    let record = wez
        .records()
        .into_iter()
        .find(|r| r["task"] == "muxed")
        .unwrap();
    assert!(
        record["gui_instance"]
            .as_str()
            .unwrap()
            .starts_with(&format!("pid {}", server.id())),
        "{record}"
    );
    // The mux server restarts on the same path (same socket file): its pane ids start again,
    // and the operator's tabs take the worker's id. The record is dropped, never re-bound.
    let _ = server.kill();
    let _ = server.wait();
    let mut restarted = spawn_server();
    std::fs::write(wez.runtime.join("pid"), restarted.id().to_string()).unwrap();
    mux_state(pane_of(&m) + 1);
    assert!(
        !list(&p).iter().any(|w| w["task"] == "muxed"),
        "the restarted server's pane is not the worker"
    );
    p.expect_failure(
        json!({"operation": "stop", "worker_id": m["worker_id"]}),
        "not_found",
    );
    let state: Value =
        serde_json::from_slice(&std::fs::read(format!("{}.standin.json", sock.display())).unwrap())
            .unwrap();
    assert_eq!(
        state["panes"].as_array().unwrap().len() as u64,
        pane_of(&m) + 1,
        "the operator's tabs are untouched"
    );
    let _ = restarted.kill();
    let _ = restarted.wait();
    std::fs::remove_file(wez.runtime.join("pid")).unwrap();
    drop(p);
    // A record of one, as an earlier version wrote it, on the operator's own pane 0.
    let record = json!({"version": 1, "workers": [{"worker_id": "legacy1", "task": "muxed",
        "pane_id": 0, "gui_socket": sock, "baseline_session_id": "",
        "created_at": "2026-12-01T00:00:00Z"}]});
    std::fs::write(&wez.state_file, record.to_string()).unwrap();
    let kills_before = wez.calls_of("kill-pane").len();
    let p = wez.controller();
    let listed = list(&p);
    assert_eq!(listed[0]["state"], "unknown", "{listed:?}");
    assert!(
        listed[0]["reason"]
            .as_str()
            .unwrap()
            .contains("names no server instance"),
        "{listed:?}"
    );
    let stopped = stop(&p, &json!("legacy1"));
    assert!(
        stopped["reason"]
            .as_str()
            .unwrap()
            .contains("without closing pane 0"),
        "{stopped}"
    );
    assert_eq!(
        wez.calls_of("kill-pane").len(),
        kills_before,
        "nothing was closed"
    );
}

/// Issue 19, defect 3: a spawn the GUI does not answer in time may still open its tab when
/// the GUI catches up. It is not forgotten: its record stays (`starting`, "being opened"), a
/// second create for the task says so instead of opening a second tab, and the late tab is
/// recorded when WezTerm answers — or closed, if the worker was stopped meanwhile. A GUI that
/// does not answer at all gets no spawn queued: create asks it first.
#[test]
fn a_late_spawn_is_adopted_or_closed_never_doubled() {
    let mut wez = Wez::new("late");
    wez.cli_timeout = "1s";
    let gui = wez.gui();
    wez.task("late", None);
    wez.task("cancelled", None);
    let p = wez.controller();
    // The tab opens 10 s after it is asked for: a create bounded by one 1 s timeout ends long
    // before, also on a busy machine.
    gui.spawn_delay(10_000);
    let started = Instant::now();
    p.expect_failure_saying(
        json!({"operation": "create", "task": "late"}),
        "backend_unavailable",
        &["did not answer", "its tab may still open"],
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "bounded by one timeout"
    );
    let w = list(&p).into_iter().find(|w| w["task"] == "late").unwrap();
    assert_eq!(w["state"], "starting", "{w}");
    assert!(
        w["reason"].as_str().unwrap().contains("being opened"),
        "{w}"
    );
    let e = p.expect_failure(
        json!({"operation": "create", "task": "late"}),
        "worker_exists",
    );
    assert_eq!(e["state"], "starting");
    assert_eq!(
        wez.calls_of("spawn").len(),
        1,
        "no second tab was asked for"
    );
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let w = list(&p).into_iter().find(|w| w["task"] == "late").unwrap();
        if w["state"] == "running" {
            assert!(gui.panes().contains(&pane_of(&w)));
            break;
        }
        assert!(
            Instant::now() < until,
            "the late tab was never recorded: {w}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        gui.panes().len(),
        2,
        "the operator's pane and one tab for the task"
    );

    // Stopped before its tab opened: the tab is closed when it does.
    p.expect_failure(
        json!({"operation": "create", "task": "cancelled"}),
        "backend_unavailable",
    );
    let c = list(&p)
        .into_iter()
        .find(|w| w["task"] == "cancelled")
        .unwrap();
    let stopped = stop(&p, &c["worker_id"]);
    assert_eq!(stopped["state"], "stopping", "{stopped}");
    let until = Instant::now() + Duration::from_secs(30);
    while list(&p).iter().any(|w| w["task"] == "cancelled") {
        assert!(Instant::now() < until, "the cancelled worker stayed");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        gui.panes().len(),
        2,
        "the late tab of the stopped worker was closed"
    );
    assert!(p.log_text().contains("was closed"), "{}", p.log_text());

    // A GUI that answers nothing: no spawn is queued at all.
    gui.spawn_delay(0);
    gui.hang(true);
    wez.task("silent", None);
    let spawns = wez.calls_of("spawn").len();
    p.expect_failure(
        json!({"operation": "create", "task": "silent"}),
        "backend_unavailable",
    );
    assert_eq!(
        wez.calls_of("spawn").len(),
        spawns,
        "nothing queued in a silent GUI"
    );
    gui.hang(false);
}

/// Two GUIs hang: a list asks them at the same time (one timeout, not two), and a stop, a
/// `logs` and a create on the GUI that answers never wait behind the list, nor for the hung
/// GUIs (the state file's mutex is never held across a CLI call).
#[test]
fn a_hung_gui_holds_up_no_other_gui() {
    let mut wez = Wez::new("hungother");
    // One timeout is 3 s and two in a row would be 6: the bounds below sit between, with
    // seconds to spare on a busy machine.
    wez.cli_timeout = "3s";
    let first = wez.gui();
    let p = wez.controller();
    let a = create(&p, "a");
    let second = wez.gui();
    let b = create(&p, "b");
    let _third = wez.gui();
    let c = create(&p, "c");
    first.hang(true);
    second.hang(true);

    let started = Instant::now();
    let listed = list(&p);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(5500),
        "two hung GUIs are asked at once, one timeout (3 s) in all: {took:?}"
    );
    let state = |w: &Value| {
        listed
            .iter()
            .find(|l| l["worker_id"] == w["worker_id"])
            .map(|l| l["state"].clone())
    };
    assert_eq!(state(&a), Some(json!("unknown")));
    assert_eq!(state(&b), Some(json!("unknown")));
    assert_eq!(state(&c), Some(json!("running")));

    std::thread::scope(|s| {
        let slow = s.spawn(|| list(&p));
        std::thread::sleep(Duration::from_millis(300));
        let timed = |what: &str, f: &dyn Fn()| {
            let started = Instant::now();
            f();
            let took = started.elapsed();
            assert!(
                took < Duration::from_millis(2500),
                "{what} waited for a hung GUI: {took:?}"
            );
        };
        timed("logs", &|| {
            reply_data(
                &p.control(json!({"operation": "logs", "worker_id": c["worker_id"], "tail": 5})),
            );
        });
        timed("a create into the GUI that answers", &|| {
            create(&p, "d");
        });
        timed("stop", &|| {
            stop(&p, &c["worker_id"]);
        });
        let listed = slow.join().unwrap();
        assert_eq!(listed.len(), 3, "{listed:?}");
    });
    let kept: HashSet<String> = wez
        .records()
        .iter()
        .map(|r| r["task"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        kept,
        ["a", "b", "d"].map(String::from).into(),
        "the list that ran beside them wrote back only what it found gone"
    );
    first.hang(false);
    second.hang(false);
}

/// The stand-in's `get-text` against the real CLI's answers for the same pane (recordings
/// `gui/05-get-text-default`, `07-get-text-start-5`, `08-get-text-escapes`: 40 lines with
/// two trailing spaces, a coloured line, the cursor's empty row, on a 24-row pane).
#[test]
fn the_standin_answers_get_text_as_the_real_cli_did() {
    let wez = Wez::new("gettext");
    let gui = wez.gui();
    let mut printed: Vec<String> = (1..=40).map(|i| format!("line {i}  ")).collect();
    printed.push("\u{1b}[31mred\u{1b}[39m end".into());
    printed.push(String::new());
    gui.print(0, &printed);
    let get_text = |extra: &[&str]| {
        let out = std::process::Command::new(standin())
            .args(["cli", "--no-auto-start", "get-text", "--pane-id", "0"])
            .args(extra)
            .env("WEZTERM_UNIX_SOCKET", &gui.socket)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let rows = |from: u32| -> String {
        let mut t: String = (from..=40).map(|i| format!("line {i}  \n")).collect();
        t.push_str("red end\n\n");
        t
    };
    assert_eq!(
        get_text(&[]),
        rows(17),
        "rec 05: the screen and two more rows"
    );
    assert_eq!(get_text(&["--start-line", "-5"]), rows(12), "rec 07");
    let mut escaped: String = (17..=40).map(|i| format!("line {i}\r\n")).collect();
    escaped.push_str("\u{1b}[31mred\u{1b}[39m end\r\n\r\n\n");
    assert_eq!(get_text(&["--escapes"]), escaped, "rec 08");
}

/// Issue 21 on the local backend (no event stream: the reconciliation, once a second while
/// someone watches): a tab closed by hand is `removed`, a program that exits under
/// `exit_behavior = "Hold"` is `changed` to exited with its exit code, a stop is `removed`
/// with the caller's reason — each within about a second (measured).
#[test]
fn a_watch_follows_the_tabs() {
    use crate::watch::{kind_and_task, Watch};
    let wez = Wez::new("watch");
    let gui = wez.gui();
    let p = wez.controller();
    let a = create(&p, "a");
    let b = create(&p, "b");
    let c = create(&p, "c");
    let mut w = Watch::start(p.addr, json!({"operation": "watch"}));
    w.task_id();
    assert_eq!(w.snapshot().len(), 3);
    let closed = Instant::now();
    gui.close_by_hand(pane_of(&a));
    let e = w.event().unwrap();
    let latency = closed.elapsed();
    crate::watch::assert_removed(&e, "a", "outside this controller");
    eprintln!(
        "WATCH LATENCY local: tab closed to event {} ms",
        latency.as_millis()
    );
    // Bounded by the reconciliation (1 s) and a list, with room for a busy machine: the
    // figure itself is scripts/bench.sh's.
    assert!(latency < Duration::from_secs(6), "{latency:?}");
    gui.program_exits(pane_of(&b), 3, "Hold");
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("changed".into(), "b".into()));
    assert_eq!(e["worker"]["state"], "exited");
    assert!(e["reason"].as_str().unwrap().contains("3"), "{e}");
    stop(&p, &c["worker_id"]);
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("removed".into(), "c".into()));
    assert_eq!(e["reason"], "stopped by a caller");
}

/// Benchmark, not a timed test (scripts/bench.sh runs it in release): how soon a watcher hears
/// a tab closed by hand on the local stand-in. WezTerm has no event stream, so the baseline is
/// the reconciliation's period (`control::watch::INTERVAL`); tabs are closed at phases spread
/// over it, p50 of BENCH_WATCH_ROUNDS.
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn local_bench_watch_latency() {
    use crate::watch::Watch;
    use a2a_worker_controller::control::watch::INTERVAL;
    let rounds = crate::support::rounds("BENCH_WATCH_ROUNDS", 5);
    let wez = Wez::new("bench-watch");
    let gui = wez.gui();
    let p = wez.controller();
    let mut w = Watch::start(p.addr, json!({"operation": "watch"}));
    w.task_id();
    assert!(w.snapshot().is_empty());
    let mut heard = Vec::new();
    for i in 0..rounds {
        let task = format!("watched {i}");
        let worker = create(&p, &task);
        assert_eq!(w.next_of("added")["worker"]["task"], task.as_str());
        // A phase of the period, different each round.
        std::thread::sleep(INTERVAL.mul_f64((i as f64 * 0.37) % 1.0));
        let closed = Instant::now();
        gui.close_by_hand(pane_of(&worker));
        let e = w.next_of("removed");
        heard.push(closed.elapsed());
        crate::watch::assert_removed(&e, &task, "outside this controller");
    }
    let v = crate::support::p50(heard);
    println!(
        "ROW|local stand-in, a tab closed by hand → the watcher's event p50 ({rounds} rounds): controller ÷ the reconciliation period|×{:.2} ({:.0} vs {} ms)|≤ 1 s + a list",
        v.as_secs_f64() / INTERVAL.as_secs_f64(),
        v.as_secs_f64() * 1000.0,
        INTERVAL.as_millis()
    );
}

/// Callers and scopes on the local backend: one task name in two scopes is two tabs,
/// each with its own task file (`LOCAL_TASK_DIR/<scope>/` for a scope other than the admin's),
/// the scope kept in the state file; each caller lists only its own; another scope's worker is
/// `not_found`; a restart reads the scopes back.
#[test]
fn scopes_live_in_the_state_file_and_each_caller_sees_its_own() {
    use crate::callers::{callers_file, control_as, create_as, workers_of, ALICE, BOB};
    let wez = Wez::new("scopes");
    let _gui = wez.gui();
    let file = callers_file("local");
    let callers = format!("-a2a-callers-file={}", file.display());
    let mut p = wez.prepared(&[&callers]);
    p.start_now();
    let create = |token: &str| create_as(p.addr, token, "build-42");
    let a = create(ALICE);
    let b = create(BOB);
    let admin = create(crate::support::TOKEN);
    assert_ne!(a["pane_id"], b["pane_id"], "two tabs");
    // Each scope's task file in its own directory; the admin's where it always was.
    let files: Vec<String> = wez
        .calls_of("spawn")
        .iter()
        .map(|c| c.to_string())
        .collect();
    let dir_a = wez.tasks.join("team-a");
    assert!(dir_a.is_dir(), "LOCAL_TASK_DIR/team-a is made");
    assert_eq!(
        fs_mode(&dir_a) & 0o777,
        0o700,
        "the scope's task directory is private"
    );
    for (dir, n) in [(wez.tasks.join("team-a"), 1), (wez.tasks.join("team-b"), 1)] {
        let named = files
            .iter()
            .filter(|c| c.contains(&format!("{}/build-42.md", dir.display())))
            .count();
        assert_eq!(named, n, "{files:?}");
    }
    let scopes: Vec<String> = wez
        .records()
        .iter()
        .map(|r| r["scope"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(scopes.len(), 3);
    assert!(scopes.contains(&"team-a".into()) && scopes.contains(&"admin".into()));
    let addr = p.addr;
    let only = |token: &str| ids(&workers_of(addr, token));
    assert_eq!(only(ALICE), ids(std::slice::from_ref(&a)));
    assert_eq!(only(BOB), ids(std::slice::from_ref(&b)));
    assert_eq!(only(crate::support::TOKEN).len(), 3);
    let stop = control_as(
        p.addr,
        BOB,
        json!({"operation": "stop", "worker_id": a["worker_id"]}),
    );
    assert_eq!(
        control_error(&stop, "TASK_STATE_FAILED")["code"],
        "not_found"
    );
    p.restart();
    assert_eq!(
        only(ALICE),
        ids(std::slice::from_ref(&a)),
        "after a restart"
    );
    assert!(only(crate::support::TOKEN).contains(admin["worker_id"].as_str().unwrap()));
}

fn fs_mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode()
}

#[test]
fn templates_start_their_own_programs_and_a_task_directory_outlives_its_tab() {
    let wez = Wez::new("templates");
    let _gui = wez.gui();
    let reviewer = wez.root.join("agent/bin/reviewer");
    std::fs::write(&reviewer, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&reviewer, std::fs::Permissions::from_mode(0o755)).unwrap();
    let spaces = wez.root.join("workspaces");
    let file = wez.root.join("templates.json");
    std::fs::write(
        &file,
        json!({"templates": {
            "reviewer": {"command": [reviewer.display().to_string(), "--review", "{task}"],
                         "env": {"REVIEW_DEPTH": "deep"}},
            "coder": {"workspace": {"size": "1Gi"}}
        }})
        .to_string(),
    )
    .unwrap();
    let mut p = wez.prepared(&[
        &format!("-worker-templates-file={}", file.display()),
        &format!("-local-workspaces-dir={}", spaces.display()),
    ]);
    p.start_now();

    // The reviewer's own program, its variable set through /usr/bin/env, in the task directory.
    let r = reply_data(
        &p.control(json!({"operation": "create", "task": "pr 42", "template": "reviewer"})),
    );
    assert_eq!(r["worker"]["template"], "reviewer");
    let argv = wez.calls_of("spawn")[0]["argv"].as_array().unwrap().clone();
    let after: Vec<Value> = argv
        .iter()
        .skip_while(|a| *a != "--")
        .skip(1)
        .cloned()
        .collect();
    assert_eq!(
        after,
        [
            json!("/usr/bin/env"),
            json!("REVIEW_DEPTH=deep"),
            json!(reviewer.display().to_string()),
            json!("--review"),
            json!("pr 42")
        ]
    );
    assert_eq!(list(&p)[0]["template"], "reviewer");

    // The coder's tab starts in the task's workspace, which the next tab of the task finds
    // as the first one left it.
    let c = reply_data(
        &p.control(json!({"operation": "create", "task": "fix it", "template": "coder"})),
    );
    let spawn = &wez.calls_of("spawn")[1]["argv"];
    let args = spawn.as_array().unwrap();
    let cwd = args[args.iter().position(|a| a == "--cwd").unwrap() + 1]
        .as_str()
        .unwrap()
        .to_string();
    assert!(cwd.starts_with(&spaces.display().to_string()), "{cwd}");
    assert!(
        args.contains(&json!(format!("A2A_WORKSPACE={cwd}"))),
        "{spawn}"
    );
    std::fs::write(std::path::Path::new(&cwd).join("notes"), "half done").unwrap();
    let listed = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(listed["workspaces"][0]["task"], "fix it");
    assert_eq!(listed["workspaces"][0]["in_use"], true);
    let e = p.expect_failure(
        json!({"operation": "delete_workspace", "task": "fix it"}),
        "worker_exists",
    );
    assert_eq!(e["worker_id"], c["worker"]["worker_id"]);
    stop(&p, &c["worker"]["worker_id"]);
    // A restart changes nothing: the directory and its record are the truth.
    p.restart();
    let again = reply_data(
        &p.control(json!({"operation": "create", "task": "fix it", "template": "coder"})),
    );
    let spawn = &wez.calls_of("spawn")[2]["argv"];
    assert!(spawn.as_array().unwrap().contains(&json!(cwd)), "{spawn}");
    assert_eq!(
        std::fs::read_to_string(std::path::Path::new(&cwd).join("notes")).unwrap(),
        "half done"
    );
    let done = reply_data(&p.control(json!({"operation": "stop", "worker_id": again["worker"]["worker_id"], "workspace": "delete"})));
    assert_eq!(done["workspace"]["task"], "fix it");
    assert!(
        !std::path::Path::new(&cwd).exists(),
        "deleted with its worker"
    );
    p.expect_failure(
        json!({"operation": "delete_workspace", "task": "fix it"}),
        "not_found",
    );
}

#[test]
fn a_fenced_tab_holds_its_placeholder_and_check_says_its_allowlist_is_advisory() {
    let wez = Wez::new("fenced");
    let _gui = wez.gui();
    let file = wez.root.join("templates.json");
    std::fs::write(
        &file,
        json!({"templates": {"sealed": {"egress": ["api.github.com:443"]}}}).to_string(),
    )
    .unwrap();
    let templates = format!("-worker-templates-file={}", file.display());
    // Without the proxy's URL, a fenced template stops startup in one line.
    let (code, log) = wez.prepared(&[&templates]).run_to_exit();
    assert_ne!(code, Some(0));
    assert!(
        log.contains("template \"sealed\": egress: api.github.com:443 needs the egress proxy: set EGRESS_PROXY_URL"),
        "{log}"
    );
    let proxy = "-egress-proxy-url=http://127.0.0.1:8790";
    let mut p = wez.prepared(&[&templates, proxy]);
    p.start_now();
    let w = reply_data(
        &p.control(json!({"operation": "create", "task": "sealed task", "template": "sealed"})),
    );
    let worker_id = w["worker"]["worker_id"].as_str().unwrap();
    let argv = wez.calls_of("spawn")[0]["argv"].as_array().unwrap().clone();
    let after: Vec<&str> = argv
        .iter()
        .skip_while(|a| *a != "--")
        .skip(1)
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&after[..3], ["/usr/bin/env", "-u", "ANTHROPIC_API_KEY"]);
    let placeholder = after
        .iter()
        .find_map(|a| a.strip_prefix("ANTHROPIC_AUTH_TOKEN="))
        .expect("the tab's model token");
    assert!(
        placeholder.starts_with(&format!("a2a-egress-v1.{worker_id}.")),
        "{placeholder}"
    );
    assert!(after.contains(&"ANTHROPIC_BASE_URL=http://127.0.0.1:8790/model"));
    assert!(after.iter().any(|a| a.starts_with("HTTPS_PROXY=http://")));
    // `check` says what a tab's fence is worth.
    let args = wez.args(&[&templates, proxy]);
    let (code, out, err) = crate::cli_client::check(&args, &with_env(&wez));
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("egress api.github.com:443 is advisory on local tabs"),
        "{out}"
    );
}
