//! The Docker Engine API client (also speaks to Podman's Docker-compatible API): ureq over
//! the engine's Unix socket, explicit timeouts on every call, the API version negotiated
//! once from `/version`, and failures classified by status code.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::unix_socket;
use super::wire::{error_message, gone_as_404, EngineError, Inspect, Listing, Volume};
use crate::backend::api_call::{self, percent_encode, Method};
use crate::backend::Logs;

/// The newest API version this client knows; all calls used are unchanged from 1.41 on.
pub const NEWEST_API: (u32, u32) = (1, 47);
/// The oldest API version this client accepts (Debian's dockerd 20.10 speaks 1.41).
pub const OLDEST_API: (u32, u32) = (1, 40);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_RESPONSE: u64 = 32 << 20;
const LOGS_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct VersionInfo {
    #[serde(rename = "ApiVersion")]
    api_version: String,
    #[serde(rename = "MinAPIVersion", default)]
    min_api_version: Option<String>,
}

pub struct Engine {
    agent: ureq::Agent,
    socket: PathBuf,
    /// `v1.41`-style prefix, negotiated on first use.
    version: Mutex<Option<String>>,
}

impl Engine {
    pub fn new(socket: PathBuf) -> Engine {
        let config = api_call::agent_config(DEFAULT_TIMEOUT, Duration::from_secs(2)).build();
        Engine {
            agent: unix_socket::agent(socket.clone(), config),
            socket,
            version: Mutex::new(None),
        }
    }

    /// One call on an unversioned path. Returns the status and the body.
    fn raw(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), EngineError> {
        let url = format!("http://docker{path}");
        let unreachable =
            |e: ureq::Error| EngineError::Unreachable(format!("{} ({e})", self.socket.display()));
        let mut response =
            api_call::send(&self.agent, method, &url, &[], body, timeout).map_err(unreachable)?;
        let status = response.status().as_u16();
        let bytes = api_call::read_body(&mut response, MAX_RESPONSE).map_err(unreachable)?;
        Ok((status, bytes))
    }

    /// The negotiated `/vX.Y` prefix.
    fn prefix(&self) -> Result<String, EngineError> {
        let mut version = self.version.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(v) = version.as_ref() {
            return Ok(v.clone());
        }
        let v = self.negotiate()?;
        *version = Some(v.clone());
        Ok(v)
    }

    fn negotiate(&self) -> Result<String, EngineError> {
        let (status, body) = self.raw(Method::Get, "/version", None, DEFAULT_TIMEOUT)?;
        if status != 200 {
            return Err(status_error(status, &body));
        }
        let info: VersionInfo = serde_json::from_slice(&body)
            .map_err(|e| EngineError::Protocol(format!("/version: {e}")))?;
        let version = negotiate_version(&info.api_version, info.min_api_version.as_deref())?;
        log::info!(
            "docker engine at {} speaks API {}; using {version}",
            self.socket.display(),
            info.api_version
        );
        Ok(version)
    }

    /// A call on a versioned path; a 400 (e.g. "client version too new") renegotiates once.
    fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<(u16, Vec<u8>), EngineError> {
        let prefix = self.prefix()?;
        let (status, bytes) = self.raw(method, &format!("/{prefix}{path}"), body, timeout)?;
        if status == 400 {
            let fresh = self.negotiate()?;
            if fresh != prefix {
                *self.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(fresh.clone());
                return self.raw(method, &format!("/{fresh}{path}"), body, timeout);
            }
        }
        Ok((status, bytes))
    }

    /// The last `lines` lines of a container's output (stdout and stderr as they
    /// interleaved), read as a stream and kept within [`crate::backend::tail::MAX_LOG_BYTES`].
    pub fn logs(&self, id: &str, lines: u32) -> Result<Logs, EngineError> {
        let prefix = self.prefix()?;
        let url = format!(
            "http://docker/{prefix}/containers/{}/logs?stdout=1&stderr=1&tail={lines}",
            percent_encode(id)
        );
        let unreachable =
            |e: ureq::Error| EngineError::Unreachable(format!("{} ({e})", self.socket.display()));
        let mut response = api_call::send(&self.agent, Method::Get, &url, &[], None, LOGS_TIMEOUT)
            .map_err(unreachable)?;
        let status = response.status().as_u16();
        if status != 200 {
            let body = api_call::read_body(&mut response, 64 << 10).map_err(unreachable)?;
            return Err(status_error(status, &body));
        }
        api_call::log_tail(&mut response, lines, true)
            .map_err(|e| EngineError::Unreachable(format!("reading the logs: {e}")))
    }

