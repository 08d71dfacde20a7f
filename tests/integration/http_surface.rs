//! The HTTP surface: routes, methods, authentication, the body cap, the Agent Card,
//! readiness, metrics and graceful shutdown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use crate::support::*;

const LIST: &str = r#"{"jsonrpc":"2.0","id":"1","method":"SendMessage","params":{"message":{"messageId":"1","role":"ROLE_USER","parts":[{"data":{"operation":"list"}}]}}}"#;

#[test]
fn only_the_bearer_token_is_let_in_and_refusals_say_why() {
    let c = controller();
    let cases: [(Option<String>, &str); 5] = [
        (None, ""),
        (Some(format!("Basic {TOKEN}")), ""),
        (Some(TOKEN.to_string()), ""),
        (
            Some("Bearer wrong-token-0123456789".into()),
            "invalid_token",
        ),
        (Some(format!("Bearer {TOKEN}x")), "invalid_token"),
    ];
    for (auth, error) in cases {
        let mut headers = vec![("Content-Type", "application/json")];
        if let Some(a) = &auth {
            headers.push(("Authorization", a));
        }
        // An invalid JSON body: authentication comes before any parsing.
        let r = request(c.addr, "POST", "/a2a", &headers, b"{not json");
        assert_eq!(r.status, 401, "{auth:?}");
        let challenge = r.header("WWW-Authenticate").unwrap();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        assert!(challenge.contains(error));
        assert_eq!(r.json()["error"], "unauthorized");
        assert!(!r.text().contains(TOKEN));
    }
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        c.addr,
        "POST",
        "/a2a/",
        &[("Authorization", &auth)],
        LIST.as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(
        r.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}

#[test]
fn a_wrong_method_is_405_naming_the_allowed_and_an_unknown_path_404() {
    let c = controller();
    for (method, path, status, allow) in [
        ("GET", "/a2a", 405, Some("POST")),
        ("PUT", "/a2a/", 405, Some("POST")),
        (
            "POST",
            "/.well-known/agent-card.json",
            405,
            Some("GET, HEAD"),
        ),
        ("DELETE", "/healthz", 405, Some("GET, HEAD")),
        ("POST", "/metrics", 405, Some("GET, HEAD")),
        ("GET", "/nope", 404, None),
        ("GET", "/a2a/extra", 404, None),
        ("GET", "/.well-known/agent.json", 404, None),
        ("GET", "/healthz", 200, None),
        ("GET", "/healthz?probe=1", 200, None),
        ("GET", "/readiness", 200, None),
        ("HEAD", "/healthz", 200, None),
    ] {
        let r = request(c.addr, method, path, &[], b"");
        assert_eq!(r.status, status, "{method} {path}");
        assert_eq!(r.header("Allow"), allow, "{method} {path}");
    }
}

#[test]
fn readiness_follows_the_backend() {
    let c = controller();
    assert_eq!(request(c.addr, "GET", "/readiness", &[], b"").status, 200);
    c.backend.down.store(true, Ordering::SeqCst);
    let r = request(c.addr, "GET", "/readiness", &[], b"");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("unavailable"), "{}", r.text());
    assert_eq!(request(c.addr, "GET", "/healthz", &[], b"").status, 200);
    c.backend.down.store(false, Ordering::SeqCst);
    assert_eq!(request(c.addr, "GET", "/readiness", &[], b"").status, 200);
}

