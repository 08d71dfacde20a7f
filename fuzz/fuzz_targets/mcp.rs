//! Whole `/mcp` POST bodies through the MCP service, over a backend that refuses every create
//! (nothing is created while fuzzing). The headers are derived from the body where it can be
//! read (so requests get past the transport's checks and into the methods), or left out; the
//! first byte picks which. Every answer is one JSON-RPC message, or 202 for a notification.
#![no_main]
use std::sync::OnceLock;

use a2a_worker_controller::control::Caller;
use a2a_worker_controller::mcp::{Answer, Head, Mcp};
use libfuzzer_sys::fuzz_target;

#[allow(dead_code)] // the A2A service is the other targets'
mod common;
use common::{control, events, Collect};

fn mcp() -> &'static Mcp {
    static M: OnceLock<Mcp> = OnceLock::new();
    M.get_or_init(|| Mcp::new(control(), "fuzz"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else { return };
    let parsed: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let head = Head {
        version: (pick & 1 == 1).then(|| "2026-07-28".to_string()),
        method: if pick & 2 == 2 { text(&parsed["method"]) } else { None },
        name: if pick & 4 == 4 {
            text(&parsed["params"]["name"]).or_else(|| text(&parsed["params"]["uri"])).map(Ok)
        } else {
            None
        },
        session: (pick & 8 == 8).then(|| "2025-11-25.0000000000000000.000000000000000000000000".to_string()),
        accepts_events: pick & 16 == 16,
        params: Vec::new(),
    };
    let replies = match mcp().handle(&Caller::admin(), &head, body) {
        Answer::Json { body, .. } => vec![body.to_string()],
        Answer::Text { body, .. } => vec![body],
        Answer::Accepted => return,
        Answer::Events(stream) => {
            let mut sink = Collect(Vec::new());
            stream.run(&mut sink);
            events(&String::from_utf8(sink.0).expect("events are UTF-8"))
        }
    };
    for reply in replies {
        let reply: serde_json::Value = serde_json::from_str(&reply).expect("every reply is JSON");
        assert_eq!(reply["jsonrpc"], "2.0");
    }
});
