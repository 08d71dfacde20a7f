//! The MCP front door on a real socket with the backend test double: both revisions
//! (2026-07-28 stateless, 2025-11-25 with a session any replica reads), the tools over the
//! control operations and their refusals, progress and cancellation of a waiting create,
//! workers as resources and `subscriptions/listen`, scopes, and hostile input answered as the
//! transport says with no crash. The official SDKs and the conformance suite are `mcp_sdk`'s.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::support::{controller_id, p50, reply_data, rounds, Controls, Proc};

use serde_json::{json, Value};

use crate::callers::{callers_file, ALICE, BOB};
use crate::secrets::remember as remember_secret;
use crate::support::*;

fn log_has(text: &str) -> bool {
    crate::secrets::captured_log().contains(text)
}

pub const MODERN: &str = "2026-07-28";

/// `_meta` of a 2026-07-28 request.
pub fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "integration", "version": "1"},
    })
}

/// A 2026-07-28 request's body and headers (the mirrored ones included).
pub fn modern(method: &str, mut params: Value) -> (Value, Vec<(String, String)>) {
    params["_meta"] = match params.get("_meta") {
        Some(Value::Object(extra)) => {
            let mut m = meta();
            for (k, v) in extra {
                m[k] = v.clone();
            }
            m
        }
        _ => meta(),
    };
    let mut headers = vec![
        ("MCP-Protocol-Version".to_string(), MODERN.to_string()),
        ("Mcp-Method".to_string(), method.to_string()),
    ];
    if let Some(name) = params
        .get("name")
        .or_else(|| params.get("uri"))
        .and_then(Value::as_str)
    {
        headers.push(("Mcp-Name".to_string(), name.to_string()));
    }
    // The arguments the tools mirror into headers (their x-mcp-header).
    let arguments = &params["arguments"];
    if let Some(id) = arguments["worker_id"].as_str() {
        headers.push(("Mcp-Param-Worker-Id".to_string(), id.to_string()));
    }
    if let (Some("create"), Some(task)) = (params["name"].as_str(), arguments["task"].as_str()) {
        let plain = task.bytes().all(|b| (b' '..=b'~').contains(&b)) && task.trim() == task;
        let value = match plain {
            true => task.to_string(),
            false => format!("=?base64?{}?=", base64(task.as_bytes())),
        };
        headers.push(("Mcp-Param-Task".to_string(), value));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    (body, headers)
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// POSTs `body` to `/mcp` as `token` with the usual Accept and Content-Type and `headers`.
pub fn post(
    addr: SocketAddr,
    token: &str,
    body: &[u8],
    headers: &[(String, String)],
) -> HttpResponse {
    let auth = format!("Bearer {token}");
    let mut all: Vec<(&str, &str)> = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    request(addr, "POST", "/mcp", &all, body)
}

/// A 2026-07-28 call of `method`; the JSON-RPC response (the last event of a stream).
pub fn call_modern(addr: SocketAddr, token: &str, method: &str, params: Value) -> Value {
    let (body, headers) = modern(method, params);
    let r = post(addr, token, body.to_string().as_bytes(), &headers);
    last_message(&r)
}

/// The JSON-RPC message of a response: its body, or its stream's last event.
pub fn last_message(r: &HttpResponse) -> Value {
    match r.header("Content-Type") {
        Some(t) if t.starts_with("text/event-stream") => events(&r.text())
            .pop()
            .unwrap_or_else(|| panic!("no event in {}", r.text())),
        _ => r.json(),
    }
}

/// The JSON of each `data:` line of an SSE body.
pub fn events(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
        .collect()
}

fn tool(addr: SocketAddr, token: &str, name: &str, arguments: Value) -> Value {
    let r = call_modern(
        addr,
        token,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    );
    assert!(r.get("error").is_none(), "{name}: {r}");
    r["result"].clone()
}

#[test]
fn an_agent_lists_the_tools_then_creates_lists_and_stops_a_worker_statelessly() {
    let c = controller();
    let listed = call_modern(c.addr, TOKEN, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for op in [
        "create",
        "list",
        "stop",
        "logs",
        "templates",
        "workspaces",
        "copy_workspace",
        "delete_workspace",
    ] {
        assert!(names.contains(&op), "{op} in {names:?}");
    }
    for t in &tools {
        assert!(
            t["title"].is_string() && t["description"].is_string(),
            "{t}"
        );
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    let create = tools.iter().find(|t| t["name"] == "create").unwrap();
    assert!(create["description"].as_str().unwrap().contains("secret"));
    assert_eq!(listed["result"]["resultType"], "complete");
    assert!(listed["result"]["ttlMs"].is_u64() && listed["result"]["cacheScope"].is_string());
    assert!(listed["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"].is_string());

    let created = tool(
        c.addr,
        TOKEN,
        "create",
        json!({"task": "mcp-1", "metadata": {"via": "mcp"}}),
    );
    assert_eq!(created["isError"], false, "{created}");
    let worker = created["structuredContent"]["worker"].clone();
    let token = created["structuredContent"]["token"]
        .as_str()
        .expect("the token");
    assert_eq!(token.len(), 64);
    remember_secret(token);
    let id = worker["worker_id"].as_str().unwrap().to_string();
    let text: Value =
        serde_json::from_str(created["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(
        text["worker"]["worker_id"],
        id.as_str(),
        "the text content is the same JSON"
    );

    let list = tool(c.addr, TOKEN, "list", json!({"metadata": {"via": "mcp"}}));
    assert_eq!(
        list["structuredContent"]["workers"][0]["worker_id"],
        id.as_str()
    );
    assert!(list["structuredContent"]["workers"][0]
        .get("token")
        .is_none());

    let stopped = tool(c.addr, TOKEN, "stop", json!({"worker_id": id}));
    assert_eq!(stopped["isError"], false, "{stopped}");
    let list = tool(c.addr, TOKEN, "list", json!({}));
    assert_eq!(list["structuredContent"]["workers"], json!([]));
}

#[test]
fn refusals_are_tool_errors_with_the_code_and_reason_a2a_gives() {
    let c = controller();
    tool(c.addr, TOKEN, "create", json!({"task": "twice"}));
    let again = tool(c.addr, TOKEN, "create", json!({"task": "twice"}));
    assert_eq!(again["isError"], true, "{again}");
    assert_eq!(again["structuredContent"]["error"]["code"], "worker_exists");
    assert!(again["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("worker_exists: "));
    let missing = tool(c.addr, TOKEN, "stop", json!({"worker_id": "nope"}));
    assert_eq!(missing["structuredContent"]["error"]["code"], "not_found");
    let typo = tool(c.addr, TOKEN, "create", json!({"tsak": "x"}));
    assert_eq!(
        typo["structuredContent"]["error"]["code"],
        "invalid_request"
    );
    assert!(typo["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("\"tsak\""));
    let bad_ttl = tool(
        c.addr,
        TOKEN,
        "create",
        json!({"task": "y", "ttl": "forever"}),
    );
    assert_eq!(
        bad_ttl["structuredContent"]["error"]["code"],
        "invalid_request"
    );
    // An unknown tool is a protocol error, named.
    let unknown = call_modern(
        c.addr,
        TOKEN,
        "tools/call",
        json!({"name": "reboot", "arguments": {}}),
    );
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(unknown["error"]["message"]
        .as_str()
        .unwrap()
        .contains("reboot"));
}

#[test]
fn a_create_with_a_progress_token_streams_its_steps_then_its_result() {
    let c = controller();
    let (body, headers) = modern(
        "tools/call",
        json!({"name": "create", "arguments": {"task": "progress"}, "_meta": {"progressToken": "p-1"}}),
    );
    let r = post(c.addr, TOKEN, body.to_string().as_bytes(), &headers);
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    let all = events(&r.text());
    let steps: Vec<&Value> = all
        .iter()
        .filter(|e| e["method"] == "notifications/progress")
        .collect();
    assert!(steps.len() >= 2, "{all:?}");
    assert!(steps.iter().all(|s| s["params"]["progressToken"] == "p-1"));
    let progress: Vec<u64> = steps
        .iter()
        .map(|s| s["params"]["progress"].as_u64().unwrap())
        .collect();
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    let last = all.last().unwrap();
    assert_eq!(last["id"], 1);
    assert_eq!(last["result"]["isError"], false);
    remember_secret(
        last["result"]["structuredContent"]["token"]
            .as_str()
            .unwrap(),
    );
}

/// Opens a streamed call and returns the connection after its head, for the test to read or
/// drop.
fn open_stream(
    addr: SocketAddr,
    token: &str,
    body: &Value,
    headers: &[(String, String)],
) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let text = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        text.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(text.as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            return reader;
        }
    }
}

/// The next `data:` event of a stream.
fn next_event(reader: &mut BufReader<TcpStream>) -> Value {
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended");
        // Chunked framing: size lines and blank lines pass by.
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            return serde_json::from_str(data).unwrap();
        }
    }
}

#[test]
fn closing_a_waiting_creates_stream_cancels_it_and_its_worker_is_stopped() {
    let c = controller();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(1500);
    let (body, headers) = modern(
        "tools/call",
        json!({"name": "create", "arguments": {"task": "cancelled"}, "_meta": {"progressToken": 9}}),
    );
    let mut reader = open_stream(c.addr, TOKEN, &body, &headers);
    let first = next_event(&mut reader);
    assert_eq!(first["method"], "notifications/progress", "{first}");
    drop(reader);
    // The create finishes in the engine, nobody will read its token: the worker goes.
    wait_until(
        "the cancelled create's worker is stopped",
        Duration::from_secs(20),
        || {
            c.backend.count() == 0
                && log_has("the client of create \"cancelled\" went away or cancelled it")
        },
    );
}

#[test]
fn a_session_from_initialize_is_read_back_by_another_replica_and_refused_to_another_caller() {
    let file = callers_file("mcp-session");
    let backend = std::sync::Arc::new(FakeBackend::default());
    let flag = format!("-a2a-callers-file={}", file.display());
    let one = Builder::default()
        .flag(&flag)
        .backend(backend.clone())
        .start();
    let two = Builder::default().flag(&flag).backend(backend).start();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let r = post(one.addr, ALICE, init.to_string().as_bytes(), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["result"]["protocolVersion"], "2025-11-25");
    // The session's GET stream announces a changing resource list.
    assert_eq!(
        r.json()["result"]["capabilities"]["resources"]["listChanged"],
        true
    );
    let session = r
        .header("Mcp-Session-Id")
        .expect("a session id")
        .to_string();
    let legacy = |addr, token, method: &str, params: Value, id: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": params});
        let headers = vec![
            ("Mcp-Session-Id".to_string(), id.to_string()),
            ("MCP-Protocol-Version".to_string(), "2025-11-25".to_string()),
        ];
        post(addr, token, body.to_string().as_bytes(), &headers)
    };
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let h = vec![("Mcp-Session-Id".to_string(), session.clone())];
    assert_eq!(
        post(one.addr, ALICE, note.to_string().as_bytes(), &h).status,
        202
    );
    // The other replica, which never saw the initialize, answers in the session.
    let created = legacy(
        two.addr,
        ALICE,
        "tools/call",
        json!({"name": "create", "arguments": {"task": "s"}}),
        &session,
    );
    let created = last_message(&created);
    assert_eq!(created["result"]["isError"], false, "{created}");
    remember_secret(
        created["result"]["structuredContent"]["token"]
            .as_str()
            .unwrap(),
    );
    assert!(
        created["result"].get("resultType").is_none(),
        "a 2025-11-25 result"
    );
    let listed = last_message(&legacy(
        one.addr,
        ALICE,
        "tools/call",
        json!({"name": "list"}),
        &session,
    ));
    assert_eq!(
        listed["result"]["structuredContent"]["workers"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Bob, with alice's session id: a session it does not have.
    assert_eq!(
        legacy(two.addr, BOB, "tools/list", json!({}), &session).status,
        404
    );
    assert_eq!(
        legacy(
            one.addr,
            ALICE,
            "tools/list",
            json!({}),
            "2025-11-25.0000000000000000.000000000000000000000000"
        )
        .status,
        404
    );
    // Alice's worker is not bob's to stop, through MCP too.
    let bob_init = post(two.addr, BOB, init.to_string().as_bytes(), &[]);
    let bob = bob_init.header("Mcp-Session-Id").unwrap().to_string();
    let id = created["result"]["structuredContent"]["worker"]["worker_id"]
        .as_str()
        .unwrap();
    let stop = last_message(&legacy(
        one.addr,
        BOB,
        "tools/call",
        json!({"name": "stop", "arguments": {"worker_id": id}}),
        &bob,
    ));
    assert_eq!(
        stop["result"]["structuredContent"]["error"]["code"], "not_found",
        "{stop}"
    );
    let seen = last_message(&legacy(one.addr, BOB, "resources/list", json!({}), &bob));
    assert_eq!(seen["result"]["resources"], json!([]), "{seen}");
    // The session's GET stream (on the other replica) hears alice's workers come; bob's id
    // there, or none, is refused.
    let get = |addr, token, id: &str| {
        let auth = format!("Bearer {token}");
        let headers = [
            ("Authorization", auth.as_str()),
            ("Mcp-Session-Id", id),
            ("Accept", "text/event-stream"),
        ];
        request(addr, "GET", "/mcp", &headers, b"")
    };
    assert_eq!(get(two.addr, BOB, &session).status, 404);
    let mut stream = {
        let mut s = TcpStream::connect(two.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let head = format!("GET /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE}\r\nMcp-Session-Id: {session}\r\nAccept: text/event-stream\r\n\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        while line != "\r\n" {
            line.clear();
            r.read_line(&mut line).unwrap();
        }
        r
    };
    let more = legacy(
        one.addr,
        ALICE,
        "tools/call",
        json!({"name": "create", "arguments": {"task": "s2"}}),
        &session,
    );
    remember_secret(
        last_message(&more)["result"]["structuredContent"]["token"]
            .as_str()
            .unwrap(),
    );
    let heard = next_event(&mut stream);
    assert_eq!(
        heard["method"], "notifications/resources/list_changed",
        "{heard}"
    );
    // ping is a handshake revision's; 2026-07-28 removed it.
    assert_eq!(
        last_message(&legacy(one.addr, ALICE, "ping", json!({}), &session))["result"],
        json!({})
    );
    assert_eq!(
        call_modern(one.addr, ALICE, "ping", json!({}))["error"]["code"],
        -32601
    );
}

#[test]
fn a_legacy_cancellation_stops_the_create_it_names() {
    let c = controller();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(1500);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let session = post(c.addr, TOKEN, init.to_string().as_bytes(), &[])
        .header("Mcp-Session-Id")
        .unwrap()
        .to_string();
    let h = vec![("Mcp-Session-Id".to_string(), session.clone())];
    let body = json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call", "params": {"name": "create", "arguments": {"task": "legacy-cancel"}, "_meta": {"progressToken": "t"}}});
    let mut reader = open_stream(c.addr, TOKEN, &body, &h);
    assert_eq!(next_event(&mut reader)["method"], "notifications/progress");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "c-1", "reason": "changed my mind"}});
    assert_eq!(
        post(c.addr, TOKEN, cancel.to_string().as_bytes(), &h).status,
        202
    );
    wait_until(
        "the cancelled create's worker is stopped",
        Duration::from_secs(20),
        || {
            c.backend.count() == 0
                && log_has("the client of create \"legacy-cancel\" went away or cancelled it")
        },
    );
}

#[test]
fn workers_are_resources_and_a_listen_hears_them_come_and_change() {
    let c = controller();
    let (body, headers) = modern(
        "subscriptions/listen",
        json!({"notifications": {"resourcesListChanged": true, "toolsListChanged": true}}),
    );
    let mut listen = open_stream(c.addr, TOKEN, &body, &headers);
    let ack = next_event(&mut listen);
    assert_eq!(
        ack["method"], "notifications/subscriptions/acknowledged",
        "{ack}"
    );
    assert_eq!(
        ack["params"]["notifications"],
        json!({"resourcesListChanged": true})
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        1
    );
    let created = tool(c.addr, TOKEN, "create", json!({"task": "res"}));
    remember_secret(created["structuredContent"]["token"].as_str().unwrap());
    let changed = next_event(&mut listen);
    assert_eq!(
        changed["method"], "notifications/resources/list_changed",
        "{changed}"
    );
    let id = created["structuredContent"]["worker"]["worker_id"]
        .as_str()
        .unwrap();
    let uri = format!("a2a-worker://workers/{id}");
    let list = call_modern(c.addr, TOKEN, "resources/list", json!({}));
    assert_eq!(
        list["result"]["resources"][0]["uri"],
        uri.as_str(),
        "{list}"
    );
    let read = call_modern(c.addr, TOKEN, "resources/read", json!({"uri": uri}));
    let record: Value =
        serde_json::from_str(read["result"]["contents"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(record["worker_id"], id);
    let logs = call_modern(
        c.addr,
        TOKEN,
        "resources/read",
        json!({"uri": format!("{uri}/logs")}),
    );
    assert_eq!(
        logs["result"]["contents"][0]["mimeType"], "text/plain",
        "{logs}"
    );
    let gone = call_modern(
        c.addr,
        TOKEN,
        "resources/read",
        json!({"uri": "a2a-worker://workers/nope"}),
    );
    assert_eq!(gone["error"]["code"], -32602, "{gone}");
    let templates = call_modern(c.addr, TOKEN, "resources/templates/list", json!({}));
    assert_eq!(
        templates["result"]["resourceTemplates"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn hostile_input_to_mcp_is_answered_as_the_transport_says() {
    let c = controller();
    let (ok_body, ok_headers) = modern("tools/list", json!({}));
    let send = |body: &[u8], headers: &[(String, String)]| post(c.addr, TOKEN, body, headers);
    let h = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let modern_headers = h(&[
        ("MCP-Protocol-Version", MODERN),
        ("Mcp-Method", "tools/list"),
    ]);
    // Not JSON; a batch; not an object; a response.
    let r = send(b"{\"jsonrpc\": \"2.0\", \"id\": 1,", &modern_headers);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32700))
    );
    let batch = json!([ok_body.clone(), ok_body.clone()]).to_string();
    let r = send(batch.as_bytes(), &modern_headers);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32600))
    );
    assert_eq!(send(b"42", &modern_headers).status, 400);
    assert_eq!(
        send(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, &modern_headers).status,
        400
    );
    // Unknown methods: 404 and -32601 in 2026-07-28, with the request's id.
    let (body, headers) = modern("tools/destroy", json!({}));
    let r = send(body.to_string().as_bytes(), &headers);
    assert_eq!(
        (
            r.status,
            r.json()["error"]["code"].as_i64(),
            r.json()["id"].as_i64()
        ),
        (404, Some(-32601), Some(1))
    );
    let (body, headers) = modern("initialize", json!({}));
    assert_ne!(send(body.to_string().as_bytes(), &headers).status, 500);
    // The version: missing, not served, contradicted by its header.
    let no_meta = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}});
    let r = send(no_meta.to_string().as_bytes(), &modern_headers);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32602))
    );
    let mut old = ok_body.clone();
    old["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let r = send(
        old.to_string().as_bytes(),
        &h(&[
            ("MCP-Protocol-Version", "1900-01-01"),
            ("Mcp-Method", "tools/list"),
        ]),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32022))
    );
    assert_eq!(r.json()["error"]["data"]["supported"][0], MODERN);
    let r = send(
        ok_body.to_string().as_bytes(),
        &h(&[("Mcp-Method", "tools/list")]),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    let r = send(
        ok_body.to_string().as_bytes(),
        &h(&[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
        ]),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    let (body, _) = modern("tools/call", json!({"name": "list"}));
    let r = send(
        body.to_string().as_bytes(),
        &h(&[
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "stop"),
        ]),
    );
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    // An argument a tool mirrors into a header: missing, or not what the body says.
    let (body, mut headers) = modern(
        "tools/call",
        json!({"name": "stop", "arguments": {"worker_id": "w-1"}}),
    );
    headers.retain(|(k, _)| k != "Mcp-Param-Worker-Id");
    let r = send(body.to_string().as_bytes(), &headers);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020)),
        "{}",
        r.text()
    );
    headers.push(("Mcp-Param-Worker-Id".into(), "w-2".into()));
    let r = send(body.to_string().as_bytes(), &headers);
    assert_eq!(
        (r.status, r.json()["error"]["code"].as_i64()),
        (400, Some(-32020))
    );
    let (body, headers) = modern(
        "tools/call",
        json!({"name": "create", "arguments": {"task": "überall "}}),
    );
    assert!(headers
        .iter()
        .any(|(k, v)| k == "Mcp-Param-Task" && v.starts_with("=?base64?")));
    let r = last_message(&send(body.to_string().as_bytes(), &headers));
    assert_eq!(
        r["result"]["isError"], false,
        "a base64 header is decoded: {r}"
    );
    remember_secret(r["result"]["structuredContent"]["token"].as_str().unwrap());
    // Arguments that are not an object; an oversized argument; a body over the limit.
    let (body, headers) = modern("tools/call", json!({"name": "list", "arguments": [1]}));
    assert_eq!(
        send(body.to_string().as_bytes(), &headers).json()["error"]["code"],
        -32602
    );
    let (body, headers) = modern(
        "tools/call",
        json!({"name": "create", "arguments": {"task": "x".repeat(10_000)}}),
    );
    let r = last_message(&send(body.to_string().as_bytes(), &headers));
    assert_eq!(
        r["result"]["structuredContent"]["error"]["code"], "invalid_request",
        "{r}"
    );
    let huge = vec![b' '; 2 << 20];
    assert_eq!(send(&huge, &ok_headers).status, 413);
    // A browser page on another origin gets nothing, not even a 401.
    let evil = request(
        c.addr,
        "POST",
        "/mcp",
        &[
            ("Origin", "http://evil.example.com"),
            ("Content-Type", "application/json"),
        ],
        ok_body.to_string().as_bytes(),
    );
    assert_eq!(evil.status, 403);
    let own = format!("http://localhost:{}", c.addr.port());
    let mut with_origin = ok_headers.clone();
    with_origin.push(("Origin".into(), own));
    assert_eq!(
        send(ok_body.to_string().as_bytes(), &with_origin).status,
        200
    );
    // Accept without SSE; GET and DELETE; a notification; credentials.
    let auth = format!("Bearer {TOKEN}");
    let mut no_sse: Vec<(&str, &str)> = vec![
        ("Authorization", &auth),
        ("Content-Type", "application/json"),
        ("Accept", "application/json"),
    ];
    no_sse.extend(ok_headers.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(
        request(
            c.addr,
            "POST",
            "/mcp",
            &no_sse,
            ok_body.to_string().as_bytes()
        )
        .status,
        406
    );
    for method in ["GET", "DELETE"] {
        let r = request(c.addr, method, "/mcp", &[("Authorization", &auth)], b"");
        assert_eq!((r.status, r.header("Allow")), (405, Some("GET, POST")));
    }
    let note = json!({"jsonrpc": "2.0", "method": "notifications/whatever"});
    assert_eq!(send(note.to_string().as_bytes(), &[]).status, 202);
    let r = request(
        c.addr,
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        ok_body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 401);
    assert!(r
        .header("WWW-Authenticate")
        .is_some_and(|v| v.starts_with("Bearer")));
    // Still answering.
    assert!(call_modern(c.addr, TOKEN, "tools/list", json!({}))["result"]["tools"].is_array());
}

