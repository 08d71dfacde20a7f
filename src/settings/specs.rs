//! Every setting as data: its name (the environment variable; the flag is derived from it),
//! its default, its help line, whether it is secret, and the `--help` section it belongs to.
//! Defaults live here and nowhere else.

pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "http://host.docker.internal:8788";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "MiniMax-M2.7-highspeed";

/// The `--help` sections, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Section {
    General,
    Http,
    Push,
    Templates,
    Container,
    Docker,
    K8s,
    Local,
    Egress,
}

impl Section {
    pub(super) const ALL: [Section; 9] = [
        Section::General,
        Section::Http,
        Section::Push,
        Section::Templates,
        Section::Container,
        Section::Docker,
        Section::K8s,
        Section::Local,
        Section::Egress,
    ];

    pub(super) fn title(self) -> &'static str {
        match self {
            Section::General => "General",
            Section::Http => "HTTP",
            Section::Push => "Push notifications (webhooks the controller calls)",
            Section::Templates => "Worker templates, workspaces and warm pools",
            Section::Container => "Container workers (docker and k8s backends)",
            Section::Docker => "Docker (BACKEND=docker)",
            Section::K8s => "Kubernetes (BACKEND=k8s)",
            Section::Local => "Local WezTerm tabs (BACKEND=local)",
            Section::Egress => {
                "Egress: fenced workers and the egress proxy (a2a-worker-controller egress)"
            }
        }
    }
}

pub(super) struct Spec {
    pub name: &'static str,
    pub default: &'static str,
    pub help: &'static str,
    pub secret: bool,
    pub section: Section,
}

pub(super) const fn s(
    section: Section,
    name: &'static str,
    default: &'static str,
    help: &'static str,
) -> Spec {
    Spec {
        name,
        default,
        help,
        secret: false,
        section,
    }
}

pub(super) const fn secret(section: Section, name: &'static str, help: &'static str) -> Spec {
    Spec {
        name,
        default: "",
        help,
        secret: true,
        section,
    }
}

/// `WORKER_READY_TIMEOUT` → `worker-ready-timeout`.
pub(super) fn flag_of(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}
