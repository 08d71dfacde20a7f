//! Each backend's own settings: the Docker engine, the Kubernetes API, the local WezTerm.

use super::super::specs::{s, Section, Spec};
use Section::{Docker, K8s, Local};

/// These sections' settings, in `--help` order within each.
pub(super) const SPECS: &[Spec] = &[
    s(
        Docker,
        "DOCKER_HOST",
        "unix:///var/run/docker.sock",
        "Docker engine socket (unix:// only)",
    ),
    s(
        Docker,
        "DOCKER_NETWORK",
        "",
        "network workers join; a2a_url then uses the container name",
    ),
    s(
        Docker,
        "WORKER_PUBLISH_HOST",
        "127.0.0.1",
        "host address worker ports are published on",
    ),
    s(Docker, "WORKER_PIDS_LIMIT", "", "worker process limit"),
    s(
        K8s,
        "K8S_NAMESPACE",
        "",
        "namespace for worker pods (default: the service account's in a cluster; \"default\" with K8S_API_URL)",
    ),
    s(
        K8s,
        "K8S_WORKER_SERVICE",
        "a2a-workers",
        "headless service that gives workers DNS names",
    ),
    s(
        K8s,
        "K8S_CLUSTER_DOMAIN",
        "cluster.local",
        "cluster DNS domain",
    ),
    s(
        K8s,
        "K8S_API_URL",
        "",
        "API server URL (default: in-cluster)",
    ),
    s(K8s, "K8S_CA_FILE", "", "CA bundle for K8S_API_URL"),
    s(
        K8s,
        "K8S_TOKEN_FILE",
        "",
        "bearer token file for K8S_API_URL",
    ),
    s(
        K8s,
        "K8S_CLIENT_CERT_FILE",
        "",
        "client certificate for K8S_API_URL",
    ),
    s(K8s, "K8S_CLIENT_KEY_FILE", "", "client key for K8S_API_URL"),
    s(
        K8s,
        "K8S_CLONE_STORAGE_CLASSES",
        "",
        "comma-separated storage classes whose CSI driver clones a claim from another (dataSource): a workspace of one is copied by a clone (copy_workspace, create's from_task); the API cannot say which can",
    ),
    s(
        K8s,
        "K8S_POD_TEMPLATE",
        "",
        "JSON file merged into every worker pod",
    ),
    s(
        K8s,
        "K8S_REPLICA_IP",
        "",
        "this replica's pod IP (downward API status.podIP); with K8S_REPLICA_SELECTOR, one of several replicas: task ids name their replica and calls are relayed to it",
    ),
    s(
        K8s,
        "K8S_REPLICA_SELECTOR",
        "",
        "label selector of the controller's own pods, the replicas a call may be relayed to (with K8S_REPLICA_IP)",
    ),
    s(
        K8s,
        "K8S_WORKER_URL",
        "",
        "worker URL template with {pod}, {namespace}, {port} for callers outside the cluster (default: the pod's cluster DNS name)",
    ),
    s(
        Local,
        "LOCAL_WEZTERM",
        "/Applications/WezTerm.app/Contents/MacOS/wezterm",
        "absolute path of the wezterm program",
    ),
    s(
        Local,
        "LOCAL_STATE_FILE",
        "~/.local/state/a2a-worker-controller/local-workers.json",
        "local backend's state file",
    ),
    s(
        Local,
        "LOCAL_TASK_DIR",
        "",
        "directory of task files (required for local)",
    ),
    s(
        Local,
        "LOCAL_COMMAND",
        "",
        "program and arguments a local worker's tab runs, as a JSON array with {task}, {task_file}, {worker_id} placeholders, e.g. [\"/usr/local/bin/claude\",\"--task\",\"{task_file}\"] (required for local)",
    ),
    s(
        Local,
        "LOCAL_WORKSPACES_DIR",
        "~/.local/state/a2a-worker-controller/workspaces",
        "where local workers' task workspaces are made (one directory per task; the tab starts in it)",
    ),
    s(
        Local,
        "LOCAL_CLI_TIMEOUT",
        "10s",
        "how long one wezterm CLI call may take before it is stopped",
    ),
    s(
        Local,
        "LOCAL_WORKSPACE",
        "",
        "WezTerm workspace new worker windows open in (default: WezTerm's own, \"default\")",
    ),
];
