//! Whole JSON-RPC request bodies through the JSON-RPC binding and the service, over a backend
//! that refuses everything (nothing is created while fuzzing).
#![no_main]
use std::sync::OnceLock;

use a2a_worker_controller::a2a::{Answer, JsonRpc, ServiceParams};
use a2a_worker_controller::control::Caller;
use libfuzzer_sys::fuzz_target;

mod common;
use common::{events, service, Collect};

fn binding() -> &'static JsonRpc {
    static B: OnceLock<JsonRpc> = OnceLock::new();
    B.get_or_init(|| JsonRpc::new(service()))
}

fuzz_target!(|data: &[u8]| {
    let replies = match binding().handle(&Caller::admin(), &ServiceParams::default(), data) {
        Answer::Json(text) => vec![text],
        // A stream: every event is `data: <one JSON-RPC response>` and a blank line.
        Answer::Events(stream) => {
            let mut sink = Collect(Vec::new());
            stream.run(&mut sink);
            events(&String::from_utf8(sink.0).expect("events are UTF-8"))
        }
        // No replicas here: a task id naming one is looked up as this controller's own.
        Answer::Relay(to, _) => panic!("a controller on its own relayed a call to {to}"),
    };
    for reply in replies {
        check(&reply);
    }
});

fn check(reply: &str) {
    let reply: serde_json::Value = serde_json::from_str(reply).expect("every reply is JSON");
    assert_eq!(reply["jsonrpc"], "2.0");
    assert!(reply.get("result").is_some() != reply.get("error").is_some());
}
