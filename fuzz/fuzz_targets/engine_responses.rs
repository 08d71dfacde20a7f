//! What a Docker (or Podman) engine answers: container lists, inspections, error bodies,
//! version strings. A hostile or broken engine must never crash the controller.
#![no_main]
use a2a_worker_controller::testing::{error_message, negotiate_version, parse_inspect, parse_list};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(list) = parse_list(data) {
        for c in &list {
            let _ = c.name().len();
        }
    }
    if let Ok(inspect) = parse_inspect(data) {
        let _ = inspect.ip_on("net");
    }
    let message = error_message(data);
    assert!(message.chars().count() <= 300 && !message.contains('\n'));
    if let Ok(text) = std::str::from_utf8(data) {
        let (a, b) = text.split_once('|').unwrap_or((text, ""));
        if let Ok(v) = negotiate_version(a, Some(b)) {
            assert!(v.starts_with("v1."));
        }
    }
});
