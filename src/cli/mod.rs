//! The command line for people: `create TASK`, `list`, `stop WORKER_ID`, `logs WORKER_ID`
//! against a running controller, and `check`, which validates the controller's own settings and asks the
//! selected backend whether it answers — what an operator runs before loading the
//! LaunchAgent or rolling out the Deployment. Flags are data (`FLAGS`), so parsing and
//! `--help` come from one table. Exit codes: 0 done, 1 the operation failed (one line with
//! the contract's error code and message), 2 a usage error.

mod client;
mod output;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use self::client::Client;
use crate::settings::{self, read_secret_file, Command};
use crate::time::parse_duration;

/// The subcommands: name, operand, what it does.
const COMMANDS: &[(&str, &str, &str)] = &[
    ("create", "TASK", "start a worker for TASK on the running controller"),
    ("list", "", "list the workers of the running controller"),
    ("stop", "WORKER_ID", "stop a worker"),
    ("logs", "WORKER_ID", "print the last lines of a worker's output"),
    (
        "templates",
        "",
        "list the worker templates this caller may create from",
    ),
    (
        "workspaces",
        "",
        "list the task workspaces of this caller's scope",
    ),
    (
        "delete-workspace",
        "TASK",
        "delete a task's workspace (refused while a worker of the task runs)",
    ),
    (
        "watch",
        "",
        "print what happens to the workers as it happens (the ones there, then each change; Ctrl-C ends it)",
    ),
    (
        "check",
        "[SETTINGS...]",
        "validate the controller's settings (flags and environment, as when it runs) and ask the backend whether it answers",
    ),
];

struct Flag {
    name: &'static str,
    /// The value's name, for flags that take one.
    value: Option<&'static str>,
    help: &'static str,
}

/// The client commands' flags (`check` takes the controller's settings instead).
const FLAGS: &[Flag] = &[
    Flag {
        name: "url",
        value: Some("URL"),
        help: "the controller's base URL (default: A2A_PUBLIC_URL)",
    },
    Flag {
        name: "token-file",
        value: Some("FILE"),
        help: "read the bearer token from FILE (default: A2A_AUTH_TOKEN, else A2A_AUTH_TOKEN_FILE)",
    },
    Flag {
        name: "timeout",
        value: Some("DURATION"),
        help: "how long to wait for the answer (default 180s: create waits for its worker)",
    },
    Flag {
        name: "json",
        value: None,
        help: "print the reply data as JSON, for scripts (create's includes the token)",
    },
    Flag {
        name: "show-token",
        value: None,
        help: "create: print the new worker's token",
    },
    Flag {
        name: "progress",
        value: None,
        help: "create: print each step on stderr as it happens (the default on a terminal)",
    },
    Flag {
        name: "ttl",
        value: Some("DURATION"),
        help: "create: stop the worker after this long (90m, 2h, or seconds)",
    },
    Flag {
        name: "template",
        value: Some("NAME"),
        help: "create: start the worker from this template (default: default); list, watch: only workers made from it",
    },
    Flag {
        name: "delete-workspace",
        value: None,
        help: "stop: delete the worker's task workspace too",
    },
    Flag {
        name: "tail",
        value: Some("LINES"),
        help: "logs: how many of the last lines (default 200, at most 10000)",
    },
    Flag {
        name: "meta",
        value: Some("KEY=VALUE"),
        help: "create: tag the worker (repeatable); list, watch: only workers tagged so (all must match)",
    },
    Flag {
        name: "state",
        value: Some("STATE"),
        help: "list, watch: only workers in this state (starting, running, exited, stopping, unknown)",
    },
    Flag {
        name: "task",
        value: Some("TASK"),
        help: "list, watch: only the worker of this task",
    },
];

/// Whether `arg` names a subcommand (the binary then acts as a client, not a controller).
pub fn is_command(arg: &str) -> bool {
    COMMANDS.iter().any(|(name, _, _)| *name == arg)
}

