//! a2a-echo-worker: a small real A2A v1.0 worker for the controller's container backends.
//! It serves an Agent Card whose interface URL is its `A2A_PUBLIC_URL`, requires the bearer
//! token from its environment on JSON-RPC calls, and answers `SendMessage` with a completed
//! task echoing the message's text.
//!
//! Environment: `A2A_PUBLIC_URL` (required), the token in the variable named by
//! `WORKER_TOKEN_ENV` (default `INTERACTIVE_AUTH_TOKEN`, required), `LISTEN` (default `:9090`),
//! `A2A_AGENT_NAME`. Flags for exercising a controller's failure paths:
//! `--exit-code=N` exits at once with N; `--no-listen` runs without ever answering;
//! `--grow-after=MS` serves, then MS milliseconds later takes memory without end (until a
//! memory limit has it killed); `--hang-activation` (a pool member) never answers its
//! activation; `--listen-after=MS` waits MS milliseconds before it listens (an agent image
//! that loads its runtime first).
//!
//! With `A2A_WORKSPACE` (a template's workspace), two text commands reach its files, so tests
//! can see a task's workspace outlive its worker: `workspace write NAME TEXT` writes TEXT to
//! the file NAME there and answers `wrote NAME`; `workspace read NAME` answers the file's text.
//! `disk write|read ...` does the same in the image's own `/workspace`: the container's own
//! filesystem when no volume is mounted there (what a suspend must keep).
//! Any other text is echoed. The template's extra variable `ECHO_PREFIX`, when set, starts
//! every echo.
//!
//! **Late binding** (a pre-started member of a warm pool): with `A2A_POOL_MEMBER` (the
//! member's name) and `A2A_ACTIVATION_SHA256` (the SHA-256, hex, of the member's activation
//! secret: nothing secret is in its environment), it starts knowing no task and no token. It
//! answers its Agent Card (listing the extension `urn:a2a-worker-controller:activation:v1`)
//! and `/healthz`, and 401 to every other call, until it is activated:
//! `POST /activate` with `Authorization: Bearer <activation secret>` and the JSON body
//! `{"worker_id", "task", "token", "a2a_url", "agent_name"?, "env"?}` binds them (200
//! `{"activated": worker_id}`, answered once they are bound). A wrong secret is 401; a second
//! activation, with any secret, is 409; from then on it is the worker it was bound as.

#![forbid(unsafe_code)]

#[path = "a2a-echo-worker/commands.rs"]
mod commands;

use std::process::ExitCode;
use std::sync::Arc;

use a2a_worker_controller::a2a::{response_err, response_ok, RpcError};
use a2a_worker_controller::auth;
use a2a_worker_controller::http::{Body, Handler, Limits, Request, Response, Server};
use a2a_worker_controller::settings::parse_listen;
use a2a_worker_controller::time::{now_millis, rfc3339_millis};
use a2a_worker_controller::token::uuid_v4;
use serde_json::{json, Value};

struct Echo {
    /// The card and the token it answers with; before a pool member's activation, a card of
    /// the unbound member and no token (every call is 401).
    bound: std::sync::RwLock<Bound>,
    /// A pool member's activation secret's SHA-256; `None` for a worker started bound.
    activation: Option<[u8; 32]>,
    /// `--hang-activation`: an activation is never answered (a member that cannot bind).
    hang_activation: bool,
}

struct Bound {
    card: Vec<u8>,
    token: Option<String>,
}

