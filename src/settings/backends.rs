//! Each backend's own settings, read (and required) only when that backend is selected.

use std::net::IpAddr;
use std::path::PathBuf;

use super::error::Error;
use super::raw::Raw;
use super::types::{
    BackendSettings, ContainerSettings, DockerSettings, K8sSettings, LocalSettings, ReplicaSettings,
};
use super::values::{check_image, expand_home, http_url, invalid, parse_bytes};

impl Raw {
    /// The selected backend's settings.
    pub(super) fn backend(&self, warnings: &mut Vec<String>) -> Result<BackendSettings, Error> {
        // The backend's own settings are read (and required) only for the backend selected.
        match self.get("BACKEND").as_str() {
            "docker" => Ok(BackendSettings::Docker {
                container: self.container()?,
                docker: self.docker()?,
            }),
            "k8s" | "kubernetes" | "k3s" => {
                let mut container = self.container()?;
                // The compiled-in default (host.docker.internal) is Docker's name for the
                // host: no cluster has it. Pods get the variable only when it is set.
                if self
                    .0
                    .get("WORKER_ANTHROPIC_BASE_URL")
                    .is_none_or(|v| v.trim().is_empty())
                {
                    container.anthropic_base_url = String::new();
                    warnings.push(
                        "WORKER_ANTHROPIC_BASE_URL is not set: worker pods get no ANTHROPIC_BASE_URL (the default, http://host.docker.internal:8788, does not exist in a cluster); set it to the model gateway's in-cluster URL".into(),
                    );
                }
                Ok(BackendSettings::K8s {
                    container,
                    k8s: self.k8s()?,
                })
            }
            "local" => Ok(BackendSettings::Local(self.local()?)),
            other => Err(invalid(
                "BACKEND",
                format!("{other:?} is not one of docker, k8s, local"),
            )),
        }
    }

