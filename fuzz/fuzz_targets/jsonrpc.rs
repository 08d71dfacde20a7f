//! Whole JSON-RPC request bodies through the protocol layer, over a backend that refuses
//! everything (nothing is created while fuzzing).
#![no_main]
use std::sync::{Arc, OnceLock};

use a2a_worker_controller::a2a::{Answer, Protocol, ServiceParams, TaskStore};
use a2a_worker_controller::http::Sink;
use a2a_worker_controller::backend::{Backend, BackendError, BackendKind, CreateSpec, Logs, Worker};
use a2a_worker_controller::control::Control;
use a2a_worker_controller::testing::Metrics;
use libfuzzer_sys::fuzz_target;

struct Refuses;

impl Backend for Refuses {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }
    fn create(&self, _: &CreateSpec) -> Result<Worker, BackendError> {
        Err(BackendError::Unavailable("fuzzing".into()))
    }
    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        Ok(Vec::new())
    }
    fn stop(&self, _: &str) -> Result<Worker, BackendError> {
        Err(BackendError::NotFound)
    }
    fn logs(&self, _: &str, _: u32) -> Result<Logs, BackendError> {
        Err(BackendError::NotFound)
    }
    fn health(&self) -> Result<(), BackendError> {
        Ok(())
    }
}

fn protocol() -> &'static Protocol {
    static P: OnceLock<Protocol> = OnceLock::new();
    P.get_or_init(|| {
        let control = Arc::new(Control::new(Arc::new(Refuses), Arc::new(Metrics::new()), None, 0));
        Protocol::new(control, Arc::new(TaskStore::new(64)))
    })
}

fuzz_target!(|data: &[u8]| {
    let replies = match protocol().handle(&ServiceParams::default(), data) {
        Answer::Json(text) => vec![text],
        // A stream: every event is `data: <one JSON-RPC response>` and a blank line.
        Answer::Events(events) => {
            let mut sink = Collect(Vec::new());
            events.run(&mut sink);
            let text = String::from_utf8(sink.0).expect("events are UTF-8");
            text.split("\n\n")
                .filter(|e| !e.is_empty() && !e.starts_with(':'))
                .map(|e| e.strip_prefix("data: ").expect("a data line").to_string())
                .collect()
        }
    };
    for reply in replies {
        check(&reply);
    }
});

struct Collect(Vec<u8>);

impl Sink for Collect {
    fn send(&mut self, bytes: &[u8]) -> bool {
        self.0.extend_from_slice(bytes);
        true
    }
}

fn check(reply: &str) {
    let reply: serde_json::Value = serde_json::from_str(reply).expect("every reply is JSON");
    assert_eq!(reply["jsonrpc"], "2.0");
    assert!(reply.get("result").is_some() != reply.get("error").is_some());
}
