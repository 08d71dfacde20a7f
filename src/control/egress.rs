//! The egress proxy's one question to the controller (`GET /egress/v1/whois`, the worker's
//! placeholder as the bearer token): which worker this placeholder is, whether it runs now,
//! from which address its connections come, and its template. The placeholder is checked
//! against the egress key first: the answer is only ever about the worker who holds it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::backend::{Backend, BackendError, Worker, WorkerState};
use crate::settings::egress::EgressKey;

/// Answers whois questions over one backend, from one list of the workers at most
/// [`LIST_AGE`] old: however many workers the proxies ask about, the engine is listed about
/// once a second for all of them.
pub struct Whois {
    backend: Arc<dyn Backend>,
    key: EgressKey,
    listed: Mutex<Option<(Instant, Arc<Vec<Worker>>)>>,
}

/// How old the list whois answers from may be. A stopped worker's placeholder is refused
/// within this plus the proxy's `EGRESS_RECHECK`.
pub const LIST_AGE: Duration = Duration::from_secs(1);

/// A running worker, as the proxy needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Identity {
    pub worker_id: String,
    pub template: String,
    /// The host of its `a2a_url`.
    pub address: String,
}

/// Why there is no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WhoisError {
    /// Not a placeholder of this key (401).
    NotAPlaceholder,
    /// Its worker is not running (gone, stopping, exited) (404).
    NotRunning(String),
    /// The backend could not be asked (503).
    Unavailable(String),
}

impl std::fmt::Display for WhoisError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WhoisError::NotAPlaceholder => {
                f.write_str("not a worker's placeholder of this controller's egress key")
            }
            WhoisError::NotRunning(id) => write!(f, "worker {id} is not running"),
            WhoisError::Unavailable(why) => write!(f, "the backend could not be asked: {why}"),
        }
    }
}

impl Whois {
    pub fn new(backend: Arc<dyn Backend>, key: EgressKey) -> Whois {
        Whois {
            backend,
            key,
            listed: Mutex::new(None),
        }
    }

    /// The workers as listed since `since` (one list at a time: a question asked while
    /// another lists waits for that list, and takes it when it began after `since`).
    fn workers(&self, since: Instant) -> Result<Arc<Vec<Worker>>, WhoisError> {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, workers)) = listed.as_ref() {
            if *at >= since {
                return Ok(Arc::clone(workers));
            }
        }
        let at = Instant::now();
        let workers = Arc::new(self.backend.list().map_err(|e| match e {
            BackendError::Unavailable(why) => WhoisError::Unavailable(why),
            other => WhoisError::Unavailable(other.to_string()),
        })?);
        *listed = Some((at, Arc::clone(&workers)));
        Ok(workers)
    }

    /// The whois these settings give (`None` without an egress key: nothing to ask then).
    pub fn of(settings: &crate::settings::Settings, backend: &Arc<dyn Backend>) -> Option<Whois> {
        let key = settings.egress.key.clone()?;
        Some(Whois::new(Arc::clone(backend), key))
    }

    /// The running worker `placeholder` was made for.
    pub fn ask(&self, placeholder: &str) -> Result<Identity, WhoisError> {
        let worker_id = self
            .key
            .worker_of(placeholder)
            .ok_or(WhoisError::NotAPlaceholder)?;
        let running = |workers: &[Worker]| {
            workers
                .iter()
                .find(|w| w.worker_id == worker_id)
                .filter(|w| matches!(w.state, WorkerState::Running | WorkerState::Starting))
                .cloned()
        };
        // A worker the list at hand does not show (made since?) is looked for in a list made
        // after the question: a new worker is known at once.
        let asked = Instant::now();
        let recent = asked.checked_sub(LIST_AGE).unwrap_or(asked);
        let worker = match running(&self.workers(recent)?) {
            Some(w) => w,
            None => running(&self.workers(asked)?)
                .ok_or_else(|| WhoisError::NotRunning(worker_id.to_string()))?,
        };
        Ok(Identity {
            address: url_host(&worker.a2a_url).to_string(),
            worker_id: worker.worker_id,
            template: worker.template,
        })
    }
}

/// `10.0.0.5` of `http://10.0.0.5:9090/x`, `::1` of `http://[::1]:9090`.
fn url_host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or(rest);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or(v6);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::FakeBackend;

    #[test]
    fn a_url_s_host_is_its_address() {
        assert_eq!(url_host("http://10.0.0.5:9090/x"), "10.0.0.5");
        assert_eq!(url_host("http://[::1]:9090"), "::1");
        assert_eq!(url_host("http://worker-a:9090"), "worker-a");
    }

    #[test]
    fn whois_answers_only_for_a_running_worker_of_this_key() {
        let fake = Arc::new(FakeBackend::default());
        let worker_id = fake.add_by_hand("t1", "admin");
        let key = EgressKey::new(b"a key of sixteen chars or more");
        let whois = Whois::new(fake.clone(), key.clone());
        let id = whois.ask(key.placeholder(&worker_id).expose()).unwrap();
        assert_eq!(id.worker_id, worker_id);
        assert_eq!(id.address, "127.0.0.1");
        let other = EgressKey::new(b"another key of sixteen chars");
        assert_eq!(
            whois.ask(other.placeholder(&worker_id).expose()),
            Err(WhoisError::NotAPlaceholder)
        );
        let lists = fake.lists.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..50 {
            whois.ask(key.placeholder(&worker_id).expose()).unwrap();
        }
        assert!(
            fake.lists.load(std::sync::atomic::Ordering::SeqCst) <= lists + 1,
            "one list serves many questions"
        );
        fake.remove_by_hand(&worker_id);
        // A worker gone is told within LIST_AGE.
        let gone = Instant::now() + LIST_AGE + Duration::from_secs(2);
        while whois.ask(key.placeholder(&worker_id).expose()).is_ok() {
            assert!(
                Instant::now() < gone,
                "whois still answers for a gone worker"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(matches!(
            whois.ask(key.placeholder(&worker_id).expose()),
            Err(WhoisError::NotRunning(_))
        ));
    }
}