    pub(super) fn container(&self) -> Result<ContainerSettings, Error> {
        let image = self.required("WORKER_IMAGE", " for the docker and k8s backends")?;
        check_image(&image)?;
        let port: u16 = self.number("WORKER_PORT", "a port number")?;
        if port == 0 {
            return Err(invalid("WORKER_PORT", "0 is not a port".into()));
        }
        let token_env = self.get("WORKER_TOKEN_ENV");
        if token_env.is_empty()
            || token_env.as_bytes()[0].is_ascii_digit()
            || !token_env
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(invalid(
                "WORKER_TOKEN_ENV",
                format!("{token_env:?} is not an environment variable name"),
            ));
        }
        let memory_bytes = self
            .optional("WORKER_MEMORY")
            .map(|m| {
                parse_bytes(&m).ok_or_else(|| {
                    invalid(
                        "WORKER_MEMORY",
                        format!("{m:?} is not a size such as 512m or 2g"),
                    )
                })
            })
            .transpose()?;
        let nano_cpus = self
            .optional("WORKER_CPUS")
            .map(|c| match c.parse::<f64>() {
                Ok(v) if v > 0.0 && v <= 1024.0 => Ok((v * 1e9).round() as i64),
                _ => Err(invalid(
                    "WORKER_CPUS",
                    format!("{c:?} is not a CPU count such as 1.5"),
                )),
            })
            .transpose()?;
        Ok(ContainerSettings {
            image,
            port,
            token_env,
            anthropic_base_url: self.get("WORKER_ANTHROPIC_BASE_URL"),
            anthropic_model: self.get("WORKER_ANTHROPIC_MODEL"),
            memory_bytes,
            nano_cpus,
            fence: None,
            copy_image: match self.optional("WORKSPACE_COPY_IMAGE") {
                Some(image) => {
                    check_image(&image).map_err(|e| match e {
                        Error::Invalid { reason, .. } => invalid("WORKSPACE_COPY_IMAGE", reason),
                        other => other,
                    })?;
                    Some(image)
                }
                None => None,
            },
        })
    }

    pub(super) fn docker(&self) -> Result<DockerSettings, Error> {
        let host = self.get("DOCKER_HOST");
        let socket = match host.strip_prefix("unix://") {
            Some(path) if path.starts_with('/') => PathBuf::from(path),
            _ => {
                return Err(invalid(
                    "DOCKER_HOST",
                    format!(
                        "{host:?} is not unix:///absolute/path (only Unix sockets are supported)"
                    ),
                ))
            }
        };
        let publish_host: IpAddr = self.number("WORKER_PUBLISH_HOST", "an IP address")?;
        if publish_host.is_unspecified() {
            return Err(invalid(
                "WORKER_PUBLISH_HOST",
                format!("{publish_host} means all interfaces; workers are published on one address only (e.g. 127.0.0.1)"),
            ));
        }
        let network = self.optional("DOCKER_NETWORK");
        if let Some(n) = &network {
            if n.bytes()
                .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
            {
                return Err(invalid(
                    "DOCKER_NETWORK",
                    format!("{n:?} is not a network name"),
                ));
            }
        }
        let pids_limit = self
            .optional("WORKER_PIDS_LIMIT")
            .map(|p| match p.parse::<i64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(invalid(
                    "WORKER_PIDS_LIMIT",
                    format!("{p:?} is not a positive number"),
                )),
            })
            .transpose()?;
        Ok(DockerSettings {
            socket,
            network,
            publish_host,
            pids_limit,
            egress_network: String::new(),
        })
    }

    pub(super) fn k8s(&self) -> Result<K8sSettings, Error> {
        let api_url = self
            .optional("K8S_API_URL")
            .map(|u| http_url("K8S_API_URL", &u))
            .transpose()?;
        let k = K8sSettings {
            namespace: self.optional("K8S_NAMESPACE"),
            worker_service: self.get("K8S_WORKER_SERVICE"),
            cluster_domain: self.get("K8S_CLUSTER_DOMAIN"),
            ca_file: self.optional_path("K8S_CA_FILE")?,
            token_file: self.optional_path("K8S_TOKEN_FILE")?,
            client_cert_file: self.optional_path("K8S_CLIENT_CERT_FILE")?,
            client_key_file: self.optional_path("K8S_CLIENT_KEY_FILE")?,
            pod_template: self.optional_path("K8S_POD_TEMPLATE")?,
            replica: self.replica()?,
            worker_url: self
                .optional("K8S_WORKER_URL")
                .map(|u| worker_url(&u))
                .transpose()?,
            api_url,
            egress_policy: String::new(),
            clone_storage_classes: self
                .get("K8S_CLONE_STORAGE_CLASSES")
                .split(',')
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect(),
        };
        if k.api_url.is_some() {
            if k.ca_file.is_none() {
                return Err(Error::Missing {
                    name: "K8S_CA_FILE",
                    why: " when K8S_API_URL is set",
                });
            }
            let cert_pair = k.client_cert_file.is_some() && k.client_key_file.is_some();
            if k.token_file.is_none() && !cert_pair {
                return Err(Error::Missing {
                    name: "K8S_TOKEN_FILE",
                    why: " (or K8S_CLIENT_CERT_FILE with K8S_CLIENT_KEY_FILE) when K8S_API_URL is set",
                });
            }
        }
        Ok(k)
    }

    /// `K8S_REPLICA_IP` with `K8S_REPLICA_SELECTOR`: both or neither.
    fn replica(&self) -> Result<Option<ReplicaSettings>, Error> {
        match (
            self.optional("K8S_REPLICA_IP"),
            self.optional("K8S_REPLICA_SELECTOR"),
        ) {
            (None, None) => Ok(None),
            (Some(ip), Some(selector)) => {
                let ip = ip.trim().parse().map_err(|_| {
                    invalid(
                        "K8S_REPLICA_IP",
                        format!("{ip:?} is not an IP address (set it from the pod's status.podIP)"),
                    )
                })?;
                if selector.contains(['&', '#', '?', '\n']) {
                    return Err(invalid(
                        "K8S_REPLICA_SELECTOR",
                        format!("{selector:?} is not a label selector such as app.kubernetes.io/name=a2a-worker-controller"),
                    ));
                }
                Ok(Some(ReplicaSettings { ip, selector }))
            }
            (Some(_), None) => Err(invalid(
                "K8S_REPLICA_SELECTOR",
                "it is required with K8S_REPLICA_IP: it says which pods are the other replicas".into(),
            )),
            (None, Some(_)) => Err(invalid(
                "K8S_REPLICA_IP",
                "it is required with K8S_REPLICA_SELECTOR: set it from the pod's status.podIP (downward API)".into(),
            )),
        }
    }

    pub(super) fn local(&self) -> Result<LocalSettings, Error> {
        let wezterm = PathBuf::from(self.get("LOCAL_WEZTERM"));
        if !wezterm.is_absolute() {
            return Err(invalid(
                "LOCAL_WEZTERM",
                format!(
                    "{:?} must be an absolute path (under launchd wezterm is not on PATH)",
                    wezterm
                ),
            ));
        }
        let state_file = expand_home("LOCAL_STATE_FILE", &self.get("LOCAL_STATE_FILE"))?;
        let task_dir = expand_home(
            "LOCAL_TASK_DIR",
            &self.required("LOCAL_TASK_DIR", " for the local backend")?,
        )?;
        let command = local_command(&self.required("LOCAL_COMMAND", " for the local backend")?)?;
        Ok(LocalSettings {
            wezterm,
            state_file,
            task_dir,
            command,
            cli_timeout: self.duration("LOCAL_CLI_TIMEOUT")?,
            workspace: self.optional("LOCAL_WORKSPACE"),
            workspaces_dir: expand_home("LOCAL_WORKSPACES_DIR", &self.get("LOCAL_WORKSPACES_DIR"))?,
            fence: None,
        })
    }
}

