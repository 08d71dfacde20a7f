//! The Docker Engine API client (also speaks to Podman's Docker-compatible API): ureq over
//! the engine's Unix socket, explicit timeouts on every call, the API version negotiated
//! once from `/version`, and failures classified by status code.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;

use super::unix_socket;
use crate::backend::api_call::{self, one_line, percent_encode, Method};
use crate::backend::labels::Ours;
use crate::backend::Logs;

/// The newest API version this client knows; all calls used are unchanged from 1.41 on.
pub const NEWEST_API: (u32, u32) = (1, 47);
/// The oldest API version this client accepts (Debian's dockerd 20.10 speaks 1.41).
pub const OLDEST_API: (u32, u32) = (1, 40);
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);
const MAX_RESPONSE: u64 = 32 << 20;
const LOGS_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The socket cannot be reached, or the call timed out.
    Unreachable(String),
    /// The engine answered with an error status.
    Status { status: u16, message: String },
    /// The engine answered something this client cannot read.
    Protocol(String),
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::Unreachable(why) => write!(f, "engine unreachable: {why}"),
            EngineError::Status { status, message } => {
                write!(f, "engine answered {status}: {message}")
            }
            EngineError::Protocol(why) => write!(f, "unexpected engine answer: {why}"),
        }
    }
}

impl std::error::Error for EngineError {}

impl EngineError {
    pub fn status(&self) -> Option<u16> {
        match self {
            EngineError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `GET /containers/json` items (the fields used), borrowing their text from the engine's
/// answer (a [`Listing`]); only this controller's labels are read.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Summary<'a> {
    #[serde(rename = "Id", borrow)]
    pub id: Cow<'a, str>,
    #[serde(rename = "Names", borrow)]
    names: FirstName<'a>,
    #[serde(rename = "Labels")]
    pub labels: Option<Ours>,
    #[serde(rename = "State", borrow)]
    pub state: Cow<'a, str>,
    /// `Exited (137) 5 minutes ago`, `Up 2 hours`: the engine's words for its state.
    #[serde(rename = "Status", borrow)]
    pub status: Cow<'a, str>,
    #[serde(rename = "Created")]
    pub created: i64,
    #[serde(rename = "Ports", borrow)]
    pub ports: Option<Vec<Port<'a>>>,
    /// What the container mounts; `None` when the engine did not say.
    #[serde(rename = "Mounts", borrow)]
    pub mounts: Option<Vec<Mount<'a>>>,
}

impl Summary<'_> {
    /// Whether the container may mount volume `name`: false only when the engine listed its
    /// mounts and that volume is not among them.
    pub fn may_mount(&self, name: &str) -> bool {
        self.mounts
            .as_ref()
            .is_none_or(|m| m.iter().any(|m| m.name.as_deref() == Some(name)))
    }

    /// The container's name, without the engine's leading `/`.
    pub fn name(&self) -> &str {
        self.names
            .0
            .as_deref()
            .unwrap_or("")
            .trim_start_matches('/')
    }
}

/// The first of a container's names (the engine lists one per container; links add more).
#[derive(Debug, Clone, Default)]
struct FirstName<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for FirstName<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = FirstName<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of names")
            }
            fn visit_unit<E>(self) -> Result<FirstName<'de>, E> {
                Ok(FirstName(None))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<FirstName<'de>, A::Error> {
                let first = seq.next_element::<Name>()?.map(|n| n.0);
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(FirstName(first))
            }
        }
        #[derive(Deserialize)]
        struct Name<'a>(#[serde(borrow)] Cow<'a, str>);
        deserializer.deserialize_any(Names)
    }
}

/// One of a listed container's mounts (a volume's has its name).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Mount<'a> {
    #[serde(rename = "Name", borrow)]
    pub name: Option<Cow<'a, str>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Port<'a> {
    #[serde(rename = "IP", borrow)]
    pub ip: Option<Cow<'a, str>>,
    #[serde(rename = "PrivatePort")]
    pub private_port: u16,
    #[serde(rename = "PublicPort")]
    pub public_port: Option<u16>,
    #[serde(rename = "Type", borrow)]
    pub kind: Cow<'a, str>,
}

/// An engine's `GET /containers/json` answer as it came; the containers borrow from it.
pub struct Listing(Vec<u8>);

impl Listing {
    pub fn containers(&self) -> Result<Vec<Summary<'_>>, EngineError> {
        parse_list(&self.0)
    }

    /// The answer's bytes, as the engine sent them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// A volume as the engine describes it (the fields used).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Volume {
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "CreatedAt")]
    pub created_at: String,
    #[serde(rename = "Labels")]
    pub labels: Option<HashMap<String, String>>,
}

