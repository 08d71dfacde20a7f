//! Hostile protocol input from an authenticated caller: malformed JSON, a wrong type in every
//! field, deep nesting, huge strings, control and bidi characters, label- and header-injection
//! attempts, bearer tokens of every wrong length. Each gets its documented answer; nothing is
//! created.

use serde_json::{json, Value};

use crate::support::*;

fn create_request(task: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "h", "method": "SendMessage", "params": {
        "message": {"messageId": "m", "role": "ROLE_USER", "contextId": "c",
            "parts": [{"data": {"operation": "create", "task": task}}]},
        "configuration": {"historyLength": 1, "returnImmediately": false,
            "acceptedOutputModes": ["application/json"]}}})
}

/// Every JSON pointer to a value inside `v`.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{at}/{k}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        _ => {}
    }
}

fn same_type(a: &Value, b: &Value) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

#[test]
fn malformed_json_is_a_parse_error() {
    let c = controller();
    for body in [
        "",
        " ",
        "{",
        "}",
        "[",
        "{\"jsonrpc\":\"2.0\",}",
        "{'jsonrpc':'2.0'}",
        "nul",
        "\u{feff}{}",
        "{\"a\":1}{\"b\":2}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ListTasks\"",
        "\"\\ud800\"x",
    ] {
        let r = c.post_json(body, &[]);
        assert_eq!(r["error"]["code"], -32700, "{body:?}: {r}");
        assert_eq!(r["id"], Value::Null);
    }
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        c.addr,
        "POST",
        "/a2a",
        &[("Authorization", &auth)],
        b"{\"x\":\"\xff\xfe\"}",
    );
    assert_eq!(r.json()["error"]["code"], -32700, "invalid UTF-8");
    assert_eq!(c.backend.count(), 0);
}

