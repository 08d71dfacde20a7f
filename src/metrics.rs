//! Prometheus metrics in the text exposition format. Label values come from fixed sets
//! (route names, status codes, operation names, outcomes) and callers' names (at most
//! [`MAX_CALLER_LABELS`] of them, then `other`): never task names or tokens.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

#[derive(Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

#[derive(Default)]
struct Inner {
    requests: BTreeMap<(&'static str, u16), u64>,
    operations: BTreeMap<(&'static str, &'static str, &'static str, String), u64>,
    /// The callers named in `operations` so far.
    callers: std::collections::BTreeSet<String>,
    durations: BTreeMap<(&'static str, &'static str), Histogram>,
    pushes: BTreeMap<&'static str, u64>,
    /// Creates by (backend, template, outcome): template names come from the operator's file.
    creates: BTreeMap<(&'static str, String, &'static str), u64>,
    /// Warm pool members by (template, state), as the pool's last look found them.
    pool_members: BTreeMap<(String, &'static str), u64>,
    /// Members each pooled template should hold now (fixed, or after the demand).
    pool_sizes: BTreeMap<String, u64>,
    /// The reaper's last pass: how long it took, and how many workers it looked at.
    reaper_pass: Option<(Duration, usize)>,
    /// The workers by state, as the reaper's last pass listed them.
    workers: BTreeMap<&'static str, u64>,
    /// Requests refused past a caller's bound, by (caller, kind).
    caller_refusals: BTreeMap<(String, &'static str), u64>,
}

impl Inner {
    /// `caller` as a label value: its name while fewer than [`MAX_CALLER_LABELS`] were seen,
    /// `other` after.
    fn caller_label(&mut self, caller: &str) -> String {
        if self.callers.contains(caller) {
            caller.to_string()
        } else if self.callers.len() < MAX_CALLER_LABELS {
            self.callers.insert(caller.to_string());
            caller.to_string()
        } else {
            "other".to_string()
        }
    }
}

/// Most distinct caller names the operation counter carries (OIDC subjects are not a fixed
/// set); the rest are counted as `other`.
pub const MAX_CALLER_LABELS: usize = 256;

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave counters inconsistent in a way that
        // matters; keep counting.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn http_request(&self, route: &'static str, status: u16) {
        *self.lock().requests.entry((route, status)).or_default() += 1;
    }

    pub fn control_operation(
        &self,
        operation: &'static str,
        backend: &'static str,
        outcome: &'static str,
        caller: &str,
        took: Duration,
    ) {
        let mut inner = self.lock();
        let caller = inner.caller_label(caller);
        *inner
            .operations
            .entry((operation, backend, outcome, caller))
            .or_default() += 1;
        let h = inner.durations.entry((operation, backend)).or_default();
        let secs = took.as_secs_f64();
        for (i, le) in BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.counts[i] += 1;
            }
        }
        h.sum += secs;
        h.count += 1;
    }

    /// One create of a worker from `template` came to `outcome`.
    pub fn worker_create(&self, backend: &'static str, template: &str, outcome: &'static str) {
        *self
            .lock()
            .creates
            .entry((backend, template.to_string(), outcome))
            .or_default() += 1;
    }

