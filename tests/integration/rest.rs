//! The HTTP+JSON binding (specification §11) on a real socket: every route of §11.3 with its
//! status codes and AIP-193 error bodies, §11.5's query parameters, unknown routes and wrong
//! methods, authentication and `Content-Type` before anything is parsed, bodies over the
//! limit, hostile path segments, streaming as bare `StreamResponse` events, and the same
//! tasks and errors as the JSON-RPC binding.

use serde_json::{json, Value};

use crate::support::*;

const BASE: &str = "/a2a/rest";

fn auth() -> String {
    format!("Bearer {TOKEN}")
}

/// One HTTP+JSON call with the controller's token; the body, if any, as JSON.
fn call(c: &Controller, method: &str, path: &str, body: Option<Value>) -> HttpResponse {
    let auth = auth();
    let mut headers = vec![("Authorization", auth.as_str())];
    let text = body.map(|b| b.to_string()).unwrap_or_default();
    if !text.is_empty() {
        headers.push(("Content-Type", "application/json"));
    }
    request(
        c.addr,
        method,
        &format!("{BASE}{path}"),
        &headers,
        text.as_bytes(),
    )
}

/// The AIP-193 error of an answer expected to fail with `status`; checks its shape.
fn rest_error(r: &HttpResponse, status: u16, reason: &str) -> Value {
    assert_eq!(r.status, status, "{}", r.text());
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    let v = r.json();
    let e = &v["error"];
    assert_eq!(e["code"], status, "{v}");
    assert!(e["status"].is_string() && e["message"].is_string(), "{v}");
    let info = &e["details"][0];
    assert_eq!(info["@type"], "type.googleapis.com/google.rpc.ErrorInfo");
    assert_eq!(info["domain"], "a2a-protocol.org");
    assert_eq!(info["reason"], reason, "{v}");
    e.clone()
}

fn send_body(data: Value) -> Value {
    json!({"message": message(vec![json!({"data": data})])})
}

fn events_of(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
        .map(|e| {
            let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e:?}"));
            let v: Value = serde_json::from_str(data).unwrap();
            assert!(v.get("jsonrpc").is_none(), "REST events are bare: {v}");
            assert_eq!(v.as_object().unwrap().len(), 1, "one member: {v}");
            v
        })
        .collect()
}

