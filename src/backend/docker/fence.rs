//! Fenced workers on Docker (a template whose `egress` is `"none"` or a list): the container
//! joins only `EGRESS_NETWORK`, an internal network (`docker network create --internal`), so
//! it has no route out: the engine gives it no default gateway and drops whatever it forwards
//! between that bridge and any other. What it can reach is the network's own members and the
//! host's address on that bridge, where the egress proxy listens (`EGRESS_PROXY_URL`), or a
//! proxy container joined to it and to an outside network.
//!
//! An internal network publishes no ports, so callers reach the worker at its own address on
//! that network: the container is given a fixed address there, picked at random in the
//! network's subnet before the create (a taken one is the engine's "Address already in use",
//! and another is tried, as a taken host port is), and its `a2a_url` is
//! `http://ADDRESS:PORT` from the first moment: in its environment, its card, and every list
//! (which reads the address back from the engine). The controller on the host, and the proxy,
//! reach that address directly; a controller in a container must join the network too.
//!
//! Also here: a template's OCI runtime (`HostConfig.Runtime`), which must be one the engine
//! lists in `/info`.

use std::net::{IpAddr, Ipv4Addr};

use serde::Deserialize;
use serde_json::json;

use super::wire::EngineError;
use super::DockerBackend;
use crate::backend::{BackendError, Template};
use crate::token;

/// `GET /networks/{name}` (the fields used).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct NetworkInfo {
    #[serde(rename = "Internal")]
    internal: bool,
    #[serde(rename = "IPAM")]
    ipam: Ipam,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Ipam {
    #[serde(rename = "Config")]
    config: Option<Vec<IpamConfig>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct IpamConfig {
    #[serde(rename = "Subnet")]
    subnet: String,
    #[serde(rename = "Gateway")]
    gateway: String,
}

/// The egress network as the engine describes it: internal or not, its IPv4 subnet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct EgressNet {
    pub internal: bool,
    pub net: Ipv4Addr,
    pub bits: u8,
    pub gateway: Option<Ipv4Addr>,
}

impl EgressNet {
    /// A random address of the subnet: not its first, last or the gateway.
    pub(super) fn random_address(&self) -> Result<Ipv4Addr, BackendError> {
        let hosts = 1u64 << (32 - u32::from(self.bits));
        let r = token::random_hex(8)
            .ok()
            .and_then(|h| u64::from_str_radix(&h, 16).ok())
            .ok_or_else(|| BackendError::Internal("the system random generator failed".into()))?;
        let usable = hosts - 2;
        let at = |offset: u64| Ipv4Addr::from(u32::from(self.net) + offset as u32);
        let offset = 1 + r % usable;
        if Some(at(offset)) != self.gateway {
            return Ok(at(offset));
        }
        Ok(at(offset % usable + 1))
    }
}

/// The engine's refusal of a fixed address on a network made without `--subnet`.
pub(super) fn is_unfixable(e: &EngineError) -> bool {
    matches!(e, EngineError::Status { message, .. } if message.contains("user configured subnets"))
}

/// A start failure because the fixed address was taken in between.
pub(super) fn is_address_clash(e: &EngineError) -> bool {
    matches!(e, EngineError::Status { message, .. } if message.contains("Address already in use"))
}

impl DockerBackend {
    /// `EGRESS_NETWORK` as the engine has it; `None` when there is no such network.
    pub(super) fn egress_net(&self) -> Result<Option<EgressNet>, EngineError> {
        let path = format!(
            "/networks/{}",
            crate::backend::api_call::percent_encode(&self.docker.egress_network)
        );
        let Some(info) = self
            .engine
            .get_found::<NetworkInfo>(&path, "network inspect")?
        else {
            return Ok(None);
        };
        let v4 = info
            .ipam
            .config
            .unwrap_or_default()
            .into_iter()
            .find_map(|c| {
                let (net, bits) = c.subnet.split_once('/')?;
                let net: Ipv4Addr = net.parse().ok()?;
                let bits: u8 = bits.parse().ok().filter(|b| (8..=30).contains(b))?;
                // Without one given, the engine takes the subnet's first address for the bridge.
                let first = Ipv4Addr::from(u32::from(net) + 1);
                Some((net, bits, Some(c.gateway.parse().unwrap_or(first))))
            });
        let Some((net, bits, gateway)) = v4 else {
            return Err(EngineError::Protocol(format!(
                "network {} has no IPv4 subnet of /8 to /30",
                self.docker.egress_network
            )));
        };
        Ok(Some(EgressNet {
            internal: info.internal,
            net,
            bits,
            gateway,
        }))
    }

    /// Why template `t`'s fence cannot be enforced on this engine (`None`: it can, or `t` is
    /// not fenced). Asked at startup and by `check`.
    pub(super) fn fence_refusal(&self, t: &Template) -> Result<Option<String>, EngineError> {
        if !t.egress.fenced() {
            return Ok(None);
        }
        let name = &self.docker.egress_network;
        Ok(match self.egress_net()? {
            None => Some(format!(
                "egress: {} cannot be enforced: the Docker network {name} does not exist (make it with `docker network create --internal --subnet 10.231.0.0/24 {name}`, and start the egress proxy on its gateway address)",
                t.egress.describe()
            )),
            Some(n) if !n.internal => Some(format!(
                "egress: {} cannot be enforced: the Docker network {name} is not internal, so its workers could reach anything (make it with `docker network create --internal --subnet 10.231.0.0/24 {name}`)",
                t.egress.describe()
            )),
            Some(_) => None,
        })
    }

    /// Why template `t`'s runtime is not on this engine (`None`: it is, or `t` names none).
    pub(super) fn runtime_refusal(&self, t: &Template) -> Result<Option<String>, EngineError> {
        let Some(runtime) = &t.runtime else {
            return Ok(None);
        };
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct Info {
            #[serde(rename = "Runtimes")]
            runtimes: std::collections::BTreeMap<String, serde_json::Value>,
        }
        let info: Info = self.engine.get_found("/info", "info")?.unwrap_or_default();
        if info.runtimes.contains_key(runtime) {
            return Ok(None);
        }
        let offered: Vec<&str> = info.runtimes.keys().map(String::as_str).collect();
        Ok(Some(format!(
            "runtime: the engine offers no runtime {runtime:?} (it offers: {})",
            offered.join(", ")
        )))
    }

    /// A fenced container's network settings: only `EGRESS_NETWORK`, at `address`.
    pub(super) fn fence_config(&self, config: &mut serde_json::Value, address: Ipv4Addr) {
        let network = &self.docker.egress_network;
        config["HostConfig"]["NetworkMode"] = json!(network);
        config["NetworkingConfig"] = json!({"EndpointsConfig": {
            network.as_str(): {"IPAMConfig": {"IPv4Address": address.to_string()}}
        }});
    }
}

/// Where a fenced worker is reached: its address on the egress network.
pub(super) fn fenced_url(address: IpAddr, port: u16) -> String {
    format!("http://{}", std::net::SocketAddr::new(address, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_random_address_is_a_host_of_the_subnet_and_not_its_gateway() {
        let net = EgressNet {
            internal: true,
            net: Ipv4Addr::new(10, 231, 0, 0),
            bits: 30,
            gateway: Some(Ipv4Addr::new(10, 231, 0, 1)),
        };
        for _ in 0..200 {
            let ip = net.random_address().unwrap();
            assert_eq!(ip, Ipv4Addr::new(10, 231, 0, 2), "{ip}");
        }
    }
}
