//! The table of settings: every setting as data (its name, default, help line, whether it is
//! secret, its `--help` section), in `--help` order within each section. The types and the
//! lookups over it are `specs.rs`'s.

use super::specs::{
    flag_of, s, secret, Section, Spec, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL,
};
use Section::{Container, Docker, Egress, General, Http, K8s, Local, Push, Templates};

/// Every setting, in `--help` order within its section.
pub(super) const SPECS: &[Spec] = &[
    secret(
        General,
        "A2A_AUTH_TOKEN",
        "the admin caller's bearer token (this, A2A_AUTH_TOKEN_FILE, A2A_CALLERS_FILE or A2A_OIDC_ISSUER is required; at least 16 characters)",
    ),
    s(
        General,
        "A2A_AUTH_TOKEN_FILE",
        "",
        "file holding the bearer token instead (mode 0600; re-read within a second when it changes)",
    ),
    s(
        General,
        "A2A_AUTH_TOKEN_OVERLAP",
        "60s",
        "how long the previous token from A2A_AUTH_TOKEN_FILE is still accepted after it changes",
    ),
    s(
        General,
        "A2A_CALLERS_FILE",
        "",
        "JSON file of callers, each with a name, a scope and the SHA-256 of its token (or a token file); mode 0600, re-read when it changes",
    ),
    s(
        General,
        "A2A_OIDC_ISSUER",
        "",
        "accept signed JWT access tokens of this OIDC issuer (https; RS256, PS256, ES256 or EdDSA)",
    ),
    s(
        General,
        "A2A_OIDC_AUDIENCE",
        "",
        "the audience OIDC access tokens must name (required with A2A_OIDC_ISSUER)",
    ),
    s(
        General,
        "A2A_OIDC_CA_FILE",
        "",
        "PEM roots the OIDC issuer's https certificate must chain to (default: the bundled public roots)",
    ),
    s(
        General,
        "A2A_OIDC_JWKS_REFRESH",
        "5m",
        "how often the OIDC JWKS is fetched again on its own, so a key the issuer dropped stops verifying (0 = only for unseen kids)",
    ),
    s(
        General,
        "A2A_OIDC_SCOPE_CLAIM",
        "tenant",
        "the OIDC claim whose value is the caller's scope",
    ),
    s(
        General,
        "A2A_PUBLIC_URL",
        "",
        "public base URL of this controller, http(s) (required)",
    ),
    s(
        General,
        "BACKEND",
        "docker",
        "worker backend: docker | k8s | local",
    ),
    s(
        General,
        "A2A_AGENT_NAME",
        "a2a-worker-controller",
        "name in the Agent Card",
    ),
    s(
        General,
        "CONTROLLER_ID",
        "a2a-worker-controller",
        "owner label value; workers without it are never listed or stopped",
    ),
    s(
        General,
        "MAX_WORKERS",
        "0",
        "most workers at once (0 = no limit)",
    ),
    s(
        General,
        "MAX_WATCHERS",
        "64",
        "most watch streams at once (each also counts against MAX_CONNECTIONS)",
    ),
    s(
        General,
        "MAX_CALLER_REQUESTS",
        "32",
        "most requests one caller has in flight; beyond, 429 with Retry-After (0 = no limit)",
    ),
    s(
        General,
        "MAX_CALLER_STREAMS",
        "16",
        "most streams (watches, streamed sends, subscriptions) one caller has open; beyond, 429 (0 = no limit)",
    ),
    s(
        General,
        "MAX_ADMIN_REQUESTS",
        "256",
        "MAX_CALLER_REQUESTS for admin callers",
    ),
    s(
        General,
        "MAX_ADMIN_STREAMS",
        "128",
        "MAX_CALLER_STREAMS for admin callers",
    ),
    s(
        General,
        "WORKER_READY_TIMEOUT",
        "60s",
        "how long create waits for a worker to answer (0 = do not wait)",
    ),
    s(
        General,
        "WORKER_TTL",
        "0",
        "lifetime of a worker whose create names no ttl, e.g. 2h (0 = none; MAX_WORKER_TTL if that is set)",
    ),
    s(
        General,
        "MAX_WORKER_TTL",
        "0",
        "longest ttl a create (or renew) may ask for (0 = no ceiling)",
    ),
    s(
        General,
        "WORKER_ON_EXPIRY",
        "stop",
        "what a worker's TTL ends in: stop (removed) or suspend (kept, not running, until resumed)",
    ),
    s(
        General,
        "SUSPENDED_TTL",
        "0",
        "how long a suspended worker is kept before it is stopped for good, e.g. 7d (0 = until stopped)",
    ),
    s(
        General,
        "REAP_INTERVAL",
        "30s",
        "how often expired workers are looked for and stopped",
    ),
    secret(
        General,
        "SENTRY_DSN",
        "Sentry DSN; failed operations are reported there when set",
    ),
    s(
        General,
        "SENTRY_PROXY",
        "",
        "HTTP(S) proxy URL for reaching Sentry",
    ),
    s(
        Http,
        "LISTEN",
        "127.0.0.1:8080",
        "address to listen on (host:port or :port)",
    ),
    s(
        Http,
        "MAX_CONNECTIONS",
        "1024",
        "most connections served at once (one thread each); more are answered 503",
    ),
    s(
        Http,
        "HTTP_HEAD_TIMEOUT",
        "10s",
        "a request head must arrive within this",
    ),
    s(
        Http,
        "HTTP_BODY_TIMEOUT",
        "30s",
        "a request body must arrive within this",
    ),
    s(
        Http,
        "UI",
        "true",
        "serve the status page at /ui (false: not at all)",
    ),
    s(
        Http,
        "HTTP_IDLE_TIMEOUT",
        "60s",
        "an idle keep-alive connection is closed after this",
    ),
    s(
        Push,
        "PUSH_ALLOW_HTTP",
        "false",
        "true: webhook URLs may be plain http (default: https only)",
    ),
    s(
        Push,
        "PUSH_ALLOW",
        "",
        "hostnames and CIDRs webhooks may reach although loopback, private or otherwise special, comma-separated (e.g. hooks.internal,10.1.0.0/16)",
    ),
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
        "warm pool of the default template: started, unbound members kept per controller id, bound to a task at create (docker and k8s; a templates file says pool per template)",
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

pub(super) fn spec_of_flag(flag: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| flag_of(s.name) == flag)
}

pub(super) fn spec_of_name(name: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| s.name == name)
}