    /// One push-notification event to one webhook came to `outcome` (delivered, given_up,
    /// refused, dropped).
    /// The pool's members now, by (template, state): replaces what was said before.
    pub fn pool_members(&self, members: BTreeMap<(String, &'static str), u64>) {
        self.lock().pool_members = members;
    }

    /// The members each pooled template should hold now: replaces what was said before.
    pub fn pool_sizes(&self, sizes: BTreeMap<String, u64>) {
        self.lock().pool_sizes = sizes;
    }

    /// The reaper's pass that just ended took `took`, over `workers` listed workers.
    pub fn reaper_pass(&self, took: Duration, workers: usize) {
        self.lock().reaper_pass = Some((took, workers));
    }

    /// The workers now, by state (every state named, 0 when none): replaces what was said.
    pub fn workers_by_state(&self, by_state: BTreeMap<&'static str, u64>) {
        self.lock().workers = by_state;
    }

    /// A request of `caller` refused (429) past its bound of `kind` (request, stream).
    pub fn caller_refused(&self, caller: &str, kind: &'static str) {
        let mut inner = self.lock();
        let caller = inner.caller_label(caller);
        *inner.caller_refusals.entry((caller, kind)).or_default() += 1;
    }

    pub fn push_notification(&self, outcome: &'static str) {
        *self.lock().pushes.entry(outcome).or_default() += 1;
    }

    /// Every family in the Prometheus text format, in a fixed order.
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        family(
            &mut out,
            "a2a_controller_build_info",
            "gauge",
            "Build information.",
            [(
                format!(
                    "version=\"{}\",commit=\"{}\"",
                    env!("CARGO_PKG_VERSION"),
                    env!("A2A_WC_GIT_COMMIT")
                ),
                "1".to_string(),
            )],
        );
        family(
            &mut out,
            "a2a_controller_http_requests_total",
            "counter",
            "HTTP requests by route and status.",
            inner.requests.iter().map(|((route, status), n)| {
                (
                    format!("route=\"{route}\",status=\"{status}\""),
                    n.to_string(),
                )
            }),
        );
        family(
            &mut out,
            "a2a_controller_control_operations_total",
            "counter",
            "Control operations by operation, backend, outcome and caller.",
            inner.operations.iter().map(|((op, backend, outcome, caller), n)| {
                let caller = label_value(caller);
                (
                    format!("operation=\"{op}\",backend=\"{backend}\",outcome=\"{outcome}\",caller=\"{caller}\""),
                    n.to_string(),
                )
            }),
        );
        durations(&mut out, &inner.durations);
        inner.render_rest(&mut out);
        out
    }
}

impl Inner {
    /// The families after the control operations': webhooks, creates, pools, refusals, the
    /// reaper.
    fn render_rest(&self, out: &mut String) {
        family(
            out,
            "a2a_controller_push_notifications_total",
            "counter",
            "Push-notification events by outcome (one per event and webhook).",
            self.pushes
                .iter()
                .map(|(outcome, n)| (format!("outcome=\"{outcome}\""), n.to_string())),
        );
        family(
            out,
            "a2a_controller_worker_creates_total",
            "counter",
            "Worker creates by backend, template and outcome.",
            self.creates
                .iter()
                .map(|((backend, template, outcome), n)| {
                    let template = label_value(template);
                    (
                        format!(
                            "backend=\"{backend}\",template=\"{template}\",outcome=\"{outcome}\""
                        ),
                        n.to_string(),
                    )
                }),
        );
        family(
            out,
            "a2a_pool_members",
            "gauge",
            "Warm pool members (started, not bound to a task) by template and state.",
            self.pool_members.iter().map(|((template, state), n)| {
                let template = label_value(template);
                (
                    format!("template=\"{template}\",state=\"{state}\""),
                    n.to_string(),
                )
            }),
        );
        family(
            out,
            "a2a_pool_wanted",
            "gauge",
            "Warm pool members each template should hold now: its fixed size, or what its recent creates ask for, between its min and max.",
            self.pool_sizes.iter().map(|(template, n)| {
                let template = label_value(template);
                (format!("template=\"{template}\""), n.to_string())
            }),
        );
        family(
            out,
            "a2a_caller_refusals_total",
            "counter",
            "Requests refused (429) past their caller's bound, by caller and kind (request, stream).",
            self.caller_refusals.iter().map(|((caller, kind), n)| {
                let caller = label_value(caller);
                (format!("caller=\"{caller}\",kind=\"{kind}\""), n.to_string())
            }),
        );
        family(
            out,
            "a2a_workers",
            "gauge",
            "The workers by state (suspended ones hold no CPU or memory), as the reaper's last pass listed them.",
            self.workers
                .iter()
                .map(|(state, n)| (format!("state=\"{state}\""), n.to_string())),
        );
        if let Some((took, workers)) = self.reaper_pass {
            family(
                out,
                "a2a_reaper_last_pass_seconds",
                "gauge",
                "How long the reaper's last pass took (its list, and the stops of expired workers).",
                [(String::new(), format!("{:.6}", took.as_secs_f64()))],
            );
            family(
                out,
                "a2a_reaper_last_pass_workers",
                "gauge",
                "The workers the reaper's last pass listed.",
                [(String::new(), workers.to_string())],
            );
        }
    }
}

