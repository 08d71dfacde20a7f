//! The Agent Card (A2A v1.0 shape), rendered once at startup and served with validators.

use serde_json::{json, Value};

use super::types::PROTOCOL_VERSION;
use crate::hash::{fnv1a64, FNV_OFFSET};
use crate::time::{http_date, now_millis};

pub struct AgentCard {
    pub body: Vec<u8>,
    pub etag: String,
    pub last_modified: String,
}

pub const CACHE_CONTROL: &str = "public, max-age=300";

impl AgentCard {
    /// The card; `mcp`: it also says where the MCP endpoint is.
    pub fn new(agent_name: &str, public_url: &str, mcp: bool) -> AgentCard {
        let mut card = card_json(agent_name, public_url);
        if mcp {
            mention_mcp(&mut card, public_url);
        }
        let body = card.to_string().into_bytes();
        let etag = format!("\"{:016x}\"", fnv1a64(FNV_OFFSET, body.iter().copied()));
        AgentCard {
            body,
            etag,
            last_modified: http_date(now_millis() / 1000),
        }
    }

    /// Whether an `If-None-Match` value matches this card (`*`, or a list containing the
    /// ETag, weak or strong).
    pub fn matches(&self, if_none_match: &str) -> bool {
        crate::http::etag_matches(if_none_match, &self.etag)
    }
}

/// Where the HTTP+JSON binding's routes live, below the public URL.
pub const REST_BASE: &str = "/a2a/rest";

/// What the extended Agent Card tells an authenticated caller about this deployment: its
/// limits and where it runs, nothing secret.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub backend: &'static str,
    pub max_workers: u32,
    pub default_ttl_secs: Option<u64>,
    pub max_ttl_secs: Option<u64>,
    pub ready_timeout_secs: u64,
    pub reap_interval_secs: u64,
    pub commit: &'static str,
    /// Whether `/mcp` is served.
    pub mcp: bool,
}

/// Where the MCP endpoint is, when it is served.
pub const MCP_PATH: &str = "/mcp";

/// Adds to a card's description that the same operations are MCP tools, and where.
fn mention_mcp(card: &mut Value, public_url: &str) {
    if let Some(Value::String(d)) = card.get_mut("description") {
        d.push_str(&format!(
            " The same operations are MCP tools at {public_url}{MCP_PATH} (Streamable HTTP, MCP 2026-07-28 and 2025-11-25), with the same bearer tokens."
        ));
    }
}

/// The extended Agent Card (§3.1.11): the public card, and one informational extension whose
/// `params` describe the deployment and the control operations with their parameters.
pub fn extended_card(agent_name: &str, public_url: &str, d: &Deployment) -> Value {
    let mut card = card_json(agent_name, public_url);
    if d.mcp {
        mention_mcp(&mut card, public_url);
    }
    let seconds = |s: Option<u64>| s.map_or(Value::Null, |s| json!(s));
    card["capabilities"]["extensions"] = json!([{
        "uri": DEPLOYMENT_EXTENSION,
        "description": "This controller's deployment: backend, limits, lifetimes, build, and the control operations a SendMessage data part may ask for. Informational; nothing to negotiate.",
        "required": false,
        "params": {
            "backend": d.backend,
            "maxWorkers": d.max_workers,
            "workerTtlSeconds": seconds(d.default_ttl_secs),
            "maxWorkerTtlSeconds": seconds(d.max_ttl_secs),
            "workerReadyTimeoutSeconds": d.ready_timeout_secs,
            "reapIntervalSeconds": d.reap_interval_secs,
            "version": env!("CARGO_PKG_VERSION"),
            "commit": d.commit,
            "operations": [
                {"operation": "create", "parameters": {"task": "required string: the task's name", "ttl": "optional: \"90m\", \"2h\" or seconds, at most maxWorkerTtlSeconds", "metadata": "optional object: at most 16 keys [a-z0-9][a-z0-9._-]{0,62}, string values of at most 256 printable characters"}},
                {"operation": "list", "parameters": {"metadata": "optional object: only workers with all these tags", "state": "optional: starting, running, exited, stopping, suspended or unknown", "task": "optional: only this task's worker"}},
                {"operation": "stop", "parameters": {"worker_id": "required string"}},
                {"operation": "logs", "parameters": {"worker_id": "required string", "tail": "optional whole number of lines, default 200, at most 10000"}},
                {"operation": "watch", "parameters": {"metadata": "optional filter, as for list", "state": "optional filter", "task": "optional filter"}},
                {"operation": "renew", "parameters": {"worker_id": "required string", "ttl": "required: \"90m\", \"2h\" or seconds, bounded as create's"}},
                {"operation": "suspend", "parameters": {"worker_id": "required string"}},
                {"operation": "resume", "parameters": {"worker_id": "required string"}},
            ],
        },
    }]);
    card
}