#[test]
fn a_body_up_to_the_cap_is_read_and_one_past_it_is_413() {
    let c = controller();
    let auth = format!("Bearer {TOKEN}");
    // Just under the cap is read and parsed.
    let mut big = String::from(r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pad":""#);
    big.push_str(&"x".repeat((1 << 20) - big.len() - 3));
    big.push_str("\"}}");
    assert_eq!(big.len(), 1 << 20);
    let r = request(
        c.addr,
        "POST",
        "/a2a",
        &[("Authorization", &auth)],
        big.as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert!(r.json()["result"].is_object());

    // One byte over is refused, before authentication.
    let over = vec![b' '; (1 << 20) + 1];
    let r = request(c.addr, "POST", "/a2a", &[], &over);
    assert_eq!(r.status, 413);

    // A declared length over the cap is refused without waiting for the body.
    let raw =
        "POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\nConnection: close\r\n\r\n{}";
    let r = raw_exchange(c.addr, raw.as_bytes());
    assert_eq!(r.status, 413);

    // A chunked body is capped like any other.
    let mut chunked =
        b"POST /a2a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            .to_vec();
    for _ in 0..17 {
        chunked.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
        chunked.extend_from_slice(&[b' '; 65536]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    assert_eq!(raw_exchange(c.addr, &chunked).status, 413);
    assert_eq!(request(c.addr, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn agent_card_v1_shape_and_validators() {
    let c = controller();
    let r = request(c.addr, "GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(r.status, 200, "public, no token needed");
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert!(r.header("Cache-Control").unwrap().contains("max-age="));
    assert!(r.header("Last-Modified").unwrap().ends_with(" GMT"));
    let etag = r.header("ETag").unwrap().to_string();
    let card = r.json();
    for key in [
        "name",
        "description",
        "version",
        "supportedInterfaces",
        "capabilities",
        "defaultInputModes",
        "defaultOutputModes",
        "skills",
    ] {
        assert!(card.get(key).is_some(), "required {key}");
    }
    for v03 in [
        "url",
        "preferredTransport",
        "protocolVersion",
        "additionalInterfaces",
        "supportsAuthenticatedExtendedCard",
        "security",
    ] {
        assert!(card.get(v03).is_none(), "v0.3 field {v03}");
    }
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": "http://controller.test:8080/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://controller.test:8080/a2a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ])
    );
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": true, "extendedAgentCard": true, "extensions": []})
    );
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
    assert_eq!(
        card["securityRequirements"],
        json!([{"schemes": {"bearer": {"list": []}}}])
    );
    let skills: Vec<_> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].clone())
        .collect();
    assert_eq!(
        skills,
        [
            json!("create"),
            json!("list"),
            json!("stop"),
            json!("renew"),
            json!("suspend"),
            json!("watch"),
            json!("templates"),
            json!("workspaces"),
            json!("logs")
        ]
    );
    for skill in card["skills"].as_array().unwrap() {
        assert!(!skill["tags"].as_array().unwrap().is_empty());
        assert!(skill["name"].is_string() && skill["description"].is_string());
        let example: serde_json::Value =
            serde_json::from_str(skill["examples"][0].as_str().unwrap()).unwrap();
        assert!(example["parts"][0]["data"]["operation"].is_string());
    }

    let r = request(
        c.addr,
        "GET",
        "/.well-known/agent-card.json",
        &[("If-None-Match", &etag)],
        b"",
    );
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("ETag"), Some(etag.as_str()));
    let r = request(
        c.addr,
        "GET",
        "/.well-known/agent-card.json",
        &[("If-None-Match", "\"other\"")],
        b"",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn metrics_count_requests_and_operations_without_tasks_or_tokens() {
    let c = controller();
    let task = c.control(json!({"operation": "create", "task": "secret-task-name"}));
    let token = reply_data(&task)["token"].as_str().unwrap().to_string();
    c.control(json!({"operation": "list"}));
    request(c.addr, "GET", "/nope", &[], b"");
    let r = request(c.addr, "GET", "/metrics", &[], b"");
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(
        text.contains("a2a_controller_http_requests_total{route=\"a2a\",status=\"200\"} 2"),
        "{text}"
    );
    assert!(text.contains("route=\"not_found\",status=\"404\"} 1"));
    assert!(text.contains(
        "a2a_controller_control_operations_total{operation=\"create\",backend=\"docker\",outcome=\"completed\",caller=\"admin\"} 1"
    ));
    assert!(text.contains("a2a_controller_control_operation_duration_seconds_count{operation=\"list\",backend=\"docker\"} 1"));
    assert!(text.contains("a2a_controller_build_info{"));
    assert!(!text.contains("secret-task-name") && !text.contains(&token) && !text.contains(TOKEN));
}

#[test]
fn shutdown_finishes_requests_in_flight() {
    let mut c = controller();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(700);
    let addr = c.addr;
    let in_flight = std::thread::spawn(move || {
        let auth = format!("Bearer {TOKEN}");
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message(vec![json!({"data": {"operation": "create", "task": "late"}})])}});
        request(
            addr,
            "POST",
            "/a2a",
            &[("Authorization", &auth)],
            body.to_string().as_bytes(),
        )
    });
    wait_until("the create in flight", PATIENCE, || {
        c.backend.creates_started.load(Ordering::SeqCst) == 1
    });
    let running = c.running.take().unwrap();
    assert!(
        running.shutdown(),
        "all in-flight requests finished within the grace period"
    );
    let r = in_flight.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["result"]["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
}
