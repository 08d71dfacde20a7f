//! `logs` on the real dockerd: the last lines of a worker's output, stdout and stderr
//! demultiplexed from the engine's framed stream, `tail` honoured, the reply bounded and said to
//! be cut, only for workers this controller owns, and never written to the controller's log.

use serde_json::{json, Value};

use crate::docker_support::*;
use crate::support::{control_error, reply_data, Controls};

fn lines(logs: &Value) -> Vec<String> {
    logs["text"]
        .as_str()
        .unwrap_or("")
        .lines()
        .map(String::from)
        .collect()
}

/// The worker's logs once the engine has them all: its logger copies the output
/// asynchronously, so right after create the last lines may not be there yet. The echo worker
/// prints its serving line after the known lines; ask until that line is in.
fn logs_when_complete(p: &Proc, worker: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let logs = reply_data(
            &p.control(json!({"operation": "logs", "worker_id": worker, "tail": 10000})),
        );
        if logs["text"]
            .as_str()
            .unwrap_or("")
            .contains("a2a-echo-worker: serving")
        {
            return logs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the serving line never reached the logs"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn logs_are_the_last_lines_decoded_bounded_and_only_for_our_workers() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("logs");
    let mut cleanup = Cleanup::new(&socket, &id);
    let chatty = variant_image(&socket, "chatty", r#"["--print=300"]"#);
    let p = Proc::start(&socket, &id, &[&format!("-worker-image={chatty}")]);
    let created = reply_data(&p.control(json!({"operation": "create", "task": "talkative"})));
    let worker = created["worker"]["worker_id"].as_str().unwrap().to_string();

    // 300 known lines (odd ones on stdout, even ones on stderr), then the serving line.
    let all = logs_when_complete(&p, &worker);
    assert_eq!(all["worker_id"], worker.as_str());
    assert_eq!(all["truncated"], false);
    let text = all["text"].as_str().unwrap();
    assert!(
        !text.contains('\0') && !text.chars().any(|c| c.is_control() && c != '\n'),
        "frame headers decoded away: {:?}",
        &text[..text.len().min(200)]
    );
    let got = lines(&all);
    assert_eq!(got.len(), 301, "{got:?}");
    for i in 1..=300 {
        let want = format!("{} {i}", if i % 2 == 1 { "out" } else { "err" });
        assert!(got.contains(&want), "{want} missing");
    }
    assert!(got
        .iter()
        .any(|l| l.starts_with("a2a-echo-worker: serving")));

    // The tail: the last lines only; the default is 200.
    let five = lines(&reply_data(
        &p.control(json!({"operation": "logs", "worker_id": worker, "tail": 5})),
    ));
    assert_eq!(five, got[got.len() - 5..].to_vec());
    let default = lines(&reply_data(
        &p.control(json!({"operation": "logs", "worker_id": worker})),
    ));
    assert_eq!(default, got[got.len() - 200..].to_vec());

    // Bounds on what may be asked.
    for bad in [json!(0), json!(10001), json!("5"), json!(-1)] {
        let e = control_error(
            &p.control(json!({"operation": "logs", "worker_id": worker, "tail": bad})),
            "TASK_STATE_REJECTED",
        );
        assert!(
            e["message"].as_str().unwrap_or("").contains("tail must be"),
            "{e}"
        );
    }

    // Only our workers: a container of another owner, and an id nobody has, are not_found.
    let foreign_name = format!("{id}-foreign-logs");
    let foreign = cleanup
        .engine
        .create(
            &foreign_name,
            &json!({"Image": chatty, "Labels": {
                "a2a-worker-controller/owner": "someone-else",
                "a2a-worker-controller/worker-id": "f0f0f0f0f0f0",
                "a2a-worker-controller/task": "theirs"}}),
        )
        .expect("a foreign container");
    cleanup.extra.push(foreign);
    for other in ["f0f0f0f0f0f0", "000000000000"] {
        p.expect_failure(
            json!({"operation": "logs", "worker_id": other}),
            "not_found",
        );
    }

    // A worker that printed more than the reply may carry: the end of it, cut at a line.
    let flood = variant_image(&socket, "flood", r#"["--print=12000", "--line-bytes=200"]"#);
    let q = Proc::start(
        &socket,
        &format!("{id}-flood"),
        &[&format!("-worker-image={flood}")],
    );
    let _flood_cleanup = Cleanup::new(&socket, &format!("{id}-flood"));
    let w = reply_data(&q.control(json!({"operation": "create", "task": "flood"})));
    let w = w["worker"]["worker_id"].as_str().unwrap().to_string();
    let cut = logs_when_complete(&q, &w);
    let text = cut["text"].as_str().unwrap();
    assert_eq!(cut["truncated"], true);
    assert!(
        text.len() <= 1 << 20 && text.len() > (1 << 20) - 300,
        "{}",
        text.len()
    );
    let first = text.lines().next().unwrap_or("");
    assert!(
        (first.starts_with("out ") || first.starts_with("err ")) && first.len() == 200,
        "starts at a whole line: {first:?}"
    );
    assert!(text.contains(&format!("err 12000{}", ".".repeat(200 - 9))));

    // What logs returned never reaches the controller's own log.
    for log in [p.log_text(), q.log_text()] {
        assert!(
            !log.contains("out 299") && !log.contains("err 12000"),
            "{log}"
        );
    }
}
