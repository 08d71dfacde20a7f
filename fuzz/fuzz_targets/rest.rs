//! HTTP+JSON requests (method, path, query, body) through the REST binding and the service,
//! over a backend that refuses everything. Input: a first line `METHOD PATH[?QUERY]`, then
//! the body. Every answer is JSON: an error's `error.code` is its HTTP status, a stream's
//! every event is one `StreamResponse`.
#![no_main]
use std::sync::OnceLock;

use a2a_worker_controller::a2a::{Rest, RestBody, ServiceParams};
use a2a_worker_controller::control::Caller;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{events, service, Collect};

fn binding() -> &'static Rest {
    static B: OnceLock<Rest> = OnceLock::new();
    B.get_or_init(|| Rest::new(service()))
}

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|b| *b == b'\n').unwrap_or(data.len());
    let Ok(line) = std::str::from_utf8(&data[..split]) else {
        return;
    };
    let body = data.get(split + 1..).unwrap_or(&[]);
    let (method, target) = line.split_once(' ').unwrap_or(("GET", line));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let answer = binding().handle(&Caller::admin(), &ServiceParams::default(), method, path, query, body);
    match answer.body {
        RestBody::Json(text) => {
            let v: serde_json::Value = serde_json::from_str(&text).expect("every answer is JSON");
            if answer.status == 200 {
                assert!(v.is_object());
            } else {
                assert_eq!(v["error"]["code"], answer.status, "{text}");
                assert!(v["error"]["details"][0]["reason"].is_string(), "{text}");
            }
        }
        RestBody::Events(stream) => {
            assert_eq!(answer.status, 200);
            let mut sink = Collect(Vec::new());
            stream.run(&mut sink);
            for event in events(&String::from_utf8(sink.0).expect("events are UTF-8")) {
                let v: serde_json::Value = serde_json::from_str(&event).expect("JSON events");
                let members = v.as_object().expect("an object").len();
                assert_eq!(members, 1, "one StreamResponse member: {event}");
            }
        }
        // No replicas here: a task id naming one is looked up as this controller's own.
        RestBody::Relay(to, _) => panic!("a controller on its own relayed a call to {to}"),
    }
});