/// The commands and their flags, for `--help`.
pub fn help_text() -> String {
    let mut text = String::from("Commands (instead of running the controller):\n");
    for (name, operand, what) in COMMANDS {
        let usage = format!("{name} {operand}");
        text.push_str(&format!("  {:<24} {what}\n", usage.trim_end()));
    }
    text.push_str("Command flags:\n");
    for flag in FLAGS {
        let usage = match flag.value {
            Some(v) => format!("--{} {v}", flag.name),
            None => format!("--{}", flag.name),
        };
        text.push_str(&format!("  {usage:<24} {}\n", flag.help));
    }
    text
}

/// What the client commands were given.
#[derive(Debug, Default)]
struct Given {
    operands: Vec<String>,
    values: HashMap<&'static str, String>,
    /// Every `--meta KEY=VALUE`, in order (the one repeatable flag).
    metas: Vec<String>,
}

impl Given {
    fn switch(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

fn parse_flags(args: &[String]) -> Result<Given, String> {
    let mut given = Given::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let Some(body) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            given.operands.push(arg.clone());
            continue;
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let flag = FLAGS
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| format!("unknown flag {arg:?} (see --help)"))?;
        let value = match (flag.value, inline) {
            (None, None) => String::new(),
            (None, Some(_)) => return Err(format!("flag --{name} takes no value")),
            (Some(_), Some(v)) => v,
            (Some(_), None) => args
                .next()
                .cloned()
                .ok_or_else(|| format!("flag --{name} needs a value"))?,
        };
        if flag.name == "meta" {
            given.metas.push(value.clone());
        }
        given.values.insert(flag.name, value);
    }
    Ok(given)
}

