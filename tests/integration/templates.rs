//! Worker templates over the protocol: with the backend test double, a templates
//! file's templates are created from, shown as the Worker's `template`, filtered in `list`,
//! listed by `templates`, their TTLs applied; unknown and forbidden templates are refused naming
//! only the templates the caller may use; the file changed while running is used at once and a
//! broken change keeps the last good one; startup refuses a bad file naming the template and the
//! field. On the real engine (`A2A_TEST_DOCKER_HOST`): two templates with two images and memory
//! limits, seen in `docker inspect`, the template label read back after a restart, and `check`
//! naming a template whose image is missing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use crate::callers::{control_as, hash, ALICE, BOB};
use crate::docker_support::*;
use crate::support::*;

/// A private directory for one test's files.
pub fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("a2a-templates-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes `templates` as the templates file at `path` (whole, then moved into place).
pub fn write_templates(path: &Path, templates: Value) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json!({ "templates": templates }).to_string()).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn names(data: &Value, key: &str, field: &str) -> Vec<String> {
    data[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[field].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn templates_are_created_from_listed_filtered_and_limited_per_caller() {
    let dir = test_dir("fake");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({
            "coder": {"image": "coder:1", "memory": "1g", "ttl": "2h", "max_ttl": "4h",
                      "description": "writes code", "workspace": {"size": "2Gi"}},
            "reviewer": {"image": "reviewer:1", "max_ttl": "30m"}
        }),
    );
    let callers = dir.join("callers.json");
    std::fs::write(
        &callers,
        json!({"callers": [
            {"name": "alice", "token_sha256": hash(ALICE), "scope": "team-a", "templates": ["reviewer"]},
            {"name": "bob", "token_sha256": hash(BOB), "scope": "team-b"}
        ]})
        .to_string(),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&callers, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = Builder::default()
        .flag(&format!("-worker-templates-file={}", file.display()))
        .flag(&format!("-a2a-callers-file={}", callers.display()))
        .start();

    // The admin may use every template; the Worker says which one it was made from.
    let made =
        reply_data(&c.control(json!({"operation": "create", "task": "t1", "template": "coder"})));
    assert_eq!(made["worker"]["template"], "coder");
    assert_ne!(
        made["worker"]["expires_at"], "",
        "the template's ttl applies"
    );
    let plain = reply_data(&c.control(json!({"operation": "create", "task": "t2"})));
    assert_eq!(
        plain["worker"]["template"], "default",
        "no template named: default"
    );
    let listed = reply_data(&c.control(json!({"operation": "list", "template": "coder"})));
    assert_eq!(names(&listed, "workers", "task"), ["t1"]);
    let all = reply_data(&c.control(json!({"operation": "templates"})));
    assert_eq!(
        names(&all, "templates", "name"),
        ["coder", "default", "reviewer"]
    );
    let coder = &all["templates"][0];
    assert_eq!(coder["image"], "coder:1");
    assert_eq!(coder["memory_bytes"], 1 << 30);
    assert_eq!(
        (coder["ttl"].as_u64(), coder["max_ttl"].as_u64()),
        (Some(7200), Some(14400))
    );
    assert_eq!(
        coder["workspace"],
        json!({"path": "/workspace", "size": "2Gi"})
    );
    assert_eq!(coder["description"], "writes code");
    assert!(!all.to_string().contains("env"), "no environment is shown");

    // A ttl above the template's own ceiling is refused naming it.
    let task = c
        .control(json!({"operation": "create", "task": "t3", "template": "reviewer", "ttl": "1h"}));
    let e = control_error(&task, "TASK_STATE_REJECTED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("longer than template reviewer's max_ttl (30m)"),
        "{e}"
    );

    // Alice may use reviewer only: she is told so, and never hears of the others.
    let mine = reply_data(&control_as(
        c.addr,
        ALICE,
        json!({"operation": "templates"}),
    ));
    assert_eq!(names(&mine, "templates", "name"), ["reviewer"]);
    for asked in [json!("coder"), json!("nonesuch"), Value::Null] {
        let task = control_as(
            c.addr,
            ALICE,
            json!({"operation": "create", "task": "a1", "template": asked}),
        );
        let e = control_error(&task, "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request");
        let m = e["message"].as_str().unwrap();
        assert!(m.ends_with("this caller may use reviewer"), "{asked}: {m}");
        assert!(!m.contains("default") || asked.is_null(), "{m}");
        assert!(!m.contains("coder") || asked == json!("coder"), "{m}");
    }
    let ok = reply_data(&control_as(
        c.addr,
        ALICE,
        json!({"operation": "create", "task": "a1", "template": "reviewer"}),
    ));
    assert_eq!(
        (
            ok["worker"]["template"].as_str(),
            ok["worker"]["scope"].as_str()
        ),
        (Some("reviewer"), Some("team-a"))
    );
    // Bob has no list: every template.
    let bobs = reply_data(&control_as(c.addr, BOB, json!({"operation": "templates"})));
    assert_eq!(names(&bobs, "templates", "name").len(), 3);

    // The file changed: a new template is there at once; a broken change keeps the last good.
    std::thread::sleep(Duration::from_millis(1100));
    write_templates(&file, json!({"tester": {"image": "tester:1"}}));
    let made =
        reply_data(&c.control(json!({"operation": "create", "task": "t4", "template": "tester"})));
    assert_eq!(made["worker"]["template"], "tester");
    let gone = c.control(json!({"operation": "create", "task": "t5", "template": "coder"}));
    assert!(control_error(&gone, "TASK_STATE_REJECTED")["message"]
        .as_str()
        .unwrap()
        .starts_with("unknown template \"coder\""));
    let listed = reply_data(&c.control(json!({"operation": "list", "template": "coder"})));
    assert_eq!(
        names(&listed, "workers", "task"),
        ["t1"],
        "a worker keeps its template"
    );
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::write(&file, r#"{"templates": {"tester": {"image": "untagged"}}}"#).unwrap();
    let still =
        reply_data(&c.control(json!({"operation": "create", "task": "t6", "template": "tester"})));
    assert_eq!(still["worker"]["template"], "tester");
    assert!(
        crate::secrets::captured_log().contains("WORKER_TEMPLATES_FILE changed but cannot be used"),
        "the broken change is said in the log"
    );
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains(r#"a2a_controller_worker_creates_total{backend="docker",template="coder",outcome="completed"} 1"#),
        "{metrics}"
    );
}

#[test]
fn startup_refuses_a_bad_templates_file_naming_the_template_and_field() {
    let dir = test_dir("refused");
    let file = dir.join("templates.json");
    for (templates, says) in [
        (
            json!({"coder": {"memory": "lots"}}),
            "template \"coder\": memory:",
        ),
        (
            json!({"coder": {"env": {"GITHUB_TOKEN": "ghp_x"}}}),
            "template \"coder\": env \"GITHUB_TOKEN\"",
        ),
        (json!({"coder": {"imgae": "x:1"}}), "unknown field `imgae`"),
    ] {
        write_templates(&file, templates);
        let settings = settings(&[&format!("-worker-templates-file={}", file.display())]);
        let backend = std::sync::Arc::new(FakeBackend::default());
        let e = match a2a_worker_controller::start(&settings, backend) {
            Ok(_) => panic!("a bad templates file was accepted"),
            Err(e) => e.to_string(),
        };
        assert!(
            e.starts_with("setting WORKER_TEMPLATES_FILE is invalid: "),
            "{e}"
        );
        assert!(e.contains(says), "{says}: {e}");
        assert!(
            !e.contains("ghp_x"),
            "a secret value is never repeated: {e}"
        );
        assert_eq!(e.lines().count(), 1);
    }
}

/// `docker inspect`'s image and memory limit of a container.
fn inspected(socket: &Path, id: &str) -> (String, i64) {
    let text = docker_cli(
        socket,
        &[
            "inspect",
            "--format",
            "{{.Config.Image}} {{.HostConfig.Memory}}",
            id,
        ],
        None,
    );
    let (image, memory) = text.split_once(' ').unwrap();
    // Podman names local images `localhost/...` and Docker Hub ones `docker.io/library/...`.
    let image = image
        .trim_start_matches("docker.io/library/")
        .trim_start_matches("localhost/");
    (image.to_string(), memory.parse().unwrap())
}

#[test]
fn two_templates_on_the_real_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("templates");
    let cleanup = Cleanup::new(&socket, &id);
    let second = variant_image(&socket, "template-b", "[]");
    let dir = test_dir("docker");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({
            "small": {"image": worker_image(), "memory": "64m"},
            "large": {"image": second, "memory": "96m", "env": {"ECHO_PREFIX": "large"}}
        }),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let mut p = Proc::start(&socket, &id, &[&flag]);
    let mut made = Vec::new();
    for (task, template) in [("small task", "small"), ("large task", "large")] {
        let data = reply_data(
            &p.control(json!({"operation": "create", "task": task, "template": template})),
        );
        assert_eq!(data["worker"]["template"], template);
        assert_eq!(data["worker"]["state"], "running", "{data}");
        made.push(data["worker"]["worker_id"].as_str().unwrap().to_string());
    }
    let mut seen: Vec<(String, String, i64)> = cleanup
        .owned()
        .into_iter()
        .map(|c| {
            let labels = c.labels.clone().unwrap();
            let (image, memory) = inspected(&socket, &c.id);
            (
                labels["a2a-worker-controller/template"].clone(),
                image,
                memory,
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("large".to_string(), second.clone(), 96 << 20),
            ("small".to_string(), worker_image(), 64 << 20)
        ]
    );

    // After a restart the template is read back from the label, with a file that no longer
    // has the template: the worker keeps what it was made from.
    write_templates(
        &file,
        json!({"small": {"image": worker_image(), "memory": "64m"}}),
    );
    p.restart();
    let listed = reply_data(&p.control(json!({"operation": "list", "template": "large"})));
    assert_eq!(listed["workers"][0]["worker_id"], made[1].as_str());
    assert_eq!(listed["workers"][0]["state"], "running");
    assert!(listed["workers"][0]["a2a_url"]
        .as_str()
        .unwrap()
        .starts_with("http://127.0.0.1:"));
    p.expect_failure_saying(
        json!({"operation": "stop", "worker_id": "nonesuch"}),
        "not_found",
        &[],
    );

    // check proves each template: a missing image is named with its template.
    write_templates(
        &file,
        json!({"small": {"image": worker_image()}, "broken": {"image": "a2a-echo-worker:no-such-tag"}}),
    );
    let args = engine_args(&socket, &flag);
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains(&format!(
            "template small: image {} is present",
            worker_image()
        )),
        "{out}"
    );
    assert!(
        err.contains(
            "template broken: FAILED: image a2a-echo-worker:no-such-tag is not on the engine"
        ),
        "{err}"
    );
}

/// The flags of a controller on the test engine with the templates file `flag` names.
pub fn engine_args(socket: &Path, flag: &str) -> Vec<String> {
    vec![
        format!("-docker-host=unix://{}", socket.display()),
        format!("-worker-image={}", worker_image()),
        flag.to_string(),
    ]
}

/// SendMessage to a worker with its token; the text it answered.
pub fn tell(url: &str, token: &str, text: &str) -> String {
    let r = crate::docker_e2e::send_to_worker(url, Some(token), text);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The Docker volumes of a controller id, by name.
pub fn volumes(socket: &Path, id: &str) -> Vec<String> {
    let out = docker_cli(
        socket,
        &[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=a2a-worker-controller/owner={id}"),
        ],
        None,
    );
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Removes a controller id's volumes whatever happens to the test.
pub struct VolumeCleanup(pub PathBuf, pub String);

impl Drop for VolumeCleanup {
    fn drop(&mut self) {
        for v in volumes(&self.0, &self.1) {
            let _ = std::process::Command::new("docker")
                .env("DOCKER_HOST", format!("unix://{}", self.0.display()))
                .args(["volume", "rm", "-f", &v])
                .output();
        }
    }
}

#[test]
fn a_workspace_outlives_its_worker_on_the_real_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("workspace");
    let _cleanup = Cleanup::new(&socket, &id);
    let _volumes = VolumeCleanup(socket.clone(), id.clone());
    let dir = test_dir("docker-workspace");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({
            "coder": {"image": worker_image(), "workspace": {"path": "/workspace", "size": "64Mi"}},
            "broken": {"image": "a2a-echo-worker:no-such-tag", "workspace": {"size": "64Mi"}}
        }),
    );
    let callers = dir.join("callers.json");
    std::fs::write(
        &callers,
        json!({"callers": [
            {"name": "alice", "token_sha256": hash(ALICE), "scope": "team-a", "max_workspaces": 1},
            {"name": "bob", "token_sha256": hash(BOB), "scope": "team-b"}
        ]})
        .to_string(),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&callers, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = Proc::start(
        &socket,
        &id,
        &[
            &format!("-worker-templates-file={}", file.display()),
            &format!("-a2a-callers-file={}", callers.display()),
            "-workspace-ttl=3s",
            "-reap-interval=1s",
        ],
    );
    let as_alice = |data: Value| control_as(p.addr, ALICE, data);
    let as_bob = |data: Value| control_as(p.addr, BOB, data);

    // The first worker writes into the task's workspace.
    let first = reply_data(&as_alice(
        json!({"operation": "create", "task": "keep me", "template": "coder"}),
    ));
    let (url, token) = (
        first["worker"]["a2a_url"].as_str().unwrap(),
        first["token"].as_str().unwrap(),
    );
    assert_eq!(
        tell(url, token, "workspace write notes.txt half done"),
        "wrote notes.txt"
    );
    let spaces = reply_data(&as_alice(json!({"operation": "workspaces"})));
    assert_eq!(
        spaces["workspaces"].as_array().unwrap().len(),
        1,
        "{spaces}"
    );
    let space = &spaces["workspaces"][0];
    assert_eq!(
        (space["task"].as_str(), space["scope"].as_str()),
        (Some("keep me"), Some("team-a"))
    );
    assert_eq!(
        (space["template"].as_str(), space["size"].as_str()),
        (Some("coder"), Some("64Mi"))
    );
    assert_eq!(space["in_use"], true);
    assert_eq!(
        volumes(&socket, &id).len(),
        2,
        "the workspace and its last-use stamp"
    );

    // Bob sees none of it, and alice's workspace is not_found to him.
    let bobs = reply_data(&as_bob(json!({"operation": "workspaces"})));
    assert_eq!(bobs["workspaces"], json!([]));
    let e = control_error(
        &as_bob(json!({"operation": "delete_workspace", "task": "keep me"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "not_found");

    // While a worker of the task runs its workspace cannot be deleted; alice's bound holds.
    let e = control_error(
        &as_alice(json!({"operation": "delete_workspace", "task": "keep me"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(
        (e["code"].as_str(), e["worker_id"].as_str()),
        (Some("worker_exists"), first["worker"]["worker_id"].as_str())
    );
    let e = control_error(
        &as_alice(json!({"operation": "create", "task": "another", "template": "coder"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "capacity", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("max_workspaces (1)"),
        "{e}"
    );

    // Stopped, the workspace stays; the task's next worker reads what the first one wrote.
    reply_data(&as_alice(
        json!({"operation": "stop", "worker_id": first["worker"]["worker_id"]}),
    ));
    let spaces = reply_data(&as_alice(json!({"operation": "workspaces"})));
    assert_eq!(spaces["workspaces"][0]["in_use"], false);
    let second = reply_data(&as_alice(
        json!({"operation": "create", "task": "keep me", "template": "coder"}),
    ));
    let (url, token) = (
        second["worker"]["a2a_url"].as_str().unwrap(),
        second["token"].as_str().unwrap(),
    );
    assert_eq!(tell(url, token, "workspace read notes.txt"), "half done");

    // Stop with the workspace: both go, the volumes too.
    let done = reply_data(&as_alice(
        json!({"operation": "stop", "worker_id": second["worker"]["worker_id"], "workspace": "delete"}),
    ));
    assert_eq!(done["worker"]["worker_id"], second["worker"]["worker_id"]);
    assert_eq!(done["workspace"]["task"], "keep me");
    assert_eq!(
        reply_data(&as_alice(json!({"operation": "workspaces"})))["workspaces"],
        json!([])
    );
    assert!(
        volumes(&socket, &id).is_empty(),
        "{:?}",
        volumes(&socket, &id)
    );

    // A create that fails removes the workspace it made.
    let e = control_error(
        &as_bob(json!({"operation": "create", "task": "never", "template": "broken"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "image_not_found", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("the workspace it made was removed"),
        "{e}"
    );
    assert!(
        volumes(&socket, &id).is_empty(),
        "{:?}",
        volumes(&socket, &id)
    );

    // Unused past WORKSPACE_TTL, a workspace is reaped; a worker that has it keeps it.
    let w = reply_data(&as_alice(
        json!({"operation": "create", "task": "short", "template": "coder"}),
    ));
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        reply_data(&as_alice(json!({"operation": "workspaces"})))["workspaces"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "in use: kept"
    );
    reply_data(&as_alice(
        json!({"operation": "stop", "worker_id": w["worker"]["worker_id"]}),
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !volumes(&socket, &id).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "not reaped: {:?}",
            volumes(&socket, &id)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        p.log_text().contains("reaper: deleted the workspace"),
        "{}",
        p.log_text()
    );
}