impl Echo {
    /// `POST /activate`: binds an unbound member to its worker, once.
    fn activate(&self, req: &Request) -> Response {
        let Some(expected) = self.activation else {
            return Response::text(404, "not a pool member");
        };
        if self.hang_activation {
            eprintln!("a2a-echo-worker: not answering the activation, as asked");
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
        let presented = req
            .header("Authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
            .unwrap_or("");
        let hash = ring::digest::digest(&ring::digest::SHA256, presented.as_bytes());
        let mut bound = self.bound.write().unwrap_or_else(|p| p.into_inner());
        if bound.token.is_some() {
            return Response::text(409, "already activated");
        }
        if !a2a_worker_controller::token::constant_time_eq(hash.as_ref(), &expected) {
            return Response::text(401, "wrong activation secret");
        }
        let Body::Complete(body) = &req.body else {
            return Response::text(413, "request body too large");
        };
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Response::text(400, "the body is not JSON");
        };
        let field = |k: &str| v[k].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let (Some(worker_id), Some(_task), Some(token), Some(url)) = (
            field("worker_id"),
            field("task"),
            field("token"),
            field("a2a_url"),
        ) else {
            return Response::text(400, "activation needs worker_id, task, token and a2a_url");
        };
        let name = field("agent_name").unwrap_or_else(|| format!("claude-interactive-{worker_id}"));
        if let Some(prefix) = v["env"]["ECHO_PREFIX"].as_str() {
            *ECHO_PREFIX.write().unwrap_or_else(|p| p.into_inner()) = Some(prefix.to_string());
        }
        *bound = Bound {
            card: card(&name, &url),
            token: Some(token),
        };
        eprintln!("a2a-echo-worker: activated as worker {worker_id} at {url}");
        Response::json(200, &json!({ "activated": worker_id }))
    }
}

/// `ECHO_PREFIX` as an activation gave it (a started worker reads its environment).
static ECHO_PREFIX: std::sync::RwLock<Option<String>> = std::sync::RwLock::new(None);

impl Handler for Echo {
    fn handle(&self, req: Request) -> Response {
        match (req.method.as_str(), req.path.as_str()) {
            ("GET" | "HEAD", "/.well-known/agent-card.json") => {
                let bound = self.bound.read().unwrap_or_else(|p| p.into_inner());
                Response::new(200, "application/json", bound.card.clone())
            }
            ("GET" | "HEAD", "/healthz") => Response::text(200, "ok"),
            ("POST", "/activate") => self.activate(&req),
            ("POST", "/" | "/a2a" | "/a2a/") => {
                let Body::Complete(body) = &req.body else {
                    return Response::text(413, "request body too large");
                };
                let token = self
                    .bound
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .token
                    .clone();
                let Some(token) = token else {
                    return Response::text(401, "not activated yet");
                };
                if let Err(f) = auth::check(req.header("Authorization"), &token) {
                    return f.response();
                }
                Response::json(200, &rpc(body))
            }
            (_, "/" | "/a2a" | "/a2a/") => {
                Response::text(405, "use POST").with_header("Allow", "POST")
            }
            _ => Response::text(404, "not found"),
        }
    }
}

fn rpc(body: &[u8]) -> Value {
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return response_err(&Value::Null, &RpcError::parse_error("invalid JSON"));
    };
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if request.get("jsonrpc") != Some(&json!("2.0")) {
        return response_err(&id, &RpcError::invalid_request("jsonrpc must be \"2.0\""));
    }
    match request.get("method").and_then(Value::as_str) {
        Some("SendMessage") => {}
        Some("SendStreamingMessage" | "SubscribeToTask") => {
            return response_err(&id, &RpcError::unsupported("streaming"))
        }
        Some("GetTask" | "CancelTask") => {
            let task = request["params"]["id"].as_str().unwrap_or("");
            return response_err(&id, &RpcError::task_not_found(task));
        }
        Some(m) => return response_err(&id, &RpcError::method_not_found(m)),
        None => return response_err(&id, &RpcError::invalid_request("method is required")),
    }
    let message = &request["params"]["message"];
    let Some(parts) = message["parts"].as_array().filter(|p| !p.is_empty()) else {
        return response_err(&id, &RpcError::invalid_params("message.parts is required"));
    };
    let text: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
    let text = text.join("\n");
    let answer = match (text.strip_prefix("workspace "), text.strip_prefix("net ")) {
        (Some(command), _) => commands::workspace(command),
        (_, Some(command)) => commands::net(command),
        _ if text.starts_with("disk ") => commands::disk(&text["disk ".len()..]),
        _ => {
            let given = ECHO_PREFIX
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            match given.or_else(|| std::env::var("ECHO_PREFIX").ok()) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}: {text}"),
                _ => text,
            }
        }
    };
    let (Ok(task_id), Ok(generated_ctx), Ok(artifact_id)) = (uuid_v4(), uuid_v4(), uuid_v4())
    else {
        return response_err(&id, &RpcError::internal("no randomness"));
    };
    let context_id = message["contextId"]
        .as_str()
        .map_or(generated_ctx, str::to_string);
    let mut user = message.clone();
    user["taskId"] = json!(task_id);
    user["contextId"] = json!(context_id);
    response_ok(
        &id,
        json!({"task": {
            "id": task_id,
            "contextId": context_id,
            "status": {"state": "TASK_STATE_COMPLETED", "timestamp": rfc3339_millis(now_millis())},
            "artifacts": [{"artifactId": artifact_id, "name": "echo", "parts": [{"text": answer}]}],
            "history": [user],
        }}),
    )
}

