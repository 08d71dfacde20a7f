//! Push notifications (specification §3.1.7-3.1.10, §4.3, §13.2): the webhooks of running
//! tasks, and the delivery of each event a stream would carry to each of them — as the
//! `StreamResponse` JSON the caller of [`Pusher::notify`] wrote, with the config's
//! `Authorization` — in order per task, at least once (retried with exponential backoff, then
//! given up), off every request thread, in bounded memory.
//!
//! - `guard`: which URLs and addresses a webhook may reach (SSRF).
//! - `deliver`: one POST to one checked address.
//!
//! Bounds: [`MAX_PER_TASK`] configs per task and [`MAX_CONFIGS`] in all (past them a config is
//! refused), [`MAX_QUEUED`] events waiting (past it an event is dropped, logged and counted),
//! [`DELIVERY_THREADS`] deliveries at once. A config goes once its task's final event was
//! delivered to it (or given up).

pub mod deliver;
pub mod guard;

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use serde::Serialize;

use self::deliver::Attempt;
use self::guard::{Guard, Refused, Target};
use crate::metrics::Metrics;
use crate::settings::PushSettings;

pub const MAX_PER_TASK: usize = 8;
pub const MAX_CONFIGS: usize = 1024;
pub const MAX_QUEUED: usize = 4096;
pub const DELIVERY_THREADS: usize = 4;
/// Attempts per event and webhook: the first and three retries, 0.5 s, 1 s and 2 s apart.
const ATTEMPTS: u32 = 4;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);

/// A task's webhook as the caller gave it (`TaskPushNotificationConfig`). Its `Debug` shows no
/// credentials.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfig {
    pub id: String,
    pub task_id: String,
    pub url: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub authentication: Option<Authentication>,
}

#[derive(Clone, PartialEq, Eq, Serialize)]
pub struct Authentication {
    pub scheme: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub credentials: String,
}

impl fmt::Debug for PushConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PushConfig")
            .field("id", &self.id)
            .field("task_id", &self.task_id)
            .field("url", &self.url)
            .field(
                "authentication",
                &self.authentication.as_ref().map(|a| &a.scheme),
            )
            .finish_non_exhaustive()
    }
}

/// Why a config was refused. `Display` is one line for the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PushError {
    Invalid(String),
    Refused(Refused),
    Full(String),
}

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PushError::Invalid(why) | PushError::Full(why) => f.write_str(why),
            PushError::Refused(r) => r.fmt(f),
        }
    }
}

impl std::error::Error for PushError {}

/// One event for one webhook.
struct Job {
    config: PushConfig,
    target: Target,
    body: Arc<str>,
    /// The task's final event: the config goes after it.
    last: bool,
}

/// A task's events in order; one delivery thread at a time works on it.
#[derive(Default)]
struct Lane {
    jobs: VecDeque<Job>,
    /// In the ready queue or being delivered.
    scheduled: bool,
}

#[derive(Default)]
struct State {
    /// Task id → its configs (with their checked targets), and whether its final event is
    /// queued (then nothing more is accepted for it).
    configs: HashMap<String, Vec<(PushConfig, Target)>>,
    finished: HashSet<String>,
    lanes: HashMap<String, Lane>,
    ready: VecDeque<String>,
    queued: usize,
    stopping: bool,
}

struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    guard: Guard,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Pusher {
    shared: Arc<Shared>,
}

impl Drop for Pusher {
    fn drop(&mut self) {
        self.shared.lock().stopping = true;
        self.shared.wake.notify_all();
    }
}

impl Pusher {
    /// Starts the delivery threads.
    pub fn start(settings: PushSettings, metrics: Arc<Metrics>) -> Pusher {
        Pusher::with_threads(settings, metrics, DELIVERY_THREADS)
    }

    /// A pusher that checks and keeps configs and queues events (within the bounds) but
    /// delivers nothing: for fuzzing, which must not reach the network.
    pub fn without_delivery(settings: PushSettings, metrics: Arc<Metrics>) -> Pusher {
        Pusher::with_threads(settings, metrics, 0)
    }