/// One family: its `HELP` and `TYPE` lines, then each sample (its labels, without braces when
/// it has none, and its value).
fn family(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (String, String)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// The control operations' duration histogram: buckets, sum and count per operation.
fn durations(out: &mut String, durations: &BTreeMap<(&'static str, &'static str), Histogram>) {
    let name = "a2a_controller_control_operation_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Control operation duration.\n# TYPE {name} histogram"
    );
    for ((op, backend), h) in durations {
        let labels = format!("operation=\"{op}\",backend=\"{backend}\"");
        for (i, le) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {}", h.counts[i]);
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}\n{name}_sum{{{labels}}} {}\n{name}_count{{{labels}}} {}",
            h.count, h.sum, h.count
        );
    }
}

/// A label value escaped as the exposition format asks (backslash, quote, newline).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_cumulative_buckets() {
        let m = Metrics::new();
        m.http_request("a2a", 200);
        m.http_request("a2a", 200);
        m.control_operation(
            "list",
            "docker",
            "completed",
            "alice",
            Duration::from_millis(20),
        );
        m.control_operation(
            "list",
            "docker",
            "completed",
            "alice",
            Duration::from_secs(3),
        );
        m.control_operation(
            "list",
            "docker",
            "completed",
            "b\"ob",
            Duration::from_secs(3),
        );
        let text = m.render();
        assert!(text.contains("a2a_controller_http_requests_total{route=\"a2a\",status=\"200\"} 2"));
        assert!(text.contains(
            "operation=\"list\",backend=\"docker\",outcome=\"completed\",caller=\"alice\"} 2"
        ));
        assert!(text.contains("caller=\"b\\\"ob\"} 1"), "escaped: {text}");
        assert!(text.contains("backend=\"docker\",le=\"0.025\"} 1"));
        assert!(text.contains("backend=\"docker\",le=\"5\"} 3"));
        assert!(text.contains("backend=\"docker\",le=\"+Inf\"} 3"));
        assert!(text.contains("a2a_controller_build_info{version="));
        m.worker_create("docker", "coder", "completed");
        assert!(m.render().contains(
            "a2a_controller_worker_creates_total{backend=\"docker\",template=\"coder\",outcome=\"completed\"} 1"
        ));
        m.pool_members(BTreeMap::from([(("coder".to_string(), "ready"), 3)]));
        m.pool_sizes(BTreeMap::from([("coder".to_string(), 5)]));
        assert!(m
            .render()
            .contains("a2a_pool_members{template=\"coder\",state=\"ready\"} 3"));
        assert!(m.render().contains("a2a_pool_wanted{template=\"coder\"} 5"));
        assert!(!m.render().contains("a2a_reaper"), "no pass yet, no figure");
        m.reaper_pass(Duration::from_millis(250), 1000);
        let text = m.render();
        assert!(
            text.contains("\na2a_reaper_last_pass_seconds 0.250000\n"),
            "{text}"
        );
        assert!(text.contains("\na2a_reaper_last_pass_workers 1000\n"));
    }

    #[test]
    fn caller_names_are_a_bounded_set() {
        let m = Metrics::new();
        for i in 0..MAX_CALLER_LABELS + 10 {
            m.control_operation(
                "list",
                "docker",
                "completed",
                &format!("c{i}"),
                Duration::ZERO,
            );
        }
        let text = m.render();
        assert!(text.contains("caller=\"other\"} 10"));
        assert_eq!(
            text.matches("control_operations_total{").count(),
            MAX_CALLER_LABELS + 1
        );
    }
}