    /// Follows `/events` for containers carrying `label_selectors`, from `since` (Unix
    /// seconds) when given: `on_event` sees each event (and says whether to go on) until the
    /// stream ends or `timeout` passes (then it returns `Ok`: the caller follows again).
    pub fn events(
        &self,
        label_selectors: &[String],
        since: Option<i64>,
        timeout: Duration,
        on_event: &mut dyn FnMut(&Value) -> bool,
    ) -> Result<(), EngineError> {
        let prefix = self.prefix()?;
        let filters = serde_json::json!({"type": ["container"], "label": label_selectors});
        let mut url = format!(
            "http://docker/{prefix}/events?filters={}",
            percent_encode(&filters.to_string())
        );
        if let Some(since) = since {
            url.push_str(&format!("&since={since}"));
        }
        let unreachable =
            |e: String| EngineError::Unreachable(format!("{} ({e})", self.socket.display()));
        let started = std::time::Instant::now();
        let mut response = api_call::send(&self.agent, Method::Get, &url, &[], None, timeout)
            .map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        if status != 200 {
            let body = api_call::read_body(&mut response, 64 << 10)
                .map_err(|e| unreachable(e.to_string()))?;
            return Err(status_error(status, &body));
        }
        let mut reader = std::io::BufReader::new(response.body_mut().as_reader());
        loop {
            let mut line = Vec::new();
            let read = std::io::Read::take(&mut reader, MAX_RESPONSE).read_until(b'\n', &mut line);
            match read {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                // The call's own bound: the stream was quiet, not broken.
                Err(_) if started.elapsed() + Duration::from_secs(1) >= timeout => return Ok(()),
                Err(e) => return Err(unreachable(format!("reading events: {e}"))),
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            let event: Value = serde_json::from_slice(&line)
                .map_err(|e| EngineError::Protocol(format!("/events: {e}")))?;
            if !on_event(&event) {
                return Ok(());
            }
        }
    }

    pub fn ping(&self) -> Result<(), EngineError> {
        let (status, body) = self.raw(Method::Get, "/_ping", None, Duration::from_secs(3))?;
        match status {
            200 => Ok(()),
            _ => Err(status_error(status, &body)),
        }
    }

    /// Creates a container; returns its id.
    pub fn create(&self, name: &str, config: &Value) -> Result<String, EngineError> {
        let (status, body) = self.call(
            Method::Post,
            &format!("/containers/create?name={name}"),
            Some(config),
            Duration::from_secs(30),
        )?;
        if status != 201 {
            return Err(status_error(status, &body));
        }
        #[derive(Deserialize)]
        struct Created {
            #[serde(rename = "Id")]
            id: String,
        }
        let created: Created = serde_json::from_slice(&body)
            .map_err(|e| EngineError::Protocol(format!("container create: {e}")))?;
        Ok(created.id)
    }

    /// A call whose answer carries nothing but its status: any of `ok` is success.
    fn expect(
        &self,
        method: Method,
        path: &str,
        timeout: Duration,
        ok: &[u16],
    ) -> Result<(), EngineError> {
        let (status, body) = self.call(method, path, None, timeout)?;
        if ok.contains(&gone_as_404(status, &body)) {
            Ok(())
        } else {
            Err(status_error(status, &body))
        }
    }

    pub fn start(&self, id: &str) -> Result<(), EngineError> {
        self.expect(
            Method::Post,
            &format!("/containers/{id}/start"),
            Duration::from_secs(30),
            &[204, 304],
        )
    }

    /// Waits (at most `timeout`) until the container has ended; its exit code.
    pub fn wait(&self, id: &str, timeout: Duration) -> Result<i64, EngineError> {
        let (status, body) = self.call(
            Method::Post,
            &format!("/containers/{id}/wait"),
            None,
            timeout,
        )?;
        if status != 200 {
            return Err(status_error(status, &body));
        }
        #[derive(Deserialize)]
        struct Ended {
            #[serde(rename = "StatusCode")]
            status_code: i64,
        }
        let ended: Ended = serde_json::from_slice(&body)
            .map_err(|e| EngineError::Protocol(format!("container wait: {e}")))?;
        Ok(ended.status_code)
    }

    /// Stops with a grace period; already stopped or gone counts as stopped.
    pub fn stop(&self, id: &str, grace_secs: u64) -> Result<(), EngineError> {
        let path = format!("/containers/{id}/stop?t={grace_secs}");
        self.expect(
            Method::Post,
            &path,
            Duration::from_secs(grace_secs + 20),
            &[204, 304, 404],
        )
    }

    /// Sends a signal (tests use it to kill workers).
    pub fn kill(&self, id: &str, signal: &str) -> Result<(), EngineError> {
        self.expect(
            Method::Post,
            &format!("/containers/{id}/kill?signal={signal}"),
            DEFAULT_TIMEOUT,
            &[204],
        )
    }

    /// Removes (forced, with volumes); gone or removal in progress counts as removed.
    pub fn remove(&self, id: &str) -> Result<(), EngineError> {
        self.expect(
            Method::Delete,
            &format!("/containers/{id}?force=1&v=1"),
            Duration::from_secs(30),
            &[204, 404, 409],
        )
    }

    /// All containers (running or not) matching every `key=value` label selector.
    pub fn list(&self, label_selectors: &[String]) -> Result<Listing, EngineError> {
        let filters = serde_json::json!({ "label": label_selectors }).to_string();
        let path = format!(
            "/containers/json?all=1&filters={}",
            percent_encode(&filters)
        );
        let (status, body) = self.call(Method::Get, &path, None, DEFAULT_TIMEOUT)?;
        if status != 200 {
            return Err(status_error(status, &body));
        }
        Ok(Listing(body))
    }

    /// Creates volume `name` with `labels`; one that exists already is answered as it is
    /// (the engine's own create is idempotent): its labels say whose it is.
    pub fn create_volume(&self, name: &str, labels: &Value) -> Result<Volume, EngineError> {
        let body = serde_json::json!({"Name": name, "Labels": labels});
        let (status, answer) = self.call(
            Method::Post,
            "/volumes/create",
            Some(&body),
            Duration::from_secs(30),
        )?;
        if status != 201 && status != 200 {
            return Err(status_error(status, &answer));
        }
        serde_json::from_slice(&answer)
            .map_err(|e| EngineError::Protocol(format!("volume create: {e}")))
    }

    /// GET `path`: what the engine has there, read as `T` (`what` names it in a protocol
    /// error), or `None` when it has nothing (404, or Podman's word for a container that
    /// went mid-call).
    pub(super) fn get_found<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, EngineError> {
        let (status, body) = self.call(Method::Get, path, None, DEFAULT_TIMEOUT)?;
        match gone_as_404(status, &body) {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| EngineError::Protocol(format!("{what}: {e}"))),
            404 => Ok(None),
            _ => Err(status_error(status, &body)),
        }
    }