    fn with_threads(settings: PushSettings, metrics: Arc<Metrics>, threads: usize) -> Pusher {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            guard: Guard::new(settings),
            metrics,
        });
        for n in 0..threads {
            let shared = Arc::clone(&shared);
            if let Err(e) = thread::Builder::new()
                .name(format!("push-{n}"))
                .spawn(move || work(&shared))
            {
                log::error!("cannot start a push delivery thread: {e}");
            }
        }
        Pusher { shared }
    }

    /// Checks and stores a config for a task (replacing one of the same id). `id` empty: one
    /// is assigned.
    pub fn create(&self, mut config: PushConfig) -> Result<PushConfig, PushError> {
        let target = self
            .shared
            .guard
            .check_url(&config.url)
            .map_err(PushError::Refused)?;
        config.url = target.url.clone();
        check_header_value("token", &config.token)?;
        if let Some(a) = &config.authentication {
            if a.scheme.is_empty()
                || !a
                    .scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~+".contains(&b))
            {
                return Err(PushError::Invalid(
                    "authentication.scheme must be an HTTP auth scheme such as Bearer".into(),
                ));
            }
            check_header_value("authentication.credentials", &a.credentials)?;
        }
        if config.id.is_empty() {
            config.id = crate::token::uuid_v4()
                .map_err(|e| PushError::Invalid(format!("no id could be made: {e}")))?;
        }
        if config.id.len() > 256 || config.id.chars().any(char::is_control) {
            return Err(PushError::Invalid(
                "id must be at most 256 printable characters".into(),
            ));
        }
        let mut state = self.shared.lock();
        if state.finished.contains(&config.task_id) {
            return Err(PushError::Invalid(
                "the task has finished: no notification will follow".into(),
            ));
        }
        let total: usize = state.configs.values().map(Vec::len).sum();
        let list = state.configs.entry(config.task_id.clone()).or_default();
        if let Some(at) = list.iter().position(|(c, _)| c.id == config.id) {
            list[at] = (config.clone(), target);
            return Ok(config);
        }
        if list.len() >= MAX_PER_TASK {
            return Err(PushError::Full(format!(
                "a task has at most {MAX_PER_TASK} push notification configs"
            )));
        }
        if total >= MAX_CONFIGS {
            return Err(PushError::Full(format!(
                "this controller holds at most {MAX_CONFIGS} push notification configs: try again later"
            )));
        }
        let shown = target.shown.clone();
        list.push((config.clone(), target));
        log::info!(
            "push notification config {} for task {}: {}",
            config.id,
            config.task_id,
            shown
        );
        Ok(config)
    }

    pub fn get(&self, task_id: &str, id: &str) -> Option<PushConfig> {
        let state = self.shared.lock();
        state
            .configs
            .get(task_id)?
            .iter()
            .find(|(c, _)| c.id == id)
            .map(|(c, _)| c.clone())
    }

    pub fn list(&self, task_id: &str) -> Vec<PushConfig> {
        let state = self.shared.lock();
        state
            .configs
            .get(task_id)
            .map(|l| l.iter().map(|(c, _)| c.clone()).collect())
            .unwrap_or_default()
    }

    /// Removes a config; removing one that is not there is not an error. Events already
    /// queued for it are not sent.
    pub fn delete(&self, task_id: &str, id: &str) {
        let mut state = self.shared.lock();
        remove_config(&mut state, task_id, id);
        if let Some(lane) = state.lanes.get_mut(task_id) {
            let before = lane.jobs.len();
            lane.jobs.retain(|j| j.config.id != id);
            let removed = before - lane.jobs.len();
            state.queued -= removed;
        }
    }

    /// Whether a task has webhooks (so its events are worth writing out).
    pub fn watches(&self, task_id: &str) -> bool {
        self.shared.lock().configs.contains_key(task_id)
    }

    /// Queues one event of a task for each of its webhooks; `last` for its final one.
    pub fn notify(&self, task_id: &str, body: &str, last: bool) {
        let mut state = self.shared.lock();
        if state.finished.contains(task_id) {
            return;
        }
        let Some(configs) = state.configs.get(task_id).cloned() else {
            return;
        };
        if last {
            state.finished.insert(task_id.to_string());
        }
        let body: Arc<str> = Arc::from(body);
        for (config, target) in configs {
            if state.queued >= MAX_QUEUED && !last {
                log::warn!(
                    "push notification for task {task_id} to {} dropped: {MAX_QUEUED} events are waiting",
                    target.shown
                );
                self.shared.metrics.push_notification("dropped");
                continue;
            }
            state.queued += 1;
            let lane = state.lanes.entry(task_id.to_string()).or_default();
            lane.jobs.push_back(Job {
                config,
                target,
                body: Arc::clone(&body),
                last,
            });
            if !lane.scheduled {
                lane.scheduled = true;
                state.ready.push_back(task_id.to_string());
            }
        }
        drop(state);
        self.shared.wake.notify_all();
    }
}