/// `GET /containers/{id}/json` (the fields used).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Inspect {
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Name")]
    pub name: String,
    #[serde(rename = "Created")]
    pub created: String,
    #[serde(rename = "Config")]
    pub config: Option<InspectConfig>,
    #[serde(rename = "State")]
    pub state: Option<State>,
    #[serde(rename = "HostConfig")]
    pub host_config: Option<HostConfig>,
    #[serde(rename = "NetworkSettings")]
    pub network_settings: Option<NetworkSettings>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct NetworkSettings {
    #[serde(rename = "Networks")]
    pub networks: Option<HashMap<String, Network>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Network {
    #[serde(rename = "IPAddress")]
    pub ip_address: String,
}

impl Inspect {
    /// The container's address on `network`, if it has one.
    pub fn ip_on(&self, network: &str) -> Option<std::net::IpAddr> {
        self.network_settings
            .as_ref()?
            .networks
            .as_ref()?
            .get(network)?
            .ip_address
            .parse()
            .ok()
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct InspectConfig {
    #[serde(rename = "Labels")]
    pub labels: Option<Ours>,
    /// `{"9090/tcp": {}}`: the worker's port, also when it is not published.
    #[serde(rename = "ExposedPorts")]
    pub exposed_ports: Option<HashMap<String, IgnoredAny>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct State {
    #[serde(rename = "Status")]
    pub status: String,
    #[serde(rename = "Running")]
    pub running: bool,
    #[serde(rename = "ExitCode")]
    pub exit_code: i64,
    #[serde(rename = "OOMKilled")]
    pub oom_killed: bool,
    #[serde(rename = "Error")]
    pub error: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct HostConfig {
    #[serde(rename = "PortBindings")]
    pub port_bindings: Option<HashMap<String, Option<Vec<Binding>>>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Binding {
    #[serde(rename = "HostIp")]
    pub host_ip: String,
    #[serde(rename = "HostPort")]
    pub host_port: String,
}

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

    /// Volume `name`; `None` when there is none.
    pub fn volume(&self, name: &str) -> Result<Option<Volume>, EngineError> {
        let (status, body) = self.call(
            Method::Get,
            &format!("/volumes/{}", percent_encode(name)),
            None,
            DEFAULT_TIMEOUT,
        )?;
        match status {
            200 => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| EngineError::Protocol(format!("volume inspect: {e}"))),
            404 => Ok(None),
            _ => Err(status_error(status, &body)),
        }
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
        let (status, body) = self.call(
            Method::Get,
            &format!("/images/{}/json", percent_encode(reference)),
            None,
            DEFAULT_TIMEOUT,
        )?;
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
        match status {
            200 => {
                let image: Image = serde_json::from_slice(&body)
                    .map_err(|e| EngineError::Protocol(format!("image inspect: {e}")))?;
                Ok(Some(
                    image.config.and_then(|c| c.labels).unwrap_or_default(),
                ))
            }
            404 => Ok(None),
            _ => Err(status_error(status, &body)),
        }
    }

    /// Whether the engine holds image `reference` (a create does not pull).
    pub fn image_present(&self, reference: &str) -> Result<bool, EngineError> {
        self.image_labels(reference).map(|labels| labels.is_some())
    }

    /// A container by id or name; `None` when it does not exist.
    pub fn inspect(&self, id_or_name: &str) -> Result<Option<Inspect>, EngineError> {
        let (status, body) = self.call(
            Method::Get,
            &format!("/containers/{}/json", percent_encode(id_or_name)),
            None,
            DEFAULT_TIMEOUT,
        )?;
        match gone_as_404(status, &body) {
            200 => parse_inspect(&body).map(Some),
            404 => Ok(None),
            _ => Err(status_error(status, &body)),
        }
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

pub fn parse_list(body: &[u8]) -> Result<Vec<Summary<'_>>, EngineError> {
    serde_json::from_slice(body).map_err(|e| EngineError::Protocol(format!("container list: {e}")))
}

pub fn parse_inspect(body: &[u8]) -> Result<Inspect, EngineError> {
    serde_json::from_slice(body)
        .map_err(|e| EngineError::Protocol(format!("container inspect: {e}")))
}

/// The error text of an engine answer: Docker `{"message"}`, Podman `{"cause","message"}`,
/// else the start of the body. Capped, single line.
pub fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Msg {
        message: Option<String>,
        cause: Option<String>,
    }
    let text = match serde_json::from_slice::<Msg>(body) {
        Ok(Msg {
            message: Some(m), ..
        }) if !m.is_empty() => m,
        Ok(Msg { cause: Some(c), .. }) if !c.is_empty() => c,
        _ => String::from_utf8_lossy(body).into_owned(),
    };
    one_line(&text)
}

/// 404 for Podman's answer about a container that went while it was asked about (removed
/// mid-call): 500 with libpod's `ErrNoSuchCtr` cause instead of Docker's 404. Its `cause` is
/// the sentinel error itself, not a message meant for people; any other answer is unchanged.
pub fn gone_as_404(status: u16, body: &[u8]) -> u16 {
    #[derive(Deserialize)]
    struct Cause<'a> {
        #[serde(borrow)]
        cause: Option<Cow<'a, str>>,
    }
    let no_such_container = || {
        serde_json::from_slice::<Cause>(body)
            .is_ok_and(|c| c.cause.as_deref() == Some("no such container"))
    };
    if status == 500 && no_such_container() {
        404
    } else {
        status
    }
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
    fn a_listed_containers_volumes_are_read() {
        // The shape of Docker 28's `GET /containers/json` items (Mounts of a volume and of a
        // bind; none; the field absent, as an engine that does not say).
        let listing = Listing(
            br#"[{"Id":"a","Mounts":[{"Type":"bind","Source":"/x","Destination":"/x"},{"Type":"volume","Name":"ws-1","Source":"/var/lib/docker/volumes/ws-1/_data","Destination":"/workspace","Driver":"local"}]},
                 {"Id":"b","Mounts":[]},
                 {"Id":"c"}]"#
                .to_vec(),
        );
        let c = listing.containers().unwrap();
        assert!(c[0].may_mount("ws-1"));
        assert!(!c[0].may_mount("ws-2"));
        assert!(!c[1].may_mount("ws-1"));
        assert!(c[2].may_mount("ws-1"), "unsaid mounts are assumed");
    }

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
    fn error_bodies() {
        assert_eq!(
            error_message(br#"{"message":"No such image: x:v1"}"#),
            "No such image: x:v1"
        );
        assert_eq!(
            error_message(
                br#"{"cause":"image not known","message":"x: image not known","response":404}"#
            ),
            "x: image not known"
        );
        assert_eq!(error_message(b"plain\ntext"), "plain text");
        // Podman, asked about a container removed mid-call (recorded from Podman 4.3).
        let went = br#"{"cause":"no such container","message":"container 1bb9 does not exist in database: no such container","response":500}"#;
        assert_eq!(gone_as_404(500, went), 404);
        assert_eq!(gone_as_404(500, br#"{"cause":"image not known"}"#), 500);
        assert_eq!(gone_as_404(500, b"no such container"), 500);
        assert_eq!(gone_as_404(409, went), 409);
        assert_eq!(error_message(&[0xff, b'a']), "\u{fffd}a");
    }

    #[test]
    fn parses_engine_json_leniently() {
        let list = br#"[{"Id":"abc","Names":["/n"],"Labels":null,"State":"exited","Created":5,"Ports":null,"Extra":1}]"#;
        let items = parse_list(list).unwrap();
        assert_eq!((items[0].name(), items[0].state.as_ref()), ("n", "exited"));
        // Names absent, null or empty; text with escapes (copied, not borrowed) reads the same.
        let odd = br#"[{"Id":"a\u0062c"},{"Names":null},{"Names":[]},{"Names":["/x\/y","/z"],"State":"r\u0075nning"}]"#;
        let items = parse_list(odd).unwrap();
        assert_eq!(items[0].id, "abc");
        assert_eq!(
            items.iter().map(Summary::name).collect::<Vec<_>>(),
            ["", "", "", "x/y"]
        );
        assert_eq!(items[3].state, "running");
        let inspect = br#"{"Id":"abc","State":{"Status":"exited","ExitCode":137,"OOMKilled":true},
            "HostConfig":{"PortBindings":{"9090/tcp":[{"HostIp":"127.0.0.1","HostPort":"4000"}]}}}"#;
        let i = parse_inspect(inspect).unwrap();
        assert!(i.state.unwrap().oom_killed);
        assert!(parse_list(b"{}").is_err());
    }

    #[test]
    fn encodes_filters() {
        assert_eq!(
            percent_encode(r#"{"a":["b=c"]}"#),
            "%7B%22a%22%3A%5B%22b%3Dc%22%5D%7D"
        );
    }
}
