//! The egress proxy and the fence: what fenced workers are given, and how the proxy runs.

use super::super::specs::{s, Section, Spec};
use Section::Egress;

/// These sections' settings, in `--help` order within each.
pub(super) const SPECS: &[Spec] = &[
    s(
        Egress,
        "EGRESS_PROXY_URL",
        "",
        "where fenced workers (a template's egress \"none\" or a list) reach the egress proxy, as they see it (docker: http://GATEWAY-OF-EGRESS_NETWORK:8790; k8s: the proxy's Service); required by a fenced template",
    ),
    s(
        Egress,
        "EGRESS_KEY_FILE",
        "",
        "file holding the key workers' placeholder credentials are derived from (the same for the controller and the proxy); default: derived from A2A_AUTH_TOKEN",
    ),
    s(
        Egress,
        "EGRESS_NETWORK",
        "a2a-egress",
        "docker: the internal network (docker network create --internal --subnet ...) fenced workers join, shared with the proxy (their a2a_url is their address on it); k8s: the NetworkPolicy that fences them (scripts/k8s/70-egress.yaml)",
    ),
    s(
        Egress,
        "EGRESS_LISTEN",
        "127.0.0.1:8790",
        "proxy: where it listens",
    ),
    s(
        Egress,
        "EGRESS_CONTROLLER_URL",
        "http://127.0.0.1:8080",
        "proxy: the controller it asks whether a worker runs, and at which address",
    ),
    s(
        Egress,
        "EGRESS_MODEL_URL",
        "",
        "proxy: the model route's upstream (e.g. https://api.anthropic.com): fenced workers' ANTHROPIC_BASE_URL is the proxy's /model, and the proxy adds ANTHROPIC_AUTH_TOKEN(_FILE) as a bearer token",
    ),
    s(
        Egress,
        "EGRESS_CA_FILE",
        "",
        "proxy: PEM roots upstream certificates must chain to (default: the bundled public roots)",
    ),
    s(
        Egress,
        "EGRESS_MAX_CONNECTIONS",
        "4096",
        "proxy: connections held at once, open tunnels included",
    ),
    s(
        Egress,
        "EGRESS_RECHECK",
        "2s",
        "proxy: how long it trusts the controller's word that a worker runs (a stopped worker's placeholder is refused within this)",
    ),
];