/// Header values may not carry CR, LF or other control characters (no header injection).
fn check_header_value(what: &str, v: &str) -> Result<(), PushError> {
    if v.len() > 4096 || v.chars().any(|c| c.is_control()) {
        return Err(PushError::Invalid(format!(
            "{what} must be at most 4096 characters without control characters"
        )));
    }
    Ok(())
}

fn remove_config(state: &mut State, task_id: &str, id: &str) {
    let Some(list) = state.configs.get_mut(task_id) else {
        return;
    };
    list.retain(|(c, _)| c.id != id);
    if list.is_empty() {
        state.configs.remove(task_id);
        state.finished.remove(task_id);
    }
}

/// A delivery thread: takes the next task with events, delivers its first one, gives the
/// task back (so its events stay in order), until the pusher stops.
fn work(shared: &Shared) {
    loop {
        let (task_id, job) = {
            let mut state = shared.lock();
            loop {
                if state.stopping {
                    return;
                }
                if let Some(task_id) = state.ready.pop_front() {
                    let job = state
                        .lanes
                        .get_mut(&task_id)
                        .and_then(|lane| lane.jobs.pop_front());
                    match job {
                        Some(job) => {
                            state.queued -= 1;
                            break (task_id, job);
                        }
                        None => {
                            state.lanes.remove(&task_id);
                            continue;
                        }
                    }
                }
                state = shared.wake.wait(state).unwrap_or_else(|p| p.into_inner());
            }
        };
        let outcome = deliver_with_retries(shared, &job);
        shared.metrics.push_notification(outcome);
        let mut state = shared.lock();
        if job.last {
            remove_config(&mut state, &task_id, &job.config.id);
        }
        match state.lanes.get_mut(&task_id) {
            Some(lane) if !lane.jobs.is_empty() => state.ready.push_back(task_id),
            Some(_) => {
                state.lanes.remove(&task_id);
            }
            None => {}
        }
    }
}

/// Delivers one event to one webhook: resolved and checked on every attempt, retried with
/// exponential backoff while it may help. Returns the outcome's metric label.
fn deliver_with_retries(shared: &Shared, job: &Job) -> &'static str {
    let mut headers: Vec<(&str, String)> = Vec::new();
    if let Some(a) = &job.config.authentication {
        headers.push((
            "Authorization",
            format!("{} {}", a.scheme, a.credentials)
                .trim_end()
                .to_string(),
        ));
    }
    if !job.config.token.is_empty() {
        headers.push(("X-A2A-Notification-Token", job.config.token.clone()));
    }
    let (task, url) = (&job.config.task_id, &job.target.shown);
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let addr = match shared.guard.resolve(&job.target) {
            Ok(addr) => addr,
            Err(e) => {
                log::warn!("push notification for task {task} not sent to {url}: {e}");
                return "refused";
            }
        };
        let why = match deliver::post(&job.config.url, addr, &headers, &job.body) {
            Attempt::Delivered => {
                log::debug!("push notification for task {task} delivered to {url}");
                return "delivered";
            }
            Attempt::GiveUp(why) => {
                log::warn!("push notification for task {task} to {url} given up: {why}");
                return "given_up";
            }
            Attempt::Retry(why) => why,
        };
        if attempt == ATTEMPTS {
            log::warn!(
                "push notification for task {task} to {url} given up after {ATTEMPTS} attempts: {why}"
            );
            return "given_up";
        }
        log::info!(
            "push notification for task {task} to {url} failed (attempt {attempt} of {ATTEMPTS}: {why}); retrying in {} ms",
            backoff.as_millis()
        );
        if shared.lock().stopping {
            return "given_up";
        }
        thread::sleep(backoff);
        backoff *= 2;
    }
    "given_up"
}