#[test]
fn send_get_list_cancel_over_http_json() {
    let c = controller();
    let r = call(
        &c,
        "POST",
        "/message:send",
        Some(send_body(json!({"operation": "create", "task": "rest-a"}))),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        r.text().starts_with(r#"{"task":{"id":""#),
        "fields in the proto's order, as JSON-RPC writes them: {}",
        r.text()
    );
    let task = r.json()["task"].clone();
    let data = reply_data(&task);
    let token = data["token"].as_str().unwrap().to_string();
    crate::secrets::remember(&token);
    assert_eq!(
        token.len(),
        64,
        "the create's reply carries the token, as over JSON-RPC"
    );
    let id = task["id"].as_str().unwrap();

    // The same task through both bindings; the stored copy never holds the token.
    let got = call(&c, "GET", &format!("/tasks/{id}"), None);
    assert_eq!(got.status, 200, "{}", got.text());
    let got = got.json();
    assert_eq!(got["id"], id);
    let over_rpc = c.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert_eq!(got, over_rpc);
    assert!(!got.to_string().contains(&token));
    let none = call(&c, "GET", &format!("/tasks/{id}?historyLength=0"), None).json();
    assert!(none.get("history").is_none(), "{none}");

    // List with §11.5's parameters.
    call(
        &c,
        "POST",
        "/message:send",
        Some(send_body(json!({"operation": "list"}))),
    );
    let page = call(&c, "GET", "/tasks?pageSize=1", None);
    assert_eq!(page.status, 200, "{}", page.text());
    let page = page.json();
    assert_eq!(page["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(page["pageSize"], 1);
    assert_eq!(page["totalSize"], 2);
    let next = page["nextPageToken"].as_str().unwrap();
    assert!(!next.is_empty());
    let rest = call(
        &c,
        "GET",
        &format!("/tasks?pageSize=1&pageToken={next}"),
        None,
    )
    .json();
    assert_eq!(rest["tasks"][0]["id"], id);
    assert!(rest["tasks"][0].get("artifacts").is_none());
    let with = call(
        &c,
        "GET",
        "/tasks?includeArtifacts=true&status=completed",
        None,
    )
    .json();
    assert_eq!(with["tasks"].as_array().unwrap().len(), 2, "{with}");
    assert!(with["tasks"][0]["artifacts"].is_array());
    let named = call(&c, "GET", "/tasks?status=TASK_STATE_FAILED", None).json();
    assert_eq!(named["tasks"], json!([]));
    for bad in [
        "pageSize=0",
        "pageSize=x",
        "includeArtifacts=maybe",
        "status=sleepy",
        "pageSize=1&pageSize=2",
    ] {
        let r = call(&c, "GET", &format!("/tasks?{bad}"), None);
        rest_error(&r, 400, "INVALID_PARAMS");
    }

    // Cancel: never possible for a control task, saying why; unknown ids are not found.
    let e = rest_error(
        &call(&c, "POST", &format!("/tasks/{id}:cancel"), None),
        409,
        "TASK_NOT_CANCELABLE",
    );
    assert_eq!(e["details"][0]["metadata"]["taskId"], id);
    rest_error(
        &call(&c, "POST", "/tasks/nope:cancel", None),
        404,
        "TASK_NOT_FOUND",
    );
    rest_error(&call(&c, "GET", "/tasks/nope", None), 404, "TASK_NOT_FOUND");

    // Errors of the operation itself are the task's, as over JSON-RPC.
    let r = call(
        &c,
        "POST",
        "/message:send",
        Some(send_body(json!({"operation": "create", "task": "rest-a"}))),
    );
    let e = control_error(&r.json()["task"], "TASK_STATE_FAILED");
    assert_eq!(e["code"], "worker_exists");
    // A malformed request is the same error through both bindings.
    let e = rest_error(
        &call(&c, "POST", "/message:send", Some(json!({}))),
        400,
        "INVALID_PARAMS",
    );
    let rpc = c.rpc_error("SendMessage", json!({}));
    assert_eq!(e["message"], rpc["message"]);
}

#[test]
fn streaming_and_subscribe_are_bare_stream_responses() {
    let c = controller();
    let r = call(
        &c,
        "POST",
        "/message:stream",
        Some(send_body(
            json!({"operation": "create", "task": "rest-stream"}),
        )),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    let events = events_of(&r.text());
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e.as_object().unwrap().keys().next().unwrap().as_str())
        .collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"statusUpdate"), "{kinds:?}");
    assert!(kinds.contains(&"artifactUpdate"), "{kinds:?}");
    let last = &events[events.len() - 1]["statusUpdate"];
    assert_eq!(last["status"]["state"], "TASK_STATE_COMPLETED");
    let artifact = events.iter().find_map(|e| e.get("artifactUpdate")).unwrap();
    let token = artifact["artifact"]["parts"][0]["data"]["token"]
        .as_str()
        .unwrap();
    crate::secrets::remember(token);
    let id = events[0]["task"]["id"].as_str().unwrap();

    // Subscribing to a finished task: nothing more will happen (both GET and POST).
    for method in ["GET", "POST"] {
        let r = call(&c, method, &format!("/tasks/{id}:subscribe"), None);
        rest_error(&r, 400, "UNSUPPORTED_OPERATION");
        let r = call(&c, method, "/tasks/nope:subscribe", None);
        rest_error(&r, 404, "TASK_NOT_FOUND");
    }
    // An error before the stream starts is an HTTP error, not an event.
    let r = call(&c, "POST", "/message:stream", Some(json!({"message": 5})));
    rest_error(&r, 400, "INVALID_PARAMS");
}

#[test]
fn a_subscriber_hears_a_running_task_to_its_end() {
    let backend = std::sync::Arc::new(FakeBackend::default());
    *backend.create_delay.lock().unwrap() = std::time::Duration::from_millis(600);
    let c = Builder::default().backend(backend).start();
    let mut body = send_body(json!({"operation": "create", "task": "rest-sub"}));
    body["configuration"] = json!({"returnImmediately": true});
    let r = call(&c, "POST", "/message:send", Some(body));
    let task = r.json()["task"].clone();
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{task}");
    let id = task["id"].as_str().unwrap();
    let r = call(&c, "GET", &format!("/tasks/{id}:subscribe"), None);
    assert_eq!(r.status, 200, "{}", r.text());
    let events = events_of(&r.text());
    assert_eq!(events[0]["task"]["id"], id);
    let last = &events[events.len() - 1]["statusUpdate"];
    assert_eq!(
        last["status"]["state"], "TASK_STATE_COMPLETED",
        "{events:?}"
    );
    for e in &events {
        if let Some(t) = e.pointer("/artifactUpdate/artifact/parts/0/data/token") {
            crate::secrets::remember(t.as_str().unwrap());
        }
    }
}

#[test]
fn the_extended_card_needs_the_token_and_tells_no_secret() {
    let c = Builder::default()
        .flag("-max-workers=7")
        .flag("-worker-ttl=2h")
        .flag("-max-worker-ttl=24h")
        .start();
    let r = call(&c, "GET", "/extendedAgentCard", None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("Cache-Control"), Some("private, max-age=300"));
    let card = r.json();
    let public = request(c.addr, "GET", "/.well-known/agent-card.json", &[], b"").json();
    assert_eq!(card["name"], public["name"]);
    assert_eq!(card["supportedInterfaces"], public["supportedInterfaces"]);
    assert_eq!(public["capabilities"]["extendedAgentCard"], true);
    let ext = &card["capabilities"]["extensions"][0];
    assert_eq!(ext["required"], false);
    let p = &ext["params"];
    assert_eq!(p["backend"], "docker");
    assert_eq!(p["maxWorkers"], 7);
    assert_eq!(p["workerTtlSeconds"], 7200);
    assert_eq!(p["maxWorkerTtlSeconds"], 86400);
    assert_eq!(p["workerReadyTimeoutSeconds"], 60);
    assert_eq!(p["version"], env!("CARGO_PKG_VERSION"));
    assert!(p["commit"].is_string());
    let ops: Vec<&str> = p["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation"].as_str().unwrap())
        .collect();
    assert_eq!(
        ops,
        ["create", "list", "stop", "logs", "watch", "renew", "suspend", "resume"]
    );
    assert!(!r.text().contains(TOKEN), "no secret in the extended card");
    // The same card over JSON-RPC.
    assert_eq!(c.rpc("GetExtendedAgentCard", json!({}))["result"], card);
    // Without the token: refused, on both bindings.
    let r = request(
        c.addr,
        "GET",
        &format!("{BASE}/extendedAgentCard"),
        &[],
        b"",
    );
    rest_error(&r, 401, "UNAUTHENTICATED");
    assert!(r.header("WWW-Authenticate").is_some());
}

