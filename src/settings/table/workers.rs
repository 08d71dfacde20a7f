//! What workers are made from: templates, workspaces and warm pools, and the container and pod
//! settings every container worker shares.

use super::super::specs::{s, Section, Spec, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL};
use Section::{Container, Templates};

/// These sections' settings, in `--help` order within each.
pub(super) const SPECS: &[Spec] = &[
    s(
        Templates,
        "WORKER_TEMPLATES_FILE",
        "",
        "JSON file of named worker templates (image or program, env, limits, TTLs, port, workspace), re-read when it changes; without it one template, default, made from the settings below",
    ),
    s(
        Templates,
        "WORKSPACE_TTL",
        "7d",
        "how long a task's workspace is kept after its last worker (0 = until deleted)",
    ),
    s(
        Templates,
        "WORKER_POOL",
        "0",
        "warm pool of the default template: started, unbound members kept per controller id, bound to a task at create (docker and k8s; a templates file says pool per template); N, or MIN-MAX to follow the demand",
    ),
    s(
        Templates,
        "POOL_DEMAND_WINDOW",
        "60s",
        "a pool that follows the demand (MIN-MAX) counts its template's creates over this window",
    ),
    s(
        Templates,
        "POOL_MEMBER_START",
        "5s",
        "how long a pool member takes to start, for sizing a pool that follows the demand: it holds the creates expected meanwhile, plus one",
    ),
    s(
        Templates,
        "POOL_IDLE_AFTER",
        "10m",
        "with no create of its template for this long, a pool that follows the demand sinks to its MIN",
    ),
    s(
        Templates,
        "POOL_KEY_FILE",
        "",
        "file holding the key pool members' activation secrets are derived from (the same for every replica); default: derived from A2A_AUTH_TOKEN",
    ),
    s(
        Templates,
        "POOL_ACTIVATION_TIMEOUT",
        "5s",
        "how long a pool member has to answer its activation before it is removed and another tried",
    ),
    s(
        Container,
        "WORKER_IMAGE",
        "",
        "worker image with an explicit tag or digest (required for docker and k8s)",
    ),
    s(
        Container,
        "WORKER_PORT",
        "9090",
        "port the worker serves A2A on inside its container or pod",
    ),
    s(
        Container,
        "WORKER_TOKEN_ENV",
        "INTERACTIVE_AUTH_TOKEN",
        "environment variable that carries the worker's token",
    ),
    s(
        Container,
        "WORKER_ANTHROPIC_BASE_URL",
        DEFAULT_ANTHROPIC_BASE_URL,
        "ANTHROPIC_BASE_URL given to workers (k8s: none unless set)",
    ),
    s(
        Container,
        "WORKER_ANTHROPIC_MODEL",
        DEFAULT_ANTHROPIC_MODEL,
        "ANTHROPIC_MODEL given to workers",
    ),
    s(
        Container,
        "ANTHROPIC_AUTH_TOKEN_FILE",
        "",
        "file holding ANTHROPIC_AUTH_TOKEN (forwarded to workers), instead of the variable; read at startup",
    ),
    s(
        Container,
        "WORKER_MEMORY",
        "",
        "worker memory limit (bytes, or with k/m/g suffix)",
    ),
    s(Container, "WORKER_CPUS", "", "worker CPU limit (e.g. 1.5)"),
    s(
        Container,
        "WORKSPACE_COPY_IMAGE",
        "",
        "the controller's own image (scripts/build-image.sh a2a-worker-controller TAG), which copies one task's workspace for another (copy_workspace, create's from_task) in a short-lived container (docker) or a Job (k8s, a storage class K8S_CLONE_STORAGE_CLASSES does not name); without it such copies are refused",
    ),
];
