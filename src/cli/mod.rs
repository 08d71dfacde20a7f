//! The command line for people: `create TASK`, `list`, `stop WORKER_ID`, `logs WORKER_ID`
//! against a running controller, and `check` (`check.rs`), which validates the controller's
//! own settings and asks the selected backend whether it answers — what an operator runs
//! before loading the LaunchAgent or rolling out the Deployment. Commands and flags are data
//! (`flags.rs`), so parsing, the refusal of a misplaced flag and `--help` come from one table;
//! a command's request is planned without sending anything (`request.rs`), then sent and
//! printed here. Exit codes: 0 done, 1 the operation failed (one line with the contract's
//! error code and message), 2 a usage error.

mod check;
mod client;
mod flags;
mod output;
mod request;

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use self::client::Client;
pub use self::flags::{help_text, is_command};
use self::flags::{parse_flags, Given};
use crate::secret_file::read_secret_file;
use crate::time::parse_duration;

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
        return check::check(rest, env, out, err);
    }
    if command == "copy-files" {
        return copy_files(rest, out, err);
    }
    let fail = |err: &mut dyn Write, code: u8, line: &str| {
        let _ = writeln!(err, "a2a-worker-controller {command}: {line}");
        code
    };
    let planned = parse_flags(rest).and_then(|given| {
        let request = request::request_for(command, &given)?;
        let client = connect(&given, env, command == "watch")?;
        Ok((given, request, client))
    });
    let (given, request, client) = match planned {
        Ok(p) => p,
        Err(why) => return fail(err, 2, &why),
    };
    match run(command, &given, &client, request, out, err) {
        Ok(()) => 0,
        Err(why) => fail(err, 1, &why),
    }
}

/// Sends the planned request and prints its answer: a watch's events as they come, a create's
/// steps on stderr (for a person watching, or when asked), any other reply once.
fn run(
    command: &str,
    given: &Given,
    client: &Client,
    request: Value,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), String> {
    if command == "watch" {
        let json_lines = given.switch("json");
        return client
            .watch(request, &mut |event| {
                let line = if json_lines {
                    event.to_string()
                } else {
                    output::event_line(event)
                };
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
            })
            .map(|_| ())
            .map_err(|e| e.to_string());
    }
    // A script's stderr stays the one line of a failure.
    let show_progress = given.switch("progress") || std::io::stderr().is_terminal();
    let result = if matches!(command, "create" | "resume") && show_progress {
        client.control_streaming(request, &mut |step| {
            let _ = writeln!(err, "  {}", step.replace(|c: char| c.is_control(), "?"));
        })
    } else {
        client.control(request)
    };
    let data = result.map_err(|e| e.to_string())?;
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
    printed.map_err(|e| format!("cannot print: {e}"))
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

/// `copy-files FROM_DIR INTO_DIR`: what the Docker backend's copy container (as root, so
/// owners are kept) and the Kubernetes backend's copy Job (as the workers' user) run; a
/// summary line, or one line why not (exit 1; 2 for a usage error).
fn copy_files(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let [from, into] = args else {
        let _ = writeln!(
            err,
            "a2a-worker-controller copy-files: usage: a2a-worker-controller copy-files FROM_DIR INTO_DIR"
        );
        return 2;
    };
    match crate::fork::copy_into(std::path::Path::new(from), std::path::Path::new(into)) {
        Ok(c) => {
            let _ = writeln!(
                out,
                "copied {} files ({} bytes), {} directories, {} links; {} sockets, FIFOs or devices left out; {} entries' owner or mode not kept (the copier is not root)",
                c.files, c.bytes, c.dirs, c.links, c.skipped, c.not_kept
            );
            0
        }
        Err(e) => {
            let _ = writeln!(err, "a2a-worker-controller copy-files: {e}");
            1
        }
    }
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
        "copy-workspace" => writeln!(
            out,
            "task {} starts from a copy of the workspace: {}",
            output::cell(&data["workspace"]["task"]),
            output::cell(&data["workspace"]["name"])
        ),
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
        "renew" | "suspend" | "resume" => {
            out.write_all(output::worker_table(std::slice::from_ref(&data["worker"])).as_bytes())
        }
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