#[test]
fn routes_methods_auth_content_type_and_limits() {
    let c = controller();
    // Unknown routes: 404 METHOD_NOT_FOUND, the path clipped in the message.
    for path in [
        "/",
        "/tasks/",
        "/tasks/x:pause",
        "/message:send/extra",
        "/acme/tasks",
        "/v1/message:send",
        "/tasks/a/b",
    ] {
        let r = call(&c, "GET", path, None);
        rest_error(&r, 404, "METHOD_NOT_FOUND");
    }
    // Outside the base path it is not the binding at all.
    assert_eq!(
        request(
            c.addr,
            "GET",
            "/a2a/restful",
            &[("Authorization", &auth())],
            b""
        )
        .status,
        404
    );
    // Wrong methods: 405 with Allow.
    for (method, path, allow) in [
        ("GET", "/message:send", "POST"),
        ("DELETE", "/tasks", "GET"),
        ("PUT", "/tasks/x:subscribe", "GET, POST"),
        ("POST", "/extendedAgentCard", "GET"),
        ("POST", "/tasks/x/pushNotificationConfigs/c", "GET, DELETE"),
    ] {
        let r = call(&c, method, path, None);
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.header("Allow"), Some(allow));
        assert_eq!(r.json()["error"]["code"], 405);
    }
    // Authentication comes first: a wrong or missing token is 401 whatever the route, body
    // or media type (nothing is parsed, nothing about routes is revealed).
    for (headers, path) in [
        (vec![], "/message:send"),
        (
            vec![("Authorization", "Bearer wrong-token-0000000000")],
            "/message:send",
        ),
        (vec![("Content-Type", "text/plain")], "/no/such/route"),
    ] {
        let r = request(
            c.addr,
            "POST",
            &format!("{BASE}{path}"),
            &headers,
            b"{not json",
        );
        rest_error(&r, 401, "UNAUTHENTICATED");
    }
    // Then the media type, before the body is parsed.
    let a = auth();
    let r = request(
        c.addr,
        "POST",
        &format!("{BASE}/message:send"),
        &[
            ("Authorization", &a),
            ("Content-Type", "application/x-www-form-urlencoded"),
        ],
        b"{not json",
    );
    rest_error(&r, 415, "CONTENT_TYPE_NOT_SUPPORTED");
    assert_eq!(
        r.header("Accept"),
        Some("application/json, application/a2a+json")
    );
    let r = request(
        c.addr,
        "POST",
        &format!("{BASE}/message:send"),
        &[
            ("Authorization", &a),
            ("Content-Type", "application/a2a+json"),
        ],
        b"{not json",
    );
    rest_error(&r, 400, "PARSE_ERROR");
    let r = request(
        c.addr,
        "POST",
        &format!("{BASE}/message:send"),
        &[("Authorization", &a)],
        b"[]",
    );
    rest_error(&r, 400, "INVALID_REQUEST");
    // A body over the limit: 413 and the connection closed.
    let big = vec![b' '; a2a_worker_controller::http::MAX_BODY + 1];
    let r = request(
        c.addr,
        "POST",
        &format!("{BASE}/message:send"),
        &[("Authorization", &a)],
        &big,
    );
    rest_error(&r, 413, "PAYLOAD_TOO_LARGE");
    // Hostile path segments are ids that match nothing, or no route.
    for path in [
        "/tasks/..%2F..%2Fetc%2Fpasswd",
        "/tasks/%2e%2e",
        "/tasks/%25",
        "/tasks/%C0%AF",
        "/tasks/<script>",
    ] {
        rest_error(&call(&c, "GET", path, None), 404, "TASK_NOT_FOUND");
    }
    for path in [
        "/tasks/%00",
        "/tasks/%0d%0aSet-Cookie:x",
        &format!("/tasks/{}", "a".repeat(300)),
    ] {
        let r = call(&c, "GET", path, None);
        rest_error(&r, 404, "METHOD_NOT_FOUND");
        assert!(r.header("Set-Cookie").is_none());
    }
    // The version service parameter, as a header or in the query.
    let r = request(
        c.addr,
        "GET",
        &format!("{BASE}/tasks"),
        &[("Authorization", &a), ("A2A-Version", "0.3")],
        b"",
    );
    rest_error(&r, 400, "VERSION_NOT_SUPPORTED");
    let r = call(&c, "GET", "/tasks?A2A-Version=1.0", None);
    assert_eq!(r.status, 200, "{}", r.text());
}
