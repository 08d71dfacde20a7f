//! Settings: every setting is an environment variable and a flag (`-name=v`, `--name v`,
//! `--name=v`); flags win over the environment. Validation happens here, once, at startup, and
//! each refusal is one line naming the setting.
//!
//! - `types`: what the settings are, once read;
//! - `specs`: what a setting is (name, default, help, section) and the lookups; `table`: every
//!   setting as data;
//! - `raw`: each value as given, read as its type, and the settings assembled from them;
//! - `values`: parsers and checks for one value (URLs, listen addresses, ids, sizes, paths);
//! - `auth`: the bearer token and OIDC settings, and the check every bearer token passes;
//! - `backends`: each backend's own settings, read only when that backend is selected;
//! - `error`: the one-line refusal.
//!
//! Secrets read from files are `crate::secret_file`'s (below every layer that reads one).
//!
//! [`Settings::backend`] is a [`BackendSettings`]: a docker controller without docker
//! settings cannot be represented, and whoever adds a backend adds a variant that every
//! `match` on it (the backend factory in `lib.rs` first) must fill in.

mod auth;
mod backends;
pub mod egress;
mod entry;
mod error;
mod help;
mod raw;
mod specs;
mod table;
mod template;
pub mod templates;
mod types;
mod values;
mod watched;

use std::collections::HashMap;

use self::raw::Raw;
use self::table::{spec_of_flag, spec_of_name};
use self::values::invalid;

pub use self::auth::check_auth_token;
pub use self::error::Error;
pub use self::help::{help_text, settings_markdown};
pub use self::specs::{DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL};
pub use self::types::{
    BackendSettings, Command, ContainerSettings, DockerSettings, EgressSettings, Fence,
    K8sSettings, Lifetime, LocalSettings, OidcSettings, OnExpiry, PoolDemand, PushSettings,
    ReplicaSettings, Settings, MIN_AUTH_TOKEN_LEN,
};
pub use self::values::parse_listen;
pub use self::watched::Watched;

pub fn version_text() -> String {
    format!(
        "a2a-worker-controller {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("A2A_WC_GIT_COMMIT")
    )
}