/// The extension URI the extended card describes the deployment under.
pub const DEPLOYMENT_EXTENSION: &str = "urn:a2a-worker-controller:deployment:v1";

fn card_json(agent_name: &str, public_url: &str) -> Value {
    json!({
        "name": agent_name,
        "description": "Creates, lists and stops isolated AI-agent workers, one per task. \
            Send a SendMessage whose first data part is a control request; create returns the \
            worker's own A2A URL and bearer token, and callers talk to the worker directly.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [
            {
                "url": format!("{public_url}/a2a"),
                "protocolBinding": "JSONRPC",
                "protocolVersion": PROTOCOL_VERSION,
            },
            {
                "url": format!("{public_url}{REST_BASE}"),
                "protocolBinding": "HTTP+JSON",
                "protocolVersion": PROTOCOL_VERSION,
            },
        ],
        "capabilities": {
            "streaming": true,
            "pushNotifications": true,
            "extendedAgentCard": true,
            "extensions": [],
        },
        "securitySchemes": {
            "bearer": {
                "httpAuthSecurityScheme": {
                    "scheme": "Bearer",
                    "description": "The controller's A2A_AUTH_TOKEN.",
                }
            }
        },
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["application/json"],
        "defaultOutputModes": ["application/json"],
        "skills": skills(),
    })
}