#[test]
fn a_caller_past_its_streams_is_answered_429_as_over_a2a() {
    let c = Builder::default().flag("-max-admin-streams=1").start();
    let (body, headers) = modern(
        "subscriptions/listen",
        json!({"notifications": {"resourcesListChanged": true}}),
    );
    let mut first = open_stream(c.addr, TOKEN, &body, &headers);
    let ack = next_event(&mut first);
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    let second = post(c.addr, TOKEN, body.to_string().as_bytes(), &headers);
    assert_eq!(second.status, 429, "{}", second.text());
    assert!(second.header("Retry-After").is_some());
    assert_eq!(second.json()["jsonrpc"], "2.0");
    // A call that streams nothing is not held back by the stream's place.
    let (list, list_headers) = modern("tools/list", json!({}));
    assert_eq!(
        post(c.addr, TOKEN, list.to_string().as_bytes(), &list_headers).status,
        200
    );
    // The place is given back when the stream's client goes.
    drop(first);
    wait_until(
        "the stream's place is free again",
        Duration::from_secs(10),
        || {
            let mut s = TcpStream::connect(c.addr).unwrap();
            let text = body.to_string();
            let mut head = format!(
            "POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
            text.len()
        );
            for (k, v) in &headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            s.write_all(head.as_bytes()).unwrap();
            s.write_all(text.as_bytes()).unwrap();
            let mut line = String::new();
            BufReader::new(s).read_line(&mut line).unwrap();
            line.starts_with("HTTP/1.1 200")
        },
    );
}