/// Parses the command line (without the program name) over an environment.
pub fn parse<I, E>(args: I, env: E) -> Result<Command, Error>
where
    I: IntoIterator<Item = String>,
    E: IntoIterator<Item = (String, String)>,
{
    let mut raw: HashMap<&'static str, String> = HashMap::new();
    let mut anthropic_auth_token = None;
    for (key, value) in env {
        if key == "ANTHROPIC_AUTH_TOKEN" && !value.is_empty() {
            anthropic_auth_token = Some(value);
        } else if let Some(spec) = spec_of_name(&key) {
            raw.insert(spec.name, value);
        }
    }
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|b| !b.is_empty())
        else {
            return Err(Error::UnknownFlag(arg));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        match name {
            "help" | "h" if inline.is_none() => return Ok(Command::Help(help_text())),
            "version" if inline.is_none() => return Ok(Command::Version(version_text())),
            _ => {}
        }
        let Some(spec) = spec_of_flag(name) else {
            return Err(Error::UnknownFlag(format!("-{name}")));
        };
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| Error::FlagWithoutValue(arg.clone()))?,
        };
        raw.insert(spec.name, value);
    }
    let mut settings = Raw(raw).settings()?;
    settings.anthropic_auth_token = match (anthropic_auth_token, settings.anthropic_auth_token) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "ANTHROPIC_AUTH_TOKEN_FILE",
                "ANTHROPIC_AUTH_TOKEN is set too: set one of them".into(),
            ))
        }
        (from_env, from_file) => from_env.or(from_file),
    };
    Ok(Command::Run(Box::new(settings)))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::specs::flag_of;
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base() -> Vec<(String, String)> {
        env(&[
            ("A2A_AUTH_TOKEN", "0123456789abcdef"),
            ("A2A_PUBLIC_URL", "http://localhost:8080/"),
            ("WORKER_IMAGE", "a2a-echo-worker:dev"),
        ])
    }

    fn run(args: &[&str], env: Vec<(String, String)>) -> Result<Settings, Error> {
        match parse(args.iter().map(|s| s.to_string()), env)? {
            Command::Run(s) => Ok(*s),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn pods_get_no_docker_host_name_for_the_model_gateway() {
        let k8s = |extra: &[&str]| {
            let mut args = vec![
                "-backend=k8s",
                "-worker-image=w:1",
                "-k8s-api-url=https://127.0.0.1:6443",
                "-k8s-ca-file=/ca",
                "-k8s-token-file=/token",
            ];
            args.extend_from_slice(extra);
            run(&args, base()).unwrap()
        };
        let s = k8s(&[]);
        let BackendSettings::K8s { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, "");
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("WORKER_ANTHROPIC_BASE_URL is not set")),
            "{:?}",
            s.warnings
        );
        let s = k8s(&["-worker-anthropic-base-url=http://gateway.models:8788"]);
        let BackendSettings::K8s { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, "http://gateway.models:8788");
        assert!(!s.warnings.iter().any(|w| w.contains("ANTHROPIC_BASE_URL")));
        // Docker keeps its default: there the name exists.
        let s = run(&["-worker-image=w:1"], base()).unwrap();
        let BackendSettings::Docker { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, DEFAULT_ANTHROPIC_BASE_URL);
    }

    #[test]
    fn the_anthropic_token_comes_from_the_variable_or_its_file() {
        let dir = std::env::temp_dir().join(format!("a2a-anthropic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("anthropic");
        std::fs::write(&file, "router-key-1\n").unwrap();
        let flag = format!("-anthropic-auth-token-file={}", file.display());
        let s = run(&[&flag], base()).unwrap();
        assert_eq!(s.anthropic_auth_token.as_deref(), Some("router-key-1"));
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        let mut e = base();
        e.push(("ANTHROPIC_AUTH_TOKEN".into(), "from-env".into()));
        assert_eq!(
            run(&[], e.clone()).unwrap().anthropic_auth_token.as_deref(),
            Some("from-env")
        );
        let msg = run(&[&flag], e).unwrap_err().to_string();
        assert!(
            msg.contains("set one of them") && !msg.contains("from-env"),
            "{msg}"
        );
        std::fs::write(&file, "").unwrap();
        let msg = run(&[&flag], base()).unwrap_err().to_string();
        assert!(
            msg.contains("ANTHROPIC_AUTH_TOKEN_FILE") && msg.contains("empty"),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn worker_lifetimes_default_to_none_and_stay_within_their_ceiling() {
        let s = run(&[], base()).unwrap();
        assert_eq!(s.lifetime, Lifetime::default());
        assert_eq!(s.reap_interval, Duration::from_secs(30));
        let s = run(
            &[
                "-worker-ttl=90m",
                "--max-worker-ttl",
                "2h",
                "-reap-interval=5s",
            ],
            base(),
        )
        .unwrap();
        assert_eq!(s.lifetime.default_ttl, Some(Duration::from_secs(5400)));
        assert_eq!(s.lifetime.max_ttl, Some(Duration::from_secs(7200)));
        assert_eq!(s.reap_interval, Duration::from_secs(5));
        let msg = run(&["-worker-ttl=3h", "-max-worker-ttl=2h"], base())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("WORKER_TTL") && msg.contains("MAX_WORKER_TTL (2h)"),
            "{msg}"
        );
        let msg = run(&["-worker-ttl=soon"], base()).unwrap_err().to_string();
        assert!(
            msg.contains("WORKER_TTL") && msg.contains("\"soon\""),
            "{msg}"
        );
        assert!(
            run(&["-reap-interval=0"], base()).is_err(),
            "the reaper needs a pause"
        );
    }

    #[test]
    fn defaults_and_flag_forms() {
        let s = run(&[], base()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.public_url, "http://localhost:8080");
        assert!(matches!(s.backend, BackendSettings::Docker { .. }));
        assert_eq!(s.worker_ready_timeout, Duration::from_secs(60));
        let BackendSettings::Docker {
            container: c,
            docker,
        } = s.backend
        else {
            panic!("docker is the default backend")
        };
        assert_eq!(
            (c.port, c.token_env.as_str()),
            (9090, "INTERACTIVE_AUTH_TOKEN")
        );
        assert_eq!(docker.socket, PathBuf::from("/var/run/docker.sock"));

        let s = run(
            &[
                "-listen=:9000",
                "--max-workers",
                "3",
                "--controller-id=ci-1",
            ],
            base(),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
        assert_eq!((s.max_workers, s.controller_id.as_str()), (3, "ci-1"));
    }

    #[test]
    fn flags_win_over_environment() {
        let mut e = base();
        e.push(("LISTEN".into(), "127.0.0.1:1".into()));
        let s = run(&["-listen", "127.0.0.1:2"], e).unwrap();
        assert_eq!(s.listen.port(), 2);
    }

    #[test]
    fn refusals_name_the_setting_and_never_the_token() {
        let e = env(&[
            ("A2A_AUTH_TOKEN", "short-secret"),
            ("A2A_PUBLIC_URL", "http://x"),
        ]);
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(
            msg.contains("A2A_AUTH_TOKEN") && msg.contains("16"),
            "{msg}"
        );
        assert!(!msg.contains("short-secret"));

        let msg = run(&["-a2a-public-url=ftp://x"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("A2A_PUBLIC_URL"), "{msg}");
        let msg = run(&["-listen=nonsense"], base()).unwrap_err().to_string();
        assert!(msg.contains("LISTEN"), "{msg}");
        let msg = run(&["-no-such-flag=1"], base()).unwrap_err().to_string();
        assert!(msg.contains("unknown flag"), "{msg}");
        let msg = run(&["--listen"], base()).unwrap_err().to_string();
        assert!(msg.contains("needs a value"), "{msg}");
        let msg = run(&["-worker-image=repo/agent"], base())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("WORKER_IMAGE") && msg.contains("no tag"),
            "{msg}"
        );
        let msg = run(&["-worker-image=localhost:5000/agent"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("no tag"), "{msg}");
        assert!(run(&["-worker-image=localhost:5000/agent:v1"], base()).is_ok());
        assert!(run(&["-worker-image=agent@sha256:abc"], base()).is_ok());
        let msg = run(&["-backend=swarm"], base()).unwrap_err().to_string();
        assert!(msg.contains("BACKEND"), "{msg}");
        let msg = run(&["-worker-memory=lots"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("WORKER_MEMORY"), "{msg}");
        assert_eq!(
            run(&[], env(&[("A2A_PUBLIC_URL", "http://x")])).unwrap_err(),
            Error::Missing {
                name: "A2A_AUTH_TOKEN",
                why: " (or A2A_AUTH_TOKEN_FILE, A2A_CALLERS_FILE, A2A_OIDC_ISSUER)"
            }
        );
    }

    #[test]
    fn callers_or_oidc_may_stand_in_for_the_admin_token() {
        let without_token = || env(&[("A2A_PUBLIC_URL", "http://x"), ("WORKER_IMAGE", "agent:v1")]);
        let mut e = without_token();
        e.push(("A2A_CALLERS_FILE".into(), "/etc/a2a/callers.json".into()));
        let s = run(&[], e).unwrap();
        assert_eq!(s.auth_token, None);
        assert_eq!(
            s.callers_file.as_deref(),
            Some(Path::new("/etc/a2a/callers.json"))
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "https://id.example".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        let s = run(&[], e).unwrap();
        assert_eq!(
            s.oidc,
            Some(OidcSettings {
                issuer: "https://id.example".into(),
                audience: "a2a".into(),
                scope_claim: "tenant".into(),
                ca_file: None,
                jwks_refresh: Some(Duration::from_secs(300)),
            })
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://id.example".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(
            msg.contains("A2A_OIDC_ISSUER") && msg.contains("https"),
            "{msg}"
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://127.0.0.1:9000".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        assert!(run(&[], e).is_ok(), "http on loopback (a test issuer)");
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://[::1]:9000".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        assert!(run(&[], e).is_ok(), "http on IPv6 loopback");
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "https://id.example".into()));
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(msg.contains("A2A_OIDC_AUDIENCE"), "{msg}");
    }

    #[test]
    fn backend_specific_settings_only_when_selected() {
        let e = env(&[
            ("A2A_AUTH_TOKEN", "0123456789abcdef"),
            ("A2A_PUBLIC_URL", "http://x"),
        ]);
        let msg = run(&[], e.clone()).unwrap_err().to_string();
        assert!(msg.contains("WORKER_IMAGE"), "{msg}");
        let msg = run(&["-backend=local"], e.clone()).unwrap_err().to_string();
        assert!(msg.contains("LOCAL_TASK_DIR"), "{msg}");
        let s = run(
            &[
                "-backend=local",
                "-local-task-dir=/tmp",
                "-local-command=claude",
            ],
            e.clone(),
        )
        .unwrap();
        assert!(s.backend.container().is_none() && matches!(s.backend, BackendSettings::Local(_)));
        let msg = run(
            &[
                "-backend=local",
                "-local-task-dir=/tmp",
                "-local-command=c",
                "-local-wezterm=wezterm",
            ],
            e,
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("absolute"), "{msg}");
    }

    #[test]
    fn k8s_settings_carry_the_container_settings() {
        let s = run(
            &["-backend=k8s", "-worker-memory=512m", "-worker-cpus=1.5"],
            base(),
        )
        .unwrap();
        let BackendSettings::K8s { container, k8s } = &s.backend else {
            panic!("{:?}", s.backend)
        };
        assert_eq!(container.memory_bytes, Some(512 << 20));
        assert_eq!(container.nano_cpus, Some(1_500_000_000));
        assert_eq!(k8s.worker_service, "a2a-workers");
        assert_eq!(k8s.worker_url, None);
        let s = run(
            &[
                "-backend=k8s",
                "-k8s-worker-url=https://{pod}.workers.example.com/",
            ],
            base(),
        )
        .unwrap();
        let BackendSettings::K8s { k8s, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(
            k8s.worker_url.as_deref(),
            Some("https://{pod}.workers.example.com")
        );
        for bad in [
            "https://fixed.example.com",
            "ftp://{pod}",
            "http://{pod}.{cluster}",
        ] {
            let msg = run(&["-backend=k8s", &format!("-k8s-worker-url={bad}")], base())
                .unwrap_err()
                .to_string();
            assert!(msg.contains("K8S_WORKER_URL"), "{bad}: {msg}");
        }
        assert_eq!(s.backend.container().map(|c| c.port), Some(9090));
    }

    #[test]
    fn local_command_is_an_argument_list() {
        let local = |cmd: &str| {
            run(
                &[
                    "-backend=local",
                    "-local-task-dir=/tmp",
                    &format!("-local-command={cmd}"),
                ],
                base(),
            )
            .map(|s| match s.backend {
                BackendSettings::Local(l) => l.command,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(
            local(r#"["/usr/local/bin/claude", "--task", "{task_file}", "two words"]"#).unwrap(),
            [
                "/usr/local/bin/claude",
                "--task",
                "{task_file}",
                "two words"
            ]
        );
        assert_eq!(
            local("/usr/local/bin/claude code").unwrap(),
            ["/usr/local/bin/claude code"]
        );
        for bad in ["[]", "[1]", "[\"a\"", r#"["  "]"#] {
            let msg = local(bad).unwrap_err().to_string();
            assert!(msg.contains("LOCAL_COMMAND"), "{bad}: {msg}");
        }
    }

    #[test]
    fn help_is_grouped_by_section() {
        let text = help_text();
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at("General:") < at("HTTP:"));
        assert!(at("HTTP:") < at("Container workers"));
        assert!(at("Container workers") < at("Docker (BACKEND=docker)"));
        assert!(at("Docker (BACKEND=docker)") < at("Kubernetes"));
        assert!(at("Kubernetes") < at("Local WezTerm"));
        // Each setting sits under its own section.
        assert!(at("Kubernetes") < at("K8S_API_URL") && at("K8S_API_URL") < at("Local WezTerm"));
        assert!(at("HTTP:") < at("-listen") && at("-listen") < at("Container workers"));
        assert!(at("Docker (BACKEND=docker)") < at("DOCKER_HOST"));
    }

    #[test]
    fn help_lists_every_setting_with_its_default() {
        let Command::Help(text) = parse(["--help".to_string()], Vec::new()).unwrap() else {
            panic!()
        };
        for spec in table::all() {
            assert!(text.contains(spec.name), "{}", spec.name);
            assert!(text.contains(&format!("-{}", flag_of(spec.name))));
            if !spec.default.is_empty() {
                assert!(text.contains(spec.default), "{}", spec.name);
            }
            // No secret has a default that could leak.
            assert!(!spec.secret || spec.default.is_empty());
        }
    }
}
