//! The Docker Engine API's wire types as this client reads them (containers listed and
//! inspected, volumes, ports, mounts), its error, and the parsing of its answers. Lists are
//! borrowed from the answer's bytes: a list of a thousand containers allocates little.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::Deserialize;

use crate::backend::api_call::one_line;
use crate::backend::labels::Ours;
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
    /// The networks it is on, with its address on each.
    #[serde(rename = "NetworkSettings")]
    pub network_settings: Option<NetworkSettings>,
}

impl Summary<'_> {
    /// Its address on `network`: the one it has now, else the fixed one it was given.
    pub fn ip_on(&self, network: &str) -> Option<std::net::IpAddr> {
        let n = self
            .network_settings
            .as_ref()?
            .networks
            .as_ref()?
            .get(network)?;
        n.ip_address
            .parse()
            .ok()
            .or_else(|| n.ipam_config.as_ref()?.ipv4_address.parse().ok())
    }

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
pub struct Listing(pub(super) Vec<u8>);

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
    /// The address asked for at create (kept while the container is stopped).
    #[serde(rename = "IPAMConfig")]
    pub ipam_config: Option<IpamConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct IpamConfig {
    #[serde(rename = "IPv4Address")]
    pub ipv4_address: String,
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
}
