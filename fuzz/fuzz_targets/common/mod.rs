//! What the A2A and MCP fuzz targets share: the backend test double refusing every create (nothing
//! is created while fuzzing), the service over it (with a pusher that delivers nothing), and a sink that
//! collects a stream.
use std::sync::{Arc, OnceLock};

use a2a_worker_controller::a2a::{Service, TaskStore};
use a2a_worker_controller::backend::fake::FakeBackend;
use a2a_worker_controller::control::Control;
use a2a_worker_controller::http::Sink;
use a2a_worker_controller::push::Pusher;
use a2a_worker_controller::settings::templates::{Template, TemplatesFile, DEFAULT_TEMPLATE};
use a2a_worker_controller::settings::PushSettings;
use a2a_worker_controller::testing::Metrics;

/// The control layer over the test double refusing every create (nothing is created while
/// fuzzing).
pub fn control() -> Arc<Control> {
    static C: OnceLock<Arc<Control>> = OnceLock::new();
    Arc::clone(C.get_or_init(|| {
        let templates = TemplatesFile::fixed(
            Template::new(DEFAULT_TEMPLATE, "a2a-echo-worker:fuzz", 9090),
            Box::new(|_| Ok(())),
        )
        .expect("a plain template");
        let refuses = FakeBackend::default();
        refuses
            .refuse_creates
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Arc::new(Control::new(
            Arc::new(refuses),
            Arc::new(Metrics::new()),
            None,
            0,
            Arc::new(templates),
        ))
    }))
}

pub fn service() -> Arc<Service> {
    static S: OnceLock<Arc<Service>> = OnceLock::new();
    Arc::clone(S.get_or_init(|| {
        let metrics = Arc::new(Metrics::new());
        // Configs are checked and kept; nothing is delivered (fuzzing stays off the network).
        let push = Arc::new(Pusher::without_delivery(PushSettings::default(), metrics));
        Arc::new(Service::new(
            control(),
            Arc::new(TaskStore::new(64)),
            push,
            serde_json::json!({"name": "fuzz"}),
        ))
    }))
}

pub struct Collect(pub Vec<u8>);

impl Sink for Collect {
    fn send(&mut self, bytes: &[u8]) -> bool {
        self.0.extend_from_slice(bytes);
        true
    }
}

/// The `data` of each event of a stream (comments left out).
pub fn events(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|e| !e.is_empty() && !e.starts_with(':'))
        .map(|e| e.strip_prefix("data: ").expect("a data line").to_string())
        .collect()
}