/// Runs a subcommand (`args[0]`); the exit code.
pub fn main(
    args: &[String],
    env: &HashMap<String, String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let Some((command, rest)) = args.split_first() else {
        return 2;
    };
    if command == "check" {
        return check(rest, env, out, err);
    }
    let fail = |err: &mut dyn Write, code: u8, line: &str| {
        let _ = writeln!(err, "a2a-worker-controller {command}: {line}");
        code
    };
    let given = match parse_flags(rest) {
        Ok(g) => g,
        Err(why) => return fail(err, 2, &why),
    };
    let only_for = |flag: &str, allowed: &str| -> Option<String> {
        (given.values.contains_key(flag) && command != allowed)
            .then(|| format!("--{flag} is for {allowed} only"))
    };
    let misplaced = only_for("ttl", "create")
        .or_else(|| only_for("tail", "logs"))
        .or_else(|| only_for("delete-workspace", "stop"))
        .or_else(|| {
            (given.values.contains_key("template")
                && !matches!(command.as_str(), "create" | "list" | "watch"))
            .then(|| "--template is for create, list and watch only".to_string())
        })
        .or_else(|| {
            ["state", "task"].into_iter().find_map(|f| {
                (given.values.contains_key(f) && !matches!(command.as_str(), "list" | "watch"))
                    .then(|| format!("--{f} is for list and watch only"))
            })
        })
        .or_else(|| {
            (!given.metas.is_empty() && !matches!(command.as_str(), "create" | "list" | "watch"))
                .then(|| "--meta is for create, list and watch only".to_string())
        });
    if let Some(why) = misplaced {
        return fail(err, 2, &why);
    }
    let mut metadata = serde_json::Map::new();
    for kv in &given.metas {
        let Some((k, v)) = kv.split_once('=') else {
            return fail(err, 2, &format!("--meta {kv:?} is not KEY=VALUE"));
        };
        if metadata.insert(k.to_string(), json!(v)).is_some() {
            return fail(err, 2, &format!("--meta {k:?} is given twice"));
        }
    }
    let request = match (command.as_str(), given.operands.as_slice()) {
        ("create", [task]) => {
            let mut r = json!({"operation": "create", "task": task});
            if let Some(ttl) = given.values.get("ttl") {
                // A bare number is seconds, as the controller reads it.
                r["ttl"] = ttl.parse::<u64>().map_or_else(|_| json!(ttl), |n| json!(n));
            }
            if !metadata.is_empty() {
                r["metadata"] = Value::Object(metadata);
            }
            if let Some(t) = given.values.get("template") {
                r["template"] = json!(t);
            }
            r
        }
        ("templates", []) => json!({"operation": "templates"}),
        (op @ ("list" | "watch"), []) => {
            let mut r = json!({"operation": op});
            if !metadata.is_empty() {
                r["metadata"] = Value::Object(metadata);
            }
            for filter in ["state", "task", "template"] {
                if let Some(v) = given.values.get(filter) {
                    r[filter] = json!(v);
                }
            }
            r
        }
        ("stop", [id]) if given.switch("delete-workspace") => {
            json!({"operation": "stop", "worker_id": id, "workspace": "delete"})
        }
        ("stop", [id]) => json!({"operation": "stop", "worker_id": id}),
        ("workspaces", []) => json!({"operation": "workspaces"}),
        ("delete-workspace", [task]) => json!({"operation": "delete_workspace", "task": task}),
        ("logs", [id]) => {
            let mut r = json!({"operation": "logs", "worker_id": id});
            if let Some(tail) = given.values.get("tail") {
                match tail.parse::<u64>() {
                    Ok(n) => r["tail"] = json!(n),
                    Err(_) => {
                        return fail(err, 2, &format!("--tail {tail:?} is not a number of lines"))
                    }
                }
            }
            r
        }
        _ => {
            let operand = COMMANDS
                .iter()
                .find(|(name, _, _)| name == command)
                .map(|(_, operand, _)| *operand)
                .unwrap_or("");
            return fail(
                err,
                2,
                &format!("usage: a2a-worker-controller {command} {operand}"),
            );
        }
    };
    let client = match connect(&given, env, command == "watch") {
        Ok(c) => c,
        Err(why) => return fail(err, 2, &why),
    };
    if command == "watch" {
        let json_lines = given.switch("json");
        let result = client.watch(request, &mut |event| {
            let line = if json_lines {
                event.to_string()
            } else {
                output::event_line(event)
            };
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        });
        return match result {
            Ok(_) => 0,
            Err(e) => fail(err, 1, &e.to_string()),
        };
    }
    // A create is streamed; its steps go to stderr as they happen, for a person watching (a
    // terminal) or when asked: a script's stderr stays the one line of a failure.
    let show_progress = given.switch("progress") || std::io::stderr().is_terminal();
    let result = if command == "create" && show_progress {
        client.control_streaming(request, &mut |step| {
            let _ = writeln!(err, "  {}", step.replace(|c: char| c.is_control(), "?"));
        })
    } else {
        client.control(request)
    };
    let data = match result {
        Ok(data) => data,
        Err(e) => return fail(err, 1, &e.to_string()),
    };
    if command == "logs" && data["truncated"] == json!(true) && !given.switch("json") {
        let _ = writeln!(
            err,
            "a2a-worker-controller logs: the output was cut to its last 1 MiB"
        );
    }
    let printed = if given.switch("json") {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&data).unwrap_or_default()
        )
    } else {
        print_for_people(command, &data, given.switch("show-token"), out)
    };
    match printed {
        Ok(()) => 0,
        Err(e) => fail(err, 1, &format!("cannot print: {e}")),
    }
}

fn connect(given: &Given, env: &HashMap<String, String>, watch: bool) -> Result<Client, String> {
    let nonempty = |name: &str| env.get(name).filter(|v| !v.is_empty()).cloned();
    let url = given
        .values
        .get("url")
        .cloned()
        .or_else(|| nonempty("A2A_PUBLIC_URL"))
        .ok_or("no controller URL: pass --url or set A2A_PUBLIC_URL")?;
    // --token-file, else the variable, else its file.
    let token = match (
        given.values.get("token-file").cloned(),
        nonempty("A2A_AUTH_TOKEN"),
        nonempty("A2A_AUTH_TOKEN_FILE"),
    ) {
        (Some(file), _, _) | (None, None, Some(file)) => read_secret_file(Path::new(&file))?.0,
        (None, Some(token), _) => token,
        (None, None, None) => {
            return Err(
                "no token: set A2A_AUTH_TOKEN or A2A_AUTH_TOKEN_FILE, or pass --token-file".into(),
            )
        }
    };
    // A watch runs until it is ended (its stream's heartbeats keep it alive), unless asked.
    let timeout = match given.values.get("timeout") {
        Some(t) => Some(
            parse_duration(t)
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("--timeout {t:?} is not a duration such as 60s"))?,
        ),
        None if watch => None,
        None => Some(Duration::from_secs(180)),
    };
    Ok(Client::new(&url, token, timeout))
}