/// A worker URL template: http(s), naming the pod with `{pod}` (so each worker's URL is its
/// own), and no placeholder other than `{pod}`, `{namespace}`, `{port}`.
fn worker_url(template: &str) -> Result<String, Error> {
    let filled = template
        .replace("{pod}", "p")
        .replace("{namespace}", "n")
        .replace("{port}", "1");
    http_url("K8S_WORKER_URL", &filled)?;
    if !template.contains("{pod}") {
        return Err(invalid(
            "K8S_WORKER_URL",
            format!("{template:?} must contain {{pod}}: each worker needs its own URL"),
        ));
    }
    if filled.contains(['{', '}']) {
        return Err(invalid(
            "K8S_WORKER_URL",
            format!("{template:?} has a placeholder other than {{pod}}, {{namespace}}, {{port}}"),
        ));
    }
    Ok(template.trim_end_matches('/').to_string())
}

/// `LOCAL_COMMAND`: a JSON array of strings (the program and its arguments, each argument
/// whole, with `{task}`, `{task_file}`, `{worker_id}` substituted per argument and never through
/// a shell), or a value not starting with `[`, which is one program path without arguments.
fn local_command(value: &str) -> Result<Vec<String>, Error> {
    let argv: Vec<String> = if value.starts_with('[') {
        serde_json::from_str(value).map_err(|e| {
            invalid(
                "LOCAL_COMMAND",
                format!("not a JSON array of strings ({e}); e.g. [\"/usr/local/bin/claude\", \"--task\", \"{{task_file}}\"]"),
            )
        })?
    } else {
        vec![value.to_string()]
    };
    match argv.first() {
        None => Err(invalid(
            "LOCAL_COMMAND",
            "the array is empty: name a program".into(),
        )),
        Some(program) if program.trim().is_empty() => {
            Err(invalid("LOCAL_COMMAND", "the program is empty".into()))
        }
        Some(_) if argv.iter().any(|a| a.contains('\0')) => Err(invalid(
            "LOCAL_COMMAND",
            "an argument contains a NUL byte".into(),
        )),
        Some(_) => Ok(argv),
    }
}
