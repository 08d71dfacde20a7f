//! Every JSON-RPC error path over a real socket, with exact codes and ErrorInfo reasons.

use serde_json::{json, Value};

use crate::support::*;

fn raw_error(c: &Controller, body: &str) -> Value {
    let r = c.post_json(body, &[]);
    assert!(r.get("result").is_none(), "{r}");
    r
}

#[test]
fn a_broken_envelope_is_a_jsonrpc_error_with_the_id_when_there_is_one() {
    let c = controller();
    let r = raw_error(&c, "{not json");
    assert_eq!(r["error"]["code"], -32700);
    assert_eq!(r["id"], Value::Null);
    assert_eq!(r["jsonrpc"], "2.0");

    for (body, id) in [
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ListTasks"}]"#,
            Value::Null,
        ),
        (r#""just a string""#, Value::Null),
        (r#"{"jsonrpc":"1.0","id":7,"method":"ListTasks"}"#, json!(7)),
        (r#"{"id":"a","method":"ListTasks"}"#, json!("a")),
        (r#"{"jsonrpc":"2.0","id":"a"}"#, json!("a")),
        (r#"{"jsonrpc":"2.0","id":"a","method":5}"#, json!("a")),
        (
            r#"{"jsonrpc":"2.0","id":{"x":1},"method":"ListTasks"}"#,
            Value::Null,
        ),
        (r#"{"jsonrpc":"2.0","method":"ListTasks"}"#, Value::Null),
    ] {
        let r = raw_error(&c, body);
        assert_eq!(r["error"]["code"], -32600, "{body}: {r}");
        assert_eq!(r["id"], id, "{body}");
    }

    let r = raw_error(
        &c,
        r#"{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{}}"#,
    );
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(r["id"], 3);
    let r = raw_error(
        &c,
        r#"{"jsonrpc":"2.0","id":null,"method":"ListTasks","params":[1]}"#,
    );
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["id"], Value::Null);
}

#[test]
fn ids_are_echoed_with_their_type() {
    let c = controller();
    for id in [json!("abc"), json!(42), json!(1.5), Value::Null] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "ListTasks", "params": {}});
        let r = c.post_json(&body.to_string(), &[]);
        assert_eq!(r["id"], id);
        assert!(r["result"].is_object(), "{r}");
    }
}

#[test]
fn send_message_params_are_validated() {
    let c = controller();
    let list = json!({"data": {"operation": "list"}});
    for params in [
        json!({}),
        json!({"message": "x"}),
        json!({"message": {"role": "ROLE_USER", "parts": [list]}}),
        json!({"message": {"messageId": "", "role": "ROLE_USER", "parts": [list]}}),
        json!({"message": {"messageId": "m", "parts": [list]}}),
        json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [list]}}),
        json!({"message": {"messageId": "m", "role": "user", "parts": [list]}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER"}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"kind": "data"}]}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "a", "data": {}}]}}),
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": 5}]}}),
        json!({"message": {"messageId": 5, "role": "ROLE_USER", "parts": [list]}}),
        json!({"message": message(vec![list.clone()]), "configuration": {"historyLength": -1}}),
        json!({"message": message(vec![list.clone()]), "configuration": {"returnImmediately": "yes"}}),
        json!({"message": message(vec![list.clone()]), "configuration": 3}),
    ] {
        let e = c.rpc_error("SendMessage", params.clone());
        assert_eq!(e["code"], -32602, "{params}: {e}");
    }
    let e = c.rpc_error("SendMessage", Value::Null);
    assert_eq!(e["code"], -32602);
}

#[test]
fn v1_part_forms_and_snake_case_aliases_are_accepted() {
    let c = controller();
    let task = c.send(json!({"message": {
        "message_id": "m-9", "role": 1, "context_id": "ctx-snake",
        "parts": [{"text": "please list"}, {"url": "https://x/y", "media_type": "text/plain"},
                  {"data": {"operation": "list"}, "metadata": {"a": 1}}],
        "unknownField": true}}));
    assert_eq!(reply_data(&task)["workers"], json!([]));
    assert_eq!(task["contextId"], "ctx-snake");
    let e = c.rpc_error("GetTask", json!({"id": "nope", "history_length": 1}));
    assert_eq!(e["code"], -32001);
}

