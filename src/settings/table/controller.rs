//! The controller's own settings: who may call it (tokens, callers, OIDC), where and how it
//! listens (HTTP limits, the status page, MCP), and push notifications.

use super::super::specs::{s, secret, Section, Spec};
use Section::{General, Http, Push};

/// These sections' settings, in `--help` order within each.
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
        "MCP",
        "true",
        "serve MCP (Streamable HTTP, 2026-07-28 and 2025-11-25) at /mcp: the control operations as tools (false: not at all)",
    ),
    s(
        Http,
        "MCP_ALLOWED_ORIGINS",
        "",
        "browser origins besides A2A_PUBLIC_URL's and loopback on the listen port that may call /mcp, comma-separated (e.g. https://console.example.com); any other Origin gets 403",
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
];
