//! The command line's commands and flags, as data: each flag says which commands it is for,
//! and both the refusal of a flag given to another command and the help come from that.

use std::collections::HashMap;

/// The subcommands: name, operand, what it does.
pub(super) const COMMANDS: &[(&str, &str, &str)] = &[
    ("create", "TASK", "start a worker for TASK on the running controller"),
    ("list", "", "list the workers of the running controller"),
    ("stop", "WORKER_ID", "stop a worker"),
    (
        "renew",
        "WORKER_ID TTL",
        "give a worker a new expiry: now + TTL, e.g. 2h (the token may be the worker's own)",
    ),
    (
        "suspend",
        "WORKER_ID",
        "stop a worker running and keep its files and identity until resumed",
    ),
    (
        "resume",
        "WORKER_ID",
        "run a suspended worker again (ready when this returns)",
    ),
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
        "copy-workspace",
        "FROM_TASK TASK",
        "make TASK's workspace a copy of FROM_TASK's (same scope; FROM_TASK's worker, if any, stopped or suspended)",
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
        "copy-files",
        "FROM_DIR INTO_DIR",
        "copy a workspace's files into an empty directory, keeping modes, owners and links (what the docker backend's copy container runs)",
    ),
    (
        "check",
        "[SETTINGS...]",
        "validate the controller's settings (flags and environment, as when it runs) and ask the backend whether it answers",
    ),
];

/// Which client commands a flag is for.
#[derive(Debug, Clone, Copy)]
pub(super) enum For {
    /// Every client command.
    All,
    /// These only: given to another, it is refused.
    Only(&'static [&'static str]),
    /// These only, and harmless elsewhere (an output switch another command ignores).
    Meant(&'static [&'static str]),
}

pub(super) struct Flag {
    pub name: &'static str,
    /// The value's name, for flags that take one.
    pub value: Option<&'static str>,
    pub commands: For,
    pub help: &'static str,
}

/// The client commands' flags (`check` takes the controller's settings instead).
pub(super) const FLAGS: &[Flag] = &[
    Flag {
        name: "url",
        value: Some("URL"),
        commands: For::All,
        help: "the controller's base URL (default: A2A_PUBLIC_URL)",
    },
    Flag {
        name: "token-file",
        value: Some("FILE"),
        commands: For::All,
        help: "read the bearer token from FILE (default: A2A_AUTH_TOKEN, else A2A_AUTH_TOKEN_FILE)",
    },
    Flag {
        name: "timeout",
        value: Some("DURATION"),
        commands: For::All,
        help: "how long to wait for the answer (default 180s: create waits for its worker)",
    },
    Flag {
        name: "json",
        value: None,
        commands: For::All,
        help: "print the reply data as JSON, for scripts (create's includes the token)",
    },
    Flag {
        name: "show-token",
        value: None,
        commands: For::Meant(&["create"]),
        help: "print the new worker's token",
    },
    Flag {
        name: "progress",
        value: None,
        commands: For::Meant(&["create"]),
        help: "print each step on stderr as it happens (the default on a terminal)",
    },
    Flag {
        name: "ttl",
        value: Some("DURATION"),
        commands: For::Only(&["create"]),
        help: "stop the worker after this long (90m, 2h, or seconds)",
    },
    Flag {
        name: "template",
        value: Some("NAME"),
        commands: For::Only(&["create", "list", "watch"]),
        help: "create: start the worker from this template (default: default); list, watch: only workers made from it",
    },
    Flag {
        name: "from-task",
        value: Some("TASK"),
        commands: For::Only(&["create"]),
        help: "start the task's workspace as a copy of this task's (same scope; its worker stopped or suspended)",
    },
    Flag {
        name: "delete-workspace",
        value: None,
        commands: For::Only(&["stop"]),
        help: "delete the worker's task workspace too",
    },
    Flag {
        name: "tail",
        value: Some("LINES"),
        commands: For::Only(&["logs"]),
        help: "how many of the last lines (default 200, at most 10000)",
    },
    Flag {
        name: "meta",
        value: Some("KEY=VALUE"),
        commands: For::Only(&["create", "list", "watch"]),
        help: "create: tag the worker (repeatable); list, watch: only workers tagged so (all must match)",
    },
    Flag {
        name: "state",
        value: Some("STATE"),
        commands: For::Only(&["list", "watch"]),
        help: "only workers in this state (starting, running, exited, stopping, unknown)",
    },
    Flag {
        name: "task",
        value: Some("TASK"),
        commands: For::Only(&["list", "watch"]),
        help: "only the worker of this task",
    },
];