    /// Volume `name`; `None` when there is none.
    pub fn volume(&self, name: &str) -> Result<Option<Volume>, EngineError> {
        let path = format!("/volumes/{}", percent_encode(name));
        self.get_found(&path, "volume inspect")
    }

    /// Volumes matching every `key=value` label selector.
    pub fn volumes(&self, label_selectors: &[String]) -> Result<Vec<Volume>, EngineError> {
        let filters = serde_json::json!({ "label": label_selectors }).to_string();
        let path = format!("/volumes?filters={}", percent_encode(&filters));
        let (status, body) = self.call(Method::Get, &path, None, DEFAULT_TIMEOUT)?;
        if status != 200 {
            return Err(status_error(status, &body));
        }
        #[derive(Deserialize)]
        struct Volumes {
            #[serde(rename = "Volumes", default)]
            volumes: Option<Vec<Volume>>,
        }
        let v: Volumes = serde_json::from_slice(&body)
            .map_err(|e| EngineError::Protocol(format!("volume list: {e}")))?;
        Ok(v.volumes.unwrap_or_default())
    }

    /// Removes volume `name`; gone counts as removed (`false`). In use is the engine's 409.
    pub fn remove_volume(&self, name: &str) -> Result<bool, EngineError> {
        let (status, body) = self.call(
            Method::Delete,
            &format!("/volumes/{}", percent_encode(name)),
            None,
            Duration::from_secs(30),
        )?;
        match status {
            204 => Ok(true),
            404 => Ok(false),
            _ => Err(status_error(status, &body)),
        }
    }