#[test]
fn a2a_specific_errors_carry_error_info() {
    let c = controller();
    let e = c.rpc_error("GetTask", json!({"id": "no-such-task"}));
    assert_eq!(e["code"], -32001);
    assert_eq!(error_reason(&e), "TASK_NOT_FOUND");
    assert_eq!(
        e["data"][0]["@type"],
        "type.googleapis.com/google.rpc.ErrorInfo"
    );
    assert_eq!(e["data"][0]["domain"], "a2a-protocol.org");
    assert_eq!(e["data"][0]["metadata"]["taskId"], "no-such-task");
    assert_eq!(
        c.rpc_error("CancelTask", json!({"id": "x"}))["code"],
        -32001
    );
    assert_eq!(c.rpc_error("GetTask", json!({}))["code"], -32602);
    assert_eq!(c.rpc_error("GetTask", json!({"id": 5}))["code"], -32602);

    let task = c.control(json!({"operation": "list"}));
    let id = task["id"].as_str().unwrap();
    let e = c.rpc_error("CancelTask", json!({"id": id}));
    assert_eq!(e["code"], -32002);
    assert_eq!(error_reason(&e), "TASK_NOT_CANCELABLE");

    // (Streaming is answered as events: tests/integration/streaming.rs.)
    // Push configs belong to running tasks: a finished one refuses, an unknown one is not
    // found (the methods themselves: tests/integration/push.rs).
    for method in [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ] {
        let e = c.rpc_error(
            method,
            json!({"taskId": "no-such-task", "id": "c", "url": "https://example.com/"}),
        );
        assert_eq!(e["code"], -32001, "{method}");
        assert_eq!(error_reason(&e), "TASK_NOT_FOUND");
    }
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": "https://example.com/"}),
    );
    assert_eq!(e["code"], -32004);
    assert_eq!(error_reason(&e), "UNSUPPORTED_OPERATION");
}

#[test]
fn a_message_to_an_unknown_task_another_context_or_a_finished_task_is_refused() {
    let c = controller();
    let task = c.control(json!({"operation": "list"}));
    let (id, ctx) = (
        task["id"].as_str().unwrap(),
        task["contextId"].as_str().unwrap(),
    );
    let mut m = message(vec![json!({"data": {"operation": "list"}})]);
    m["taskId"] = json!("unknown-task");
    let e = c.rpc_error("SendMessage", json!({"message": m.clone()}));
    assert_eq!(
        (e["code"].clone(), error_reason(&e)),
        (json!(-32001), "TASK_NOT_FOUND")
    );
    m["taskId"] = json!(id);
    m["contextId"] = json!("another-context");
    assert_eq!(
        c.rpc_error("SendMessage", json!({"message": m.clone()}))["code"],
        -32602
    );
    m["contextId"] = json!(ctx);
    let e = c.rpc_error("SendMessage", json!({"message": m}));
    assert_eq!(
        (e["code"].clone(), error_reason(&e)),
        (json!(-32004), "UNSUPPORTED_OPERATION")
    );
}

#[test]
fn only_a2a_version_1_0_or_none_is_served() {
    let c = controller();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).to_string();
    assert!(c.post_json(&body, &[("A2A-Version", "1.0")])["result"].is_object());
    assert!(
        c.post_json(&body, &[])["result"].is_object(),
        "absent = 1.0"
    );
    for v in ["0.3", "2.0", "1", ""] {
        let r = c.post_json(&body, &[("A2A-Version", v)]);
        if v.is_empty() {
            // An empty header value is a present but unsupported version.
            assert_eq!(r["error"]["code"], -32009, "{r}");
            continue;
        }
        assert_eq!(r["error"]["code"], -32009, "{v}: {r}");
        assert_eq!(error_reason(&r["error"]), "VERSION_NOT_SUPPORTED");
    }
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        c.addr,
        "POST",
        "/a2a?A2A-Version=0.3",
        &[("Authorization", &auth)],
        body.as_bytes(),
    );
    assert_eq!(r.json()["error"]["code"], -32009);
    let r = c.post_json(
        &body,
        &[("A2A-Extensions", " https://x/e1 , https://x/e1,")],
    );
    assert!(
        r["result"].is_object(),
        "unknown extensions are ignored: {r}"
    );
}

#[test]
fn a_reply_only_in_a_mode_the_caller_cannot_accept_is_refused() {
    let c = controller();
    let m = message(vec![json!({"data": {"operation": "list"}})]);
    let e = c.rpc_error(
        "SendMessage",
        json!({"message": m.clone(), "configuration": {"acceptedOutputModes": ["text/plain"]}}),
    );
    assert_eq!(e["code"], -32005);
    assert_eq!(error_reason(&e), "CONTENT_TYPE_NOT_SUPPORTED");
    c.send(json!({"message": m, "configuration": {"acceptedOutputModes": ["application/json"]}}));
}