#[test]
fn a_wrong_type_in_every_field_creates_nothing() {
    let c = controller();
    let base = create_request(json!("typed"));
    let mut paths = Vec::new();
    pointers(&base, String::new(), &mut paths);
    let wrong = [
        Value::Null,
        json!(7),
        json!(-1.5),
        json!("s"),
        json!(true),
        json!([]),
        json!([1]),
        json!({}),
        json!({"k": 1}),
    ];
    let mut cases = 0;
    for path in &paths {
        let original = base.pointer(path).unwrap().clone();
        for w in wrong.iter().filter(|w| !same_type(w, &original)) {
            let mut req = base.clone();
            *req.pointer_mut(path).unwrap() = w.clone();
            cases += 1;
            let r = c.post_json(&req.to_string(), &[]);
            let ok = r["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED";
            if ok {
                // Tolerated (an ignored or optional field): the one worker it made is removed.
                let id = r["result"]["task"]["artifacts"][0]["parts"][0]["data"]["worker"]
                    ["worker_id"]
                    .clone();
                c.control(json!({"operation": "stop", "worker_id": id}));
            } else {
                let code = &r["error"]["code"];
                let state = &r["result"]["task"]["status"]["state"];
                assert!(
                    [json!(-32600), json!(-32602), json!(-32005)].contains(code)
                        || state == "TASK_STATE_REJECTED",
                    "{path} = {w}: {r}"
                );
            }
            assert_eq!(c.backend.count(), 0, "{path} = {w}");
        }
    }
    assert!(cases > 100, "{cases} mutations");
}

#[test]
fn deep_nesting_does_not_overflow_the_stack() {
    let c = controller();
    for depth in [200, 10_000, 150_000] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"messageId":"m","role":"ROLE_USER","parts":[{{"data":{nested}}}]}}}}}}"#
        );
        let r = c.post_json(&body, &[]);
        assert_eq!(r["error"]["code"], -32700, "depth {depth}");
        let obj = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
        let r = c.post_json(&obj, &[]);
        assert_eq!(r["error"]["code"], -32700, "object depth {depth}");
    }
    // Within the parser's limit, nested data is carried and ignored.
    let nested = format!("{}{}", "[".repeat(100), "]".repeat(100));
    let data: Value = serde_json::from_str(&nested).unwrap();
    let task = c.send(json!({"message": message(vec![json!({"data": data}), json!({"data": {"operation": "list"}})])}));
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(request(c.addr, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn huge_strings_and_odd_characters_in_tasks() {
    let c = controller();
    let rejected = [
        "x".repeat(900_000),
        "a".repeat(257),
        "nul\u{0}byte".into(),
        "bell\u{7}".into(),
        "line\nbreak".into(),
        "cr\rlf".into(),
        "tab\there".into(),
        "esc\u{1b}[31mred".into(),
        "del\u{7f}".into(),
        "c1\u{85}next".into(),
        "rtl\u{202e}evil".into(),
        "iso\u{2066}late".into(),
        "x\nowner=evil".into(),
        "  ".into(),
    ];
    for task in rejected {
        let t = c.send(json!({"message": message(vec![json!({"data": {"operation": "create", "task": task}})])}));
        assert_eq!(
            control_error(&t, "TASK_STATE_REJECTED")["code"],
            "invalid_request"
        );
    }
    assert_eq!(c.backend.count(), 0);
    // Printable unicode and label-looking text are ordinary task names, kept exactly.
    for task in [
        "日本語のタスク",
        "emoji 🚀 task",
        "a=b,c",
        "a2a-worker-controller/owner=other",
        "x".repeat(256).as_str(),
    ] {
        let t = c.control(json!({"operation": "create", "task": task}));
        assert_eq!(reply_data(&t)["worker"]["task"], task);
    }
    assert_eq!(c.backend.count(), 5);
}

#[test]
fn nothing_a_client_sends_reaches_a_response_header() {
    let c = controller();
    for path in [
        "/healthz%0d%0aSet-Cookie:%20evil=1",
        "/a2a%0d%0aX-Injected:%201",
        "/.well-known/agent-card.json?x=%0d%0aX-Injected:1",
    ] {
        let r = request(
            c.addr,
            "GET",
            path,
            &[("A2A-Version", "1.0\tX-Injected: 1")],
            b"",
        );
        assert!(
            r.header("Set-Cookie").is_none() && r.header("X-Injected").is_none(),
            "{path}: {r:?}"
        );
    }
    let auth = format!("Bearer {TOKEN}");
    let body =
        json!({"jsonrpc": "2.0", "id": "1\r\nX-Injected: 1", "method": "ListTasks", "params": {}})
            .to_string();
    let r = request(
        c.addr,
        "POST",
        "/a2a?A2A-Version=1.0%0d%0aX-Injected:1",
        &[("Authorization", &auth)],
        body.as_bytes(),
    );
    assert!(r.header("X-Injected").is_none());
    assert_eq!(
        r.json()["error"]["code"],
        -32009,
        "the odd version is refused, in the body"
    );
}

#[test]
fn bearer_tokens_of_every_wrong_length_are_refused() {
    let c = controller();
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m","role":"ROLE_USER","parts":[{"data":{"operation":"create","task":"t"}}]}}}"#;
    let mut tokens: Vec<String> = (0..TOKEN.len() + 3)
        .filter(|n| *n != TOKEN.len())
        .map(|n| TOKEN.chars().cycle().take(n).collect())
        .collect();
    tokens.push("x".repeat(12_000));
    tokens.push(format!("{TOKEN} {TOKEN}"));
    tokens.push(TOKEN.to_uppercase());
    for t in tokens {
        let auth = format!("Bearer {t}");
        let r = request(
            c.addr,
            "POST",
            "/a2a",
            &[("Authorization", &auth)],
            body.as_bytes(),
        );
        assert_eq!(r.status, 401, "{} characters", t.len());
    }
    assert_eq!(c.backend.count(), 0);
}