/// `create`, `list and watch`, `create, list and watch`.
fn names(commands: &[&str]) -> String {
    match commands {
        [] => String::new(),
        [one] => one.to_string(),
        [most @ .., last] => format!("{} and {last}", most.join(", ")),
    }
}

/// Whether `arg` names a subcommand (the binary then acts as a client, not a controller).
pub fn is_command(arg: &str) -> bool {
    COMMANDS.iter().any(|(name, _, _)| *name == arg)
}

/// The commands and their flags, for `--help`: a flag for some commands only says which
/// (unless its help says already, per command).
pub fn help_text() -> String {
    let mut text = String::from("Commands (instead of running the controller):\n");
    for (name, operand, what) in COMMANDS {
        let usage = format!("{name} {operand}");
        text.push_str(&format!("  {:<24} {what}\n", usage.trim_end()));
    }
    text.push_str(&format!(
        "  {:<24} run the egress proxy instead of the controller, from the same settings (EGRESS_*; docs/egress.md)\n",
        "egress"
    ));
    text.push_str("Command flags:\n");
    for flag in FLAGS {
        let usage = match flag.value {
            Some(v) => format!("--{} {v}", flag.name),
            None => format!("--{}", flag.name),
        };
        let help = match flag.commands {
            For::Only(c) | For::Meant(c) if !flag.help.contains(": ") => {
                format!("{}: {}", names(c).replace(" and ", ", "), flag.help)
            }
            _ => flag.help.to_string(),
        };
        text.push_str(&format!("  {usage:<24} {help}\n"));
    }
    text
}

/// What the client commands were given.
#[derive(Debug, Default)]
pub(super) struct Given {
    pub operands: Vec<String>,
    pub values: HashMap<&'static str, String>,
    /// Every `--meta KEY=VALUE`, in order (the one repeatable flag).
    pub metas: Vec<String>,
}

impl Given {
    pub fn switch(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// The first flag given that is not for `command`, and why (`--ttl is for create only`).
    pub fn misplaced(&self, command: &str) -> Option<String> {
        FLAGS.iter().find_map(|flag| match flag.commands {
            For::Only(c) if self.switch(flag.name) && !c.contains(&command) => {
                Some(format!("--{} is for {} only", flag.name, names(c)))
            }
            _ => None,
        })
    }
}

pub(super) fn parse_flags(args: &[String]) -> Result<Given, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn given(args: &[&str]) -> Given {
        parse_flags(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn a_flag_given_to_another_command_is_refused_naming_its_commands() {
        for (command, args, says) in [
            ("list", &["--ttl", "1h"][..], "--ttl is for create only"),
            ("list", &["--tail=5"][..], "--tail is for logs only"),
            (
                "list",
                &["--delete-workspace"][..],
                "--delete-workspace is for stop only",
            ),
            (
                "stop",
                &["--template=t"][..],
                "--template is for create, list and watch only",
            ),
            (
                "create",
                &["--state=running"][..],
                "--state is for list and watch only",
            ),
            (
                "logs",
                &["--task=t"][..],
                "--task is for list and watch only",
            ),
            (
                "stop",
                &["--meta=a=b"][..],
                "--meta is for create, list and watch only",
            ),
        ] {
            assert_eq!(
                given(args).misplaced(command).as_deref(),
                Some(says),
                "{args:?}"
            );
        }
        for (command, args) in [
            ("create", &["--ttl=1h", "--template=t", "--meta=a=b"][..]),
            (
                "watch",
                &["--state=running", "--task=t", "--template=t"][..],
            ),
            ("list", &["--show-token", "--progress", "--json"][..]),
        ] {
            assert_eq!(given(args).misplaced(command), None, "{command} {args:?}");
        }
    }

    #[test]
    fn the_help_says_which_commands_a_flag_is_for() {
        let text = help_text();
        for line in [
            "--ttl DURATION           create: stop the worker after",
            "--tail LINES             logs: how many of the last lines",
            "--state STATE            list, watch: only workers in this state",
            "--show-token             create: print the new worker's token",
            "--template NAME          create: start the worker from this template",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