/// 64 hexadecimal digits as 32 bytes.
fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

fn card(name: &str, url: &str) -> Vec<u8> {
    card_with(name, url, &[])
}

/// The card of an unbound pool member: it lists the activation contract's extension.
fn member_card(name: &str) -> Vec<u8> {
    card_with(
        name,
        "http://unbound.invalid",
        &[
            json!({"uri": ACTIVATION_EXTENSION, "description": "Bound to its task by POST /activate.", "required": false}),
        ],
    )
}

/// What the controller's activation contract is named by in a member's card.
const ACTIVATION_EXTENSION: &str = "urn:a2a-worker-controller:activation:v1";

fn card_with(name: &str, url: &str, extensions: &[Value]) -> Vec<u8> {
    json!({
        "name": name,
        "description": "Echoes the text of every message back as a completed task.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": false, "pushNotifications": false, "extendedAgentCard": false, "extensions": extensions},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "echo", "name": "Echo", "description": "Echoes text.", "tags": ["echo"]}],
    })
    .to_string()
    .into_bytes()
}

/// Takes memory a MiB at a time, every page written, without end: a worker that runs out of
/// memory, for the controller's OOM reasons.
fn grow(after: std::time::Duration) {
    std::thread::sleep(after);
    eprintln!("a2a-echo-worker: taking memory without end, as asked");
    let mut held: Vec<Vec<u8>> = Vec::new();
    loop {
        held.push(std::hint::black_box(vec![1u8; 1 << 20]));
        if held.len().is_multiple_of(64) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

fn wait_for_signal() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    match signal_hook::iterator::Signals::new([SIGTERM, SIGINT]) {
        Ok(mut signals) => {
            signals.forever().next();
        }
        Err(e) => eprintln!("a2a-echo-worker: no signal handling ({e}); running until killed"),
    }
}

/// `--print=N [--line-bytes=W]` (for the logs tests): N known lines before anything else,
/// `out <i>` on stdout for odd i and `err <i>` on stderr for even i, each padded with dots to
/// W bytes when W is given.
fn print_lines(n: usize, width: usize) {
    use std::io::Write;
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    for i in 1..=n {
        let mut line = format!("{} {i}", if i % 2 == 1 { "out" } else { "err" });
        while line.len() < width {
            line.push('.');
        }
        line.push('\n');
        // Flushed line by line: the two streams interleave in the engine's log as printed.
        let _ = if i % 2 == 1 {
            out.write_all(line.as_bytes()).and_then(|()| out.flush())
        } else {
            err.write_all(line.as_bytes()).and_then(|()| err.flush())
        };
    }
}

/// The worker's arguments (for tests: what it prints, whether it listens, how it misbehaves).
#[derive(Default)]
struct Args {
    no_listen: bool,
    listen_after: Option<std::time::Duration>,
    grow_after: Option<std::time::Duration>,
    hang_activation: bool,
    print: usize,
    line_bytes: usize,
}

/// The arguments, or the exit code to end with at once (`--exit-code`, or a usage error).
fn parse_args() -> Result<Args, ExitCode> {
    let mut args = Args::default();
    for arg in std::env::args().skip(1) {
        if let Some(n) = arg.strip_prefix("--print=").and_then(|n| n.parse().ok()) {
            args.print = n;
        } else if let Some(n) = arg
            .strip_prefix("--line-bytes=")
            .and_then(|n| n.parse().ok())
        {
            args.line_bytes = n;
        } else if let Some(code) = arg.strip_prefix("--exit-code=") {
            eprintln!("a2a-echo-worker: exiting at once with code {code} as asked");
            return Err(ExitCode::from(code.parse::<u8>().unwrap_or(1)));
        } else if let Some(ms) = arg
            .strip_prefix("--grow-after=")
            .and_then(|n| n.parse().ok())
        {
            args.grow_after = Some(std::time::Duration::from_millis(ms));
        } else if let Some(ms) = arg
            .strip_prefix("--listen-after=")
            .and_then(|n| n.parse().ok())
        {
            args.listen_after = Some(std::time::Duration::from_millis(ms));
        } else if arg == "--hang-activation" {
            args.hang_activation = true;
        } else if arg == "--no-listen" {
            args.no_listen = true;
        } else {
            eprintln!("a2a-echo-worker: unknown argument {arg:?}");
            return Err(ExitCode::from(2));
        }
    }
    Ok(args)
}

/// Who the worker is, from its environment: a worker bound to its task (its URL and token),
/// or an unbound pool member (its name and the hash of its activation secret).
struct Identity {
    member: Option<String>,
    activation: Option<[u8; 32]>,
    url: String,
    token: Option<String>,
    addr: std::net::SocketAddr,
}

/// The identity, or one line why the environment does not give one.
fn identity() -> Result<Identity, String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    // A pool member starts unbound: no task, no token, its URL perhaps not yet its own.
    let member = env("A2A_POOL_MEMBER");
    let activation = match (&member, env("A2A_ACTIVATION_SHA256")) {
        (None, _) => None,
        (Some(_), Some(hex)) => {
            Some(parse_hash(&hex).ok_or("A2A_ACTIVATION_SHA256 must be 64 hexadecimal digits")?)
        }
        (Some(_), None) => {
            return Err("a pool member (A2A_POOL_MEMBER) needs A2A_ACTIVATION_SHA256".into())
        }
    };
    let url = match (env("A2A_PUBLIC_URL"), &member) {
        (Some(url), _) => url,
        (None, Some(_)) => "http://unbound.invalid".to_string(),
        (None, None) => return Err("A2A_PUBLIC_URL is required".into()),
    };
    let token_env = env("WORKER_TOKEN_ENV").unwrap_or_else(|| "INTERACTIVE_AUTH_TOKEN".into());
    let token = match (env(&token_env), &member) {
        (Some(token), None) => Some(token),
        (_, Some(_)) => None,
        (None, None) => return Err(format!("the bearer token variable {token_env} is required")),
    };
    let addr = parse_listen(&env("LISTEN").unwrap_or_else(|| ":9090".into()))
        .map_err(|e| e.to_string())?;
    Ok(Identity {
        member,
        activation,
        url,
        token,
        addr,
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(code) => return code,
    };
    print_lines(args.print, args.line_bytes);
    let me = match identity() {
        Ok(me) => me,
        Err(why) => {
            eprintln!("a2a-echo-worker: {why}");
            return ExitCode::from(2);
        }
    };
    if let Some(wait) = args.listen_after {
        std::thread::sleep(wait);
    }
    if args.no_listen {
        eprintln!("a2a-echo-worker: running without listening, as asked");
        wait_for_signal();
        return ExitCode::SUCCESS;
    }
    let name = match &me.member {
        Some(m) => format!("a2a-pool-member-{m}"),
        None => std::env::var("A2A_AGENT_NAME")
            .ok()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| "a2a-echo-worker".into()),
    };
    let echo = Echo {
        bound: std::sync::RwLock::new(Bound {
            card: match &me.member {
                Some(_) => member_card(&name),
                None => card(&name, &me.url),
            },
            token: me.token,
        }),
        activation: me.activation,
        hang_activation: args.hang_activation,
    };
    let serving =
        match Server::bind(me.addr).and_then(|s| s.serve(Arc::new(echo), Limits::default())) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("a2a-echo-worker: {e}");
                return ExitCode::FAILURE;
            }
        };
    // With the time it could first answer, so benchmarks can measure how soon after it a
    // create returns.
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    eprintln!(
        "a2a-echo-worker: serving {} on {} (answering from {millis} ms)",
        me.url, me.addr
    );
    if let Some(after) = args.grow_after {
        std::thread::spawn(move || grow(after));
    }
    wait_for_signal();
    serving.shutdown(std::time::Duration::from_secs(5));
    ExitCode::SUCCESS
}