    /// Renames container `from` (a name or id) to `to`: the engine refuses (404) when `from`
    /// is no container now and (409) when `to` is taken, so of two renames of one name, one
    /// wins.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), EngineError> {
        let path = format!(
            "/containers/{}/rename?name={}",
            percent_encode(from),
            percent_encode(to)
        );
        let (status, body) = self.call(Method::Post, &path, None, DEFAULT_TIMEOUT)?;
        match gone_as_404(status, &body) {
            200 | 204 => Ok(()),
            status => Err(status_error(status, &body)),
        }
    }

    /// The labels of image `reference` (`Config.Labels`); `None` when the engine has no such
    /// image.
    pub fn image_labels(
        &self,
        reference: &str,
    ) -> Result<Option<HashMap<String, String>>, EngineError> {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Image {
            #[serde(rename = "Config")]
            config: Option<ImageConfig>,
        }
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct ImageConfig {
            #[serde(rename = "Labels")]
            labels: Option<HashMap<String, String>>,
        }
        let path = format!("/images/{}/json", percent_encode(reference));
        let image: Option<Image> = self.get_found(&path, "image inspect")?;
        Ok(image.map(|i| i.config.and_then(|c| c.labels).unwrap_or_default()))
    }

    /// Whether the engine holds image `reference` (a create does not pull).
    pub fn image_present(&self, reference: &str) -> Result<bool, EngineError> {
        self.image_labels(reference).map(|labels| labels.is_some())
    }

    /// A container by id or name; `None` when it does not exist.
    pub fn inspect(&self, id_or_name: &str) -> Result<Option<Inspect>, EngineError> {
        let path = format!("/containers/{}/json", percent_encode(id_or_name));
        self.get_found(&path, "container inspect")
    }
}

/// `min(daemon, newest known)`, refused when below the daemon's minimum or our oldest.
pub fn negotiate_version(daemon: &str, daemon_min: Option<&str>) -> Result<String, EngineError> {
    let parse = |v: &str| -> Option<(u32, u32)> {
        let (a, b) = v.trim().split_once('.')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    let daemon_v = parse(daemon)
        .ok_or_else(|| EngineError::Protocol(format!("API version {daemon:?} is not X.Y")))?;
    let chosen = daemon_v.min(NEWEST_API);
    if let Some(min) = daemon_min.and_then(parse) {
        if chosen < min {
            return Err(EngineError::Protocol(format!(
                "the engine needs API {}.{} or newer; this controller speaks up to {}.{}",
                min.0, min.1, NEWEST_API.0, NEWEST_API.1
            )));
        }
    }
    if chosen < OLDEST_API {
        return Err(EngineError::Protocol(format!(
            "the engine speaks API {}.{}; this controller needs {}.{} or newer",
            chosen.0, chosen.1, OLDEST_API.0, OLDEST_API.1
        )));
    }
    Ok(format!("v{}.{}", chosen.0, chosen.1))
}

fn status_error(status: u16, body: &[u8]) -> EngineError {
    EngineError::Status {
        status,
        message: error_message(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_negotiation() {
        assert_eq!(negotiate_version("1.41", Some("1.12")).unwrap(), "v1.41");
        assert_eq!(negotiate_version("1.52", Some("1.44")).unwrap(), "v1.47");
        assert_eq!(negotiate_version("1.52", Some("1.40")).unwrap(), "v1.47");
        assert!(negotiate_version("1.52", Some("1.48")).is_err());
        assert!(negotiate_version("1.30", None).is_err());
        assert!(negotiate_version("banana", None).is_err());
    }

    #[test]
    fn encodes_filters() {
        assert_eq!(
            percent_encode(r#"{"a":["b=c"]}"#),
            "%7B%22a%22%3A%5B%22b%3Dc%22%5D%7D"
        );
    }
}