fn print_for_people(
    command: &str,
    data: &Value,
    show_token: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    match command {
        "list" => {
            let workers = data["workers"].as_array().cloned().unwrap_or_default();
            if workers.is_empty() {
                return writeln!(out, "no workers");
            }
            out.write_all(output::worker_table(&workers).as_bytes())
        }
        "create" => {
            out.write_all(output::worker_table(std::slice::from_ref(&data["worker"])).as_bytes())?;
            match data["token"].as_str() {
                Some("") | None => Ok(()),
                Some(token) if show_token => writeln!(out, "token: {token}"),
                Some(_) => writeln!(
                    out,
                    "token: not shown (it is handed out once: --show-token or --json prints it)"
                ),
            }
        }
        "workspaces" => {
            let spaces = data["workspaces"].as_array().cloned().unwrap_or_default();
            if spaces.is_empty() {
                return writeln!(out, "no workspaces");
            }
            out.write_all(output::workspace_table(&spaces).as_bytes())
        }
        "delete-workspace" => writeln!(
            out,
            "deleted the workspace {} of task {}",
            output::cell(&data["workspace"]["name"]),
            output::cell(&data["workspace"]["task"])
        ),
        "templates" => {
            let templates = data["templates"].as_array().cloned().unwrap_or_default();
            if templates.is_empty() {
                return writeln!(out, "no templates this caller may use");
            }
            out.write_all(output::template_table(&templates).as_bytes())
        }
        // The worker's own output, as it printed it.
        "logs" => out.write_all(data["text"].as_str().unwrap_or("").as_bytes()),
        _ => {
            let w = &data["worker"];
            // A worker whose engine removes it gracefully (a pod's grace period) is stopping.
            if w["state"] == "stopping" {
                writeln!(
                    out,
                    "stopping worker {} (task {}): {}",
                    output::cell(&w["worker_id"]),
                    output::cell(&w["task"]),
                    output::cell(&w["reason"])
                )
            } else {
                writeln!(
                    out,
                    "stopped worker {} (task {})",
                    output::cell(&w["worker_id"]),
                    output::cell(&w["task"])
                )
            }
        }
    }
}

/// `check`'s pool line: each pooled template's size and its members found now, and where the
/// members' key comes from (its id, never the key); `None` without pooled templates.
fn pool_line(
    settings: &settings::Settings,
    backend: &dyn crate::backend::Backend,
    templates: &crate::settings::templates::Templates,
) -> Result<Option<String>, String> {
    let pooled: Vec<_> = templates.all().filter(|t| t.pool > 0).collect();
    if pooled.is_empty() {
        return Ok(None);
    }
    let (key, source) = crate::pool_key(settings)
        .map_err(|e| e.to_string())?
        .ok_or("a pooled template needs POOL_KEY_FILE or A2A_AUTH_TOKEN")?;
    let members = backend.pool_members().map_err(|e| e.to_string())?;
    let sizes: Vec<String> = pooled
        .iter()
        .map(|t| {
            let ready = members
                .iter()
                .filter(|m| m.template == t.name && m.state == crate::backend::MemberState::Ready)
                .count();
            format!("{} keeps {} ({ready} ready now)", t.name, t.pool)
        })
        .collect();
    Ok(Some(format!(
        "{}; members' key {source}, id {}",
        sizes.join(", "),
        key.id()
    )))
}

