//! Control requests (the data part of a SendMessage) of any JSON shape.
#![no_main]
use a2a_worker_controller::control::{parse_request, ControlRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    match parse_request([&value]) {
        Ok(ControlRequest::Create { task, ttl, .. }) => {
            assert!(!task.trim().is_empty() && !task.chars().any(char::is_control));
            assert!(ttl.is_none_or(|t| t.as_secs() >= 1));
        }
        Ok(ControlRequest::Logs { tail, .. }) => assert!((1..=10_000).contains(&tail)),
        _ => {}
    }
});