/// The skills, one per control operation, each with an example a caller can send.
fn skills() -> Value {
    let example = |data: Value| -> String { json!({"parts": [{"data": data}]}).to_string() };
    json!([
        skill(
            "create",
            "Create a worker",
            "Starts one isolated worker for a task and returns it with its own bearer token (returned only here, once). A task that already has a worker is refused with worker_exists. An optional ttl (\"90m\", \"2h\", or seconds) has the controller stop it after that long. Optional metadata (at most 16 keys of [a-z0-9._-], string values of at most 256 printable characters) tags the worker; every operation returns it. An optional template names what the worker is started from (image or program, limits, TTLs, workspace; see the templates skill); without it, default. A template with a workspace mounts the task's own volume, kept across its workers.",
            &["workers", "create"],
            vec![
                example(json!({"operation": "create", "task": "fix-login-bug"})),
                example(json!({"operation": "create", "task": "fix-login-bug", "ttl": "2h"})),
                example(json!({"operation": "create", "task": "fix-login-bug", "metadata": {"team": "infra"}})),
                example(json!({"operation": "create", "task": "review-pr-42", "template": "reviewer"})),
            ],
        ),
        skill(
            "list",
            "List workers",
            "Lists the workers this controller owns, oldest first, read from the backend; optional filters: metadata (all keys must match), state, task, template.",
            &["workers", "list"],
            vec![
                example(json!({"operation": "list"})),
                example(json!({"operation": "list", "metadata": {"team": "infra"}, "state": "running"})),
            ],
        ),
        skill(
            "stop",
            "Stop a worker",
            "Stops and removes a worker this controller owns, by worker_id.",
            &["workers", "stop"],
            vec![example(json!({"operation": "stop", "worker_id": "3f9c2a1b7d4e"}))],
        ),
        skill(
            "renew",
            "Renew a worker's lifetime",
            "Sets a worker's expiry to now + ttl (\"90m\", \"2h\" or seconds), bounded as create's ttl is. A worker may send this itself with its own bearer token (the one create returned), which renews that worker and nothing else.",
            &["workers", "renew", "lifetime"],
            vec![example(json!({"operation": "renew", "worker_id": "3f9c2a1b7d4e", "ttl": "2h"}))],
        ),
        skill(
            "suspend",
            "Suspend or resume a worker",
            "suspend: the worker stops running (no CPU or memory held) and keeps its files, identity and token; it is listed suspended and still holds its task. resume: it runs again, ready before the reply, with its current a2a_url and the TTL it had left.",
            &["workers", "suspend", "resume", "lifetime"],
            vec![
                example(json!({"operation": "suspend", "worker_id": "3f9c2a1b7d4e"})),
                example(json!({"operation": "resume", "worker_id": "3f9c2a1b7d4e"})),
            ],
        ),
        skill(
            "watch",
            "Watch the workers",
            "Streams what happens to the workers (send it with SendStreamingMessage, or with returnImmediately and then SubscribeToTask or a push notification config): one long-running task whose WORKING status updates each carry a data part {\"event\": {\"type\", \"worker\", \"reason\", \"at\"}} — first one added per existing worker and one synced, then added, changed, suspended, resumed, renewed and removed as they happen. Optional filters as for list. CancelTask ends it (TASK_STATE_CANCELED); so does the stream's client going away.",
            &["workers", "watch", "events"],
            vec![example(json!({"operation": "watch", "metadata": {"team": "infra"}}))],
        ),
        skill(
            "templates",
            "Worker templates",
            "Lists the worker templates this caller may create from: name, description, image (or program), memory, cpus, pids_limit, ttl and max_ttl (seconds), port, and workspace (path and size) when the template keeps a per-task workspace.",
            &["workers", "templates"],
            vec![example(json!({"operation": "templates"}))],
        ),
        skill(
            "workspaces",
            "Task workspaces",
            "workspaces lists the task workspaces of the caller's scope (the files a task's workers share, which outlive them). copy_workspace makes task's workspace a copy of from_task's (files, modes, links; from_task's untouched; same scope; from_task's worker, if any, stopped or suspended), so its first worker starts from those files; create's from_task does the same before the worker. delete_workspace deletes one, refused while a worker of the task exists.",
            &["workspaces", "fork"],
            vec![
                example(json!({"operation": "workspaces"})),
                example(json!({"operation": "copy_workspace", "from_task": "fix-login-bug", "task": "fix-login-bug-plan-b"})),
                example(json!({"operation": "create", "task": "fix-login-bug-plan-c", "template": "coder", "from_task": "fix-login-bug"})),
                example(json!({"operation": "delete_workspace", "task": "fix-login-bug-plan-b"})),
            ],
        ),
        skill(
            "logs",
            "A worker's output",
            "Returns the last lines (tail, default 200, at most 10000) of the output of a worker this controller owns, at most 1 MiB; truncated says when that bound cut them.",
            &["workers", "logs"],
            vec![example(json!({"operation": "logs", "worker_id": "3f9c2a1b7d4e", "tail": 200}))],
        ),
    ])
}

/// One skill: JSON in, JSON out.
fn skill(id: &str, name: &str, description: &str, tags: &[&str], examples: Vec<String>) -> Value {
    json!({
        "id": id,
        "name": name,
        "description": description,
        "tags": tags,
        "examples": examples,
        "inputModes": ["application/json"],
        "outputModes": ["application/json"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etag_matching() {
        let card = AgentCard::new("x", "http://h", true);
        assert!(card.matches(&card.etag));
        assert!(card.matches(&format!("W/{}", card.etag)));
        assert!(card.matches(&format!("\"nope\", {}", card.etag)));
        assert!(card.matches("*"));
        assert!(!card.matches("\"nope\""));
    }
}