/// `check`: the controller's settings as it would read them, then the backend it would build,
/// asked whether it answers. Prints what it found.
fn check(
    args: &[String],
    env: &HashMap<String, String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let settings = match settings::parse(args.iter().cloned(), env.clone()) {
        Ok(Command::Run(s)) => s,
        Ok(Command::Help(text) | Command::Version(text)) => {
            let _ = writeln!(out, "{text}");
            return 0;
        }
        Err(e) => {
            let _ = writeln!(err, "settings: {e}");
            return 2;
        }
    };
    let _ = writeln!(
        out,
        "settings: ok (listen {}, public URL {}, controller id {:?}, token from {})",
        settings.listen,
        settings.public_url,
        settings.controller_id,
        match (&settings.auth_token_file, &settings.auth_token) {
            (Some(f), _) => f.display().to_string(),
            (None, Some(_)) => "A2A_AUTH_TOKEN".into(),
            (None, None) => "callers only (no admin token)".into(),
        }
    );
    for w in &settings.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    // The callers file read and the issuer asked, as startup would.
    match crate::auth::Authenticator::new(&settings) {
        Ok((auth, warnings)) => {
            for w in warnings {
                let _ = writeln!(out, "warning: {w}");
            }
            for line in auth.describe() {
                let _ = writeln!(out, "callers: {line}");
            }
        }
        Err(why) => {
            let _ = writeln!(err, "callers: FAILED: {why}");
            return 1;
        }
    }
    let backend = match crate::build_backend_for_check(&settings) {
        Ok(b) => b,
        Err(e) => {
            let _ = writeln!(err, "backend: {e}");
            return 1;
        }
    };
    let kind = backend.kind();
    let findings = backend.check();
    let mut failed = false;
    for f in &findings {
        if f.ok {
            let _ = writeln!(out, "backend {kind}: {}", f.what);
        } else {
            failed = true;
            let _ = writeln!(err, "backend {kind}: FAILED: {}", f.what);
        }
    }
    // Every template, as startup reads them, proved one by one.
    let templates = match crate::open_templates(&settings, &backend) {
        Ok(t) => t.current(),
        Err(e) => {
            let _ = writeln!(err, "templates: FAILED: {e}");
            return 1;
        }
    };
    for t in templates.all() {
        let f = backend.check_template(t);
        if f.ok {
            let _ = writeln!(out, "template {}: {}", t.name, f.what);
        } else {
            failed = true;
            let _ = writeln!(err, "template {}: FAILED: {}", t.name, f.what);
        }
    }
    match pool_line(&settings, backend.as_ref(), &templates) {
        Ok(Some(line)) => {
            let _ = writeln!(out, "pool: {line}");
        }
        Ok(None) => {}
        Err(why) => {
            failed = true;
            let _ = writeln!(err, "pool: FAILED: {why}");
        }
    }
    u8::from(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> (u8, String, String) {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = main(&args, &env, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn usage_errors_exit_2_with_one_line() {
        for (args, says) in [
            (&["create"][..], "usage: a2a-worker-controller create TASK"),
            (&["stop", "a", "b"][..], "usage"),
            (&["list", "--bogus"][..], "unknown flag"),
            (&["list", "--json=1"][..], "takes no value"),
            (&["list", "--url"][..], "needs a value"),
            (&["list"][..], "A2A_PUBLIC_URL"),
        ] {
            let (code, out, err) = run(args, &[]);
            assert_eq!(code, 2, "{args:?}");
            assert!(out.is_empty());
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(says), "{args:?}: {err}");
        }
        let (code, _, err) = run(&["list", "--url=http://127.0.0.1:1"], &[]);
        assert_eq!(code, 2);
        assert!(err.contains("no token"), "{err}");
    }

    #[test]
    fn an_unreachable_controller_is_one_line_and_exit_1() {
        let (code, _, err) = run(
            &["list", "--url", "http://127.0.0.1:1", "--timeout=2s"],
            &[("A2A_AUTH_TOKEN", "0123456789abcdef")],
        );
        assert_eq!(code, 1);
        assert!(
            err.starts_with("a2a-worker-controller list: unreachable"),
            "{err}"
        );
        assert!(!err.contains("0123456789abcdef"));
    }

    #[test]
    fn help_lists_commands_and_flags() {
        let text = help_text();
        for s in [
            "create TASK",
            "stop WORKER_ID",
            "check",
            "--show-token",
            "--json",
        ] {
            assert!(text.contains(s), "{s}");
        }
    }
}
