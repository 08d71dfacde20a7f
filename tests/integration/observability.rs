//! Sentry reporting against a stand-in Sentry, and the non-loopback warning.
//!
//! The stand-in follows Sentry's documented envelope endpoint: `POST /api/<project>/envelope/`
//! with `X-Sentry-Auth` and an `application/x-sentry-envelope` body (envelope header, item
//! header, event; one JSON document per line), answered 200 with the event id.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2a_worker_controller::backend::BackendError;
use a2a_worker_controller::http::{self, Body, Handler, Request, Response};
use serde_json::{json, Value};

use crate::support::*;

#[derive(Default)]
struct SentryStandIn {
    received: Mutex<Vec<(String, String, String)>>,
}

impl Handler for SentryStandIn {
    fn handle(&self, req: Request) -> Response {
        let auth = req.header("X-Sentry-Auth").unwrap_or("").to_string();
        let Body::Complete(body) = req.body else {
            return Response::text(413, "too large");
        };
        let body = String::from_utf8_lossy(&body).into_owned();
        let id = body
            .lines()
            .next()
            .and_then(|l| serde_json::from_str::<Value>(l).ok())
            .map(|h| h["event_id"].clone())
            .unwrap_or(Value::Null);
        self.received.lock().unwrap().push((req.path, auth, body));
        Response::json(200, &json!({ "id": id }))
    }
}

#[test]
fn failed_operations_reach_sentry_without_tokens() {
    let sentry = Arc::new(SentryStandIn::default());
    let server = http::Server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = server.local_addr().unwrap().port();
    let serving = server
        .serve(sentry.clone(), http::Limits::default())
        .unwrap();
    let c = Builder::default()
        .flag(&format!("-sentry-dsn=http://publickey@127.0.0.1:{port}/7"))
        .start();
    // A success (its token must not travel), then two failures that are reported.
    reply_data(&c.control(json!({"operation": "create", "task": "fine"})));
    *c.backend.next_create_error.lock().unwrap() =
        Some(BackendError::Internal("engine exploded".into()));
    control_error(
        &c.control(json!({"operation": "create", "task": "boom"})),
        "TASK_STATE_FAILED",
    );
    c.backend
        .down
        .store(true, std::sync::atomic::Ordering::SeqCst);
    control_error(
        &c.control(json!({"operation": "list"})),
        "TASK_STATE_FAILED",
    );
    // Caller errors are not reported.
    c.control(json!({"operation": "explode"}));

    let deadline = Instant::now() + Duration::from_secs(10);
    while sentry.received.lock().unwrap().len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let received = sentry.received.lock().unwrap().clone();
    assert_eq!(received.len(), 2, "{received:?}");
    for (path, auth, body) in &received {
        assert_eq!(path, "/api/7/envelope/");
        assert!(
            auth.contains("sentry_key=publickey") && auth.contains("sentry_version=7"),
            "{auth}"
        );
        let lines: Vec<Value> = body
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[1]["type"], "event");
        assert_eq!(lines[2]["level"], "error");
        crate::secrets::assert_none_in(body, "a Sentry payload");
    }
    let messages: Vec<String> = received
        .iter()
        .map(|(_, _, b)| {
            b.lines()
                .nth(2)
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap()["message"]["formatted"].to_string()
                })
                .unwrap()
        })
        .collect();
    assert!(messages[0].contains("engine exploded"), "{messages:?}");
    assert!(messages[1].contains("BackendUnavailable"), "{messages:?}");
    drop(c);
    serving.shutdown(Duration::from_secs(1));
}

#[test]
fn a_non_loopback_listen_address_is_warned_about() {
    let id = format!("warn-{}", std::process::id());
    let socket = std::path::Path::new("/nonexistent/docker.sock");
    let port = crate::support::free_port();
    let p = crate::support::Proc::start(socket, &id, &[&format!("-listen=0.0.0.0:{port}")]);
    assert!(p
        .log_text()
        .contains("is not loopback: the endpoint carries bearer tokens in clear text"));
    let q = crate::support::Proc::start(socket, &id, &[]);
    assert!(!q.log_text().contains("is not loopback"));
}

/// On Linux with glibc the server runs with two malloc arenas (src/malloc.rs): it executes
/// itself once more with MALLOC_ARENA_MAX set, keeping its process id, arguments and the rest of
/// its environment; a value the operator set is left alone; the command-line client never
/// re-executes.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn the_server_limits_malloc_arenas_unless_the_operator_chose() {
    use crate::support::Proc;
    let environ = |p: &Proc| -> Vec<String> {
        std::fs::read(format!("/proc/{}/environ", p.pid()))
            .unwrap_or_default()
            .split(|b| *b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect()
    };
    let flags = || {
        vec![
            "-docker-host=unix:///nonexistent/docker.sock".to_string(),
            "-worker-image=none:v1".to_string(),
        ]
    };
    let id = format!("arenas-{}", std::process::id());
    let ours = Proc::launch(&id, flags(), vec![("KEEP_ME".into(), "1".into())]);
    let env = environ(&ours);
    assert!(env.contains(&"MALLOC_ARENA_MAX=2".to_string()), "{env:?}");
    assert!(
        env.contains(&"MALLOC_TRIM_THRESHOLD_=131072".to_string()),
        "{env:?}"
    );
    assert!(env.contains(&"KEEP_ME=1".to_string()), "{env:?}");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", ours.pid())).unwrap_or_default();
    assert!(
        String::from_utf8_lossy(&cmdline).contains(&format!("-controller-id={id}")),
        "same arguments after the exec"
    );
    assert!(!ours.log_text().contains("could not set MALLOC_ARENA_MAX"));

    let theirs = Proc::launch(&id, flags(), vec![("MALLOC_ARENA_MAX".into(), "4".into())]);
    let env = environ(&theirs);
    assert!(env.contains(&"MALLOC_ARENA_MAX=4".to_string()), "{env:?}");
    assert!(!env.contains(&"MALLOC_ARENA_MAX=2".to_string()), "{env:?}");
    assert!(!env.iter().any(|v| v.starts_with("MALLOC_TRIM")), "{env:?}");
}
