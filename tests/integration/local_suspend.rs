//! Suspend, resume and renew of local tabs on the WezTerm stand-in (`local_support`): the tab
//! closed and the record kept with its session, listed `suspended` by a restarted controller,
//! resumed in a new tab running the template's `resume_command` with `{session_id}` filled in;
//! the refusals when there is no `resume_command` or no session; a renew kept in the state
//! file.

use serde_json::{json, Value};

use crate::local_support::*;
use crate::support::{control_error, reply_data, Controls, Proc};

fn templates(wez: &Wez) -> std::path::PathBuf {
    let file = wez.root.join("templates.json");
    let agent = wez.agent().display().to_string();
    std::fs::write(
        &file,
        json!({"templates": {
            "napper": {"resume_command": [agent, "--resume", "{session_id}", "--task-file", "{task_file}"]}
        }})
        .to_string(),
    )
    .unwrap();
    file
}

fn started(wez: &Wez, file: &std::path::Path) -> Proc {
    let mut p = wez.prepared(&[&format!("-worker-templates-file={}", file.display())]);
    p.start_now();
    p
}

fn create(p: &Proc, task: &str, template: &str) -> Value {
    reply_data(&p.control(json!({"operation": "create", "task": task, "template": template})))
        ["worker"]
        .clone()
}

fn listed(p: &Proc, id: &Value) -> Value {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"] == *id)
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn a_suspended_tab_is_closed_kept_and_resumed_with_its_session() {
    let wez = Wez::new("suspend");
    let gui = wez.gui();
    wez.task("nap", Some("before"));
    let file = templates(&wez);
    let mut p = started(&wez, &file);
    let w = create(&p, "nap", "napper");
    let id = w["worker_id"].clone();
    let pane = pane_of(&w);
    // The agent wrote its session into the task file.
    wez.task("nap", Some("sess-42"));

    let s = reply_data(&p.control(json!({"operation": "suspend", "worker_id": id})));
    assert_eq!(s["worker"]["state"], "suspended", "{s}");
    assert_eq!(s["worker"]["session_id"], "sess-42");
    assert_eq!(s["worker"]["pane_id"], "", "no tab while suspended");
    assert!(!gui.panes().contains(&pane), "its tab was closed");
    // Kept across a restart; its task is held.
    p.restart();
    assert_eq!(listed(&p, &id)["state"], "suspended");
    let e = control_error(
        &p.control(json!({"operation": "create", "task": "nap", "template": "napper"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "worker_exists");
    assert_eq!(e["state"], "suspended");

    let r = reply_data(&p.control(json!({"operation": "resume", "worker_id": id})));
    assert_eq!(r["worker"]["state"], "running", "{r}");
    let new_pane = pane_of(&r["worker"]);
    assert!(gui.panes().contains(&new_pane));
    let spawn = wez.calls_of("spawn").last().cloned().unwrap();
    let argv = spawn["argv"].as_array().unwrap();
    let after: Vec<&Value> = argv.iter().skip_while(|a| *a != "--").skip(1).collect();
    let task_file = wez.tasks.join("nap.md").display().to_string();
    assert_eq!(
        after,
        [
            &json!(wez.agent().display().to_string()),
            &json!("--resume"),
            &json!("sess-42"),
            &json!("--task-file"),
            &json!(task_file),
        ]
    );
    assert_eq!(listed(&p, &id)["state"], "running");

    // Renewed: the expiry is in the state file.
    let renewed =
        reply_data(&p.control(json!({"operation": "renew", "worker_id": id, "ttl": "1h"})));
    let records = wez.records();
    let record = records.iter().find(|r| r["worker_id"] == id).unwrap();
    assert!(record["expires_at"].as_u64().unwrap() > 0, "{record}");
    assert_eq!(
        listed(&p, &id)["expires_at"],
        renewed["worker"]["expires_at"]
    );

    // Suspended again, then stopped: the record goes, no tab is touched.
    reply_data(&p.control(json!({"operation": "suspend", "worker_id": id})));
    let panes = gui.panes();
    reply_data(&p.control(json!({"operation": "stop", "worker_id": id})));
    assert_eq!(gui.panes(), panes);
    assert_eq!(listed(&p, &id), Value::Null);
}

#[test]
fn a_tab_without_a_resume_command_or_a_session_is_not_suspended() {
    let wez = Wez::new("nosuspend");
    let gui = wez.gui();
    wez.task("plain", Some("s1"));
    wez.task("fresh", None);
    let file = templates(&wez);
    let p = started(&wez, &file);
    let plain = create(&p, "plain", "default");
    wez.task("plain", Some("s2"));
    let refused = |p: &Proc, id: &Value, says: &str| {
        let t = p.control(json!({"operation": "suspend", "worker_id": id}));
        let e = control_error(&t, "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request");
        assert!(e["message"].as_str().unwrap().contains(says), "{e}");
    };
    refused(&p, &plain["worker_id"], "has no resume_command");
    let fresh = create(&p, "fresh", "napper");
    refused(&p, &fresh["worker_id"], "no session id was seen");
    // Nothing was closed.
    assert!(gui.panes().contains(&pane_of(&plain)) && gui.panes().contains(&pane_of(&fresh)));
}
