//! The mechanical secrets check: every token the suite sees (the controller's, and every
//! worker token a create returned or a backend was given) is remembered, and log lines,
//! metrics, labels and Sentry payloads are scanned for all of them.
//!
//! In-process controllers log through a capturing logger installed here at trace level, so
//! the scan covers everything any module logs, not just what `RUST_LOG=info` would show.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use crate::support::TOKEN;

fn registry() -> &'static Mutex<HashSet<String>> {
    static SECRETS: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
    SECRETS.get_or_init(|| Mutex::new(HashSet::from([TOKEN.to_string()])))
}

pub fn remember(secret: &str) {
    if !secret.is_empty() {
        registry()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(secret.to_string());
    }
}

/// Whether `text` contains any of `secrets`.
pub fn leaks<'a>(text: &str, secrets: impl IntoIterator<Item = &'a String>) -> bool {
    secrets.into_iter().any(|s| text.contains(s.as_str()))
}

/// Fails the test if `text` contains any secret seen so far.
pub fn assert_none_in(text: &str, what: &str) {
    let known = registry().lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert!(!leaks(text, &known), "a token appears in {what}");
}

struct Capture;

fn captured() -> &'static Mutex<String> {
    static LOG: OnceLock<Mutex<String>> = OnceLock::new();
    LOG.get_or_init(|| Mutex::new(String::new()))
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = format!(
            "{} {}: {}\n",
            record.level(),
            record.target(),
            record.args()
        );
        captured()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_str(&line);
    }
    fn flush(&self) {}
}

/// Installs the capturing logger (once per test binary).
pub fn capture_logs() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        if log::set_boxed_logger(Box::new(Capture)).is_ok() {
            log::set_max_level(log::LevelFilter::Trace);
        }
    });
}

pub fn captured_log() -> String {
    captured().lock().unwrap_or_else(|p| p.into_inner()).clone()
}

#[test]
fn the_check_itself_catches_a_leak() {
    capture_logs();
    // The canary stays out of the shared registry so other tests' scans are unaffected.
    let canary = HashSet::from(["canary-secret-3f9a1c0e7b".to_string()]);
    assert!(!leaks(&captured_log(), &canary));
    log::info!("about to leak canary-secret-3f9a1c0e7b");
    assert!(
        leaks(&captured_log(), &canary),
        "the capture and the scan see a leaked token"
    );
    assert!(leaks("x canary-secret-3f9a1c0e7b y", &canary));
    assert!(!leaks("canary-secret-3f9a1c0e7", &canary));
}
