//! Readiness of a new container or pod worker: it is ready when it answers
//! `GET /.well-known/agent-card.json` with 200. The backend says, each round, whether the
//! worker still lives and where to probe it; this module polls until the answer, the worker's
//! end, or the deadline.

use std::thread;
use std::time::{Duration, Instant};

use super::BackendError;

/// The first pause between two card probes; it doubles up to [`MAX_PAUSE`]: a worker that is
/// quick to start is seen within a few milliseconds, a slow one is asked at most 50 times a
/// second (and each probe that connects waits for its answer).
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const MAX_PAUSE: Duration = Duration::from_millis(20);
/// How often the engine is asked whether the worker still lives (an engine call is dearer
/// than a refused connection).
const LOOK_EVERY: Duration = Duration::from_millis(100);

pub struct Probe {
    /// Plain HTTP, no proxy, no redirects, short timeouts: a probe never waits long.
    agent: ureq::Agent,
    timeout: Duration,
}

impl Probe {
    /// A probe that waits up to `timeout` (`WORKER_READY_TIMEOUT`; zero means do not wait).
    pub fn new(timeout: Duration) -> Probe {
        let agent = super::api_call::worker_agent(Duration::from_secs(2));
        Probe { agent, timeout }
    }

    /// Whether create should not wait at all (the worker is reported `starting`).
    pub fn disabled(&self) -> bool {
        self.timeout.is_zero()
    }

    /// Whether the worker at `base` answers `path` (its template's readiness path, the Agent
    /// Card unless it says otherwise) with 200 right now; if not, what happened instead (the
    /// timeout message names the last, so that an operator sees a refused connection, a
    /// local port shortage or a wrong status rather than silence).
    pub fn ask(&self, base: &str, path: &str) -> Result<(), String> {
        let url = format!("{base}{path}");
        match self.agent.get(&url).call() {
            Ok(r) if r.status().as_u16() == 200 => Ok(()),
            Ok(r) => Err(format!("it answered {}", r.status().as_u16())),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Polls until the worker answers. Each round first calls `look`, which reads the engine:
    /// it fails with [`BackendError::NotReady`] when the worker is gone or has ended, and
    /// returns the base URL to probe (`None` while the worker has no address yet). `url` is
    /// the worker's `a2a_url`, named in the timeout message when no address was ever found.
    pub fn wait(
        &self,
        url: &str,
        path: &str,
        mut look: impl FnMut() -> Result<Option<String>, BackendError>,
    ) -> Result<(), BackendError> {
        let deadline = Instant::now() + self.timeout;
        let mut pause = FIRST_PAUSE;
        let mut base = look()?;
        let mut looked = Instant::now();
        let mut last = None;
        loop {
            if looked.elapsed() >= LOOK_EVERY {
                base = look()?;
                looked = Instant::now();
            }
            if let Some(b) = base.as_deref() {
                match self.ask(b, path) {
                    Ok(()) => return Ok(()),
                    Err(why) => last = Some(why),
                }
            }
            if Instant::now() >= deadline {
                let tried = match &last {
                    Some(why) => format!(" (last try: {why})"),
                    None => " (it had no address yet)".to_string(),
                };
                return Err(BackendError::NotReady(format!(
                    "the worker did not answer {}{path} within {}s{tried}",
                    base.as_deref().unwrap_or(url),
                    self.timeout.as_secs_f32()
                )));
            }
            thread::sleep(pause);
            pause = (pause * 2).min(MAX_PAUSE);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpListener;

    use super::*;

    const CARD: &str = crate::settings::templates::DEFAULT_READY_PATH;

    /// A one-connection-at-a-time server on a real socket answering `status` to every request.
    fn server(status: u16) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            for mut s in listener.incoming().flatten() {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
                );
            }
        });
        format!("http://{addr}")
    }

    #[test]
    fn ready_when_the_card_answers() {
        let probe = Probe::new(Duration::from_secs(5));
        let base = server(200);
        assert_eq!(probe.ask(&base, CARD), Ok(()));
        let mut rounds = 0;
        let r = probe.wait("http://unused", CARD, || {
            rounds += 1;
            Ok((rounds > 2).then(|| base.clone()))
        });
        assert_eq!(r, Ok(()));
        assert_eq!(rounds, 3);
    }

    #[test]
    fn a_dead_worker_ends_the_wait_and_silence_times_out() {
        let probe = Probe::new(Duration::from_millis(300));
        let gone = probe.wait("http://x", CARD, || {
            Err(BackendError::NotReady(
                "the worker exited with code 3".into(),
            ))
        });
        assert_eq!(
            gone,
            Err(BackendError::NotReady(
                "the worker exited with code 3".into()
            ))
        );
        let not_found = server(404);
        assert_eq!(probe.ask(&not_found, CARD), Err("it answered 404".into()));
        let Err(BackendError::NotReady(why)) =
            probe.wait("http://x", CARD, || Ok(Some(not_found.clone())))
        else {
            panic!("expected a timeout")
        };
        assert!(
            why.contains("did not answer")
                && why.contains(&not_found)
                && why.ends_with("(last try: it answered 404)"),
            "{why}"
        );
        let Err(BackendError::NotReady(why)) = probe.wait("http://shown", CARD, || Ok(None)) else {
            panic!("expected a timeout")
        };
        assert!(
            why.contains("http://shown") && why.ends_with("(it had no address yet)"),
            "{why}"
        );
        assert!(Probe::new(Duration::ZERO).disabled());
    }
}