#[test]
fn server_discover_names_both_revisions_and_mcp_false_turns_the_endpoint_off() {
    let c = controller();
    let d = call_modern(c.addr, TOKEN, "server/discover", json!({}));
    assert_eq!(
        d["result"]["supportedVersions"],
        json!([MODERN, "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    assert!(d["result"]["capabilities"]["tools"].is_object());
    assert_eq!(
        d["result"]["capabilities"]["resources"]["listChanged"],
        true
    );
    let off = Builder::default().flag("-mcp=false").start();
    let (body, headers) = modern("tools/list", json!({}));
    assert_eq!(
        post(off.addr, TOKEN, body.to_string().as_bytes(), &headers).status,
        404
    );
}

/// An MCP request as raw HTTP/1.1 on a keep-alive connection: `method` with `params`.
fn raw_mcp(method: &str, params: Value) -> Vec<u8> {
    let (body, headers) = modern(method, params);
    let body = body.to_string();
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// p50 of `rounds` exchanges of each request, taken in turn on one keep-alive connection each
/// (so both see the same moments of the machine).
fn p50s(addr: SocketAddr, requests: &[&[u8]], rounds: usize) -> Vec<Duration> {
    use crate::docker_bench::{connect, exchange};
    let mut conns: Vec<TcpStream> = requests
        .iter()
        .map(|_| connect(addr).expect("connect"))
        .collect();
    let mut samples: Vec<Vec<Duration>> = requests.iter().map(|_| Vec::new()).collect();
    let mut buf = Vec::new();
    for round in 0..rounds + 10 {
        for (i, request) in requests.iter().enumerate() {
            let started = std::time::Instant::now();
            exchange(&mut conns[i], request, &mut buf).expect("an answer");
            if round >= 10 {
                samples[i].push(started.elapsed());
            }
        }
    }
    samples.into_iter().map(p50).collect()
}

/// The MCP figures on the real engine: `tools/call` list with 30 workers ÷ the A2A `list`
/// through the same controller, and `tools/list` ÷ the Agent Card, p50 each.
#[test]
#[ignore = "a benchmark: scripts/bench.sh runs it"]
fn docker_bench_mcp() {
    use crate::docker_bench::{ms, row};
    use crate::docker_support::{docker_socket, Cleanup};
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("bench-mcp");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(&socket, &id, &[]);
    for i in 0..30 {
        reply_data(&p.control(json!({"operation": "create", "task": format!("bench-{i}")})));
    }
    let n = rounds("BENCH_ROUNDS", 200);
    let a2a = crate::docker_bench::list_request();
    let mcp = raw_mcp("tools/call", json!({"name": "list", "arguments": {}}));
    let listed = call_modern(
        p.addr,
        TOKEN,
        "tools/call",
        json!({"name": "list", "arguments": {}}),
    );
    let workers = listed["result"]["structuredContent"]["workers"]
        .as_array()
        .map(Vec::len);
    assert_eq!(workers, Some(30), "{listed}");
    let [mcp_list, a2a_list] = p50s(p.addr, &[&mcp, &a2a], n)[..] else {
        unreachable!()
    };
    row(
        "MCP tools/call list ÷ A2A list, 30 workers, p50 (real engine)",
        &format!(
            "{:.2} ms ÷ {:.2} ms = ×{:.2}",
            ms(mcp_list),
            ms(a2a_list),
            mcp_list.as_secs_f64() / a2a_list.as_secs_f64()
        ),
        "≤ ×1.10",
    );
    let card = b"GET /.well-known/agent-card.json HTTP/1.1\r\nHost: bench\r\n\r\n".to_vec();
    let tools = raw_mcp("tools/list", json!({}));
    let [tools_list, card] = p50s(p.addr, &[&tools, &card], n)[..] else {
        unreachable!()
    };
    row(
        "MCP tools/list ÷ the Agent Card, p50",
        &format!(
            "{:.3} ms ÷ {:.3} ms = ×{:.2}",
            ms(tools_list),
            ms(card),
            tools_list.as_secs_f64() / card.as_secs_f64()
        ),
        "≤ ×1.5",
    );
    drop(p);
    drop(cleanup);
}
