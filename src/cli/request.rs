//! What a client command asks the controller: the control request it sends, planned from the
//! command and its flags alone (nothing is sent here), or the usage error that stops it.

use serde_json::{json, Map, Value};

use super::flags::{Given, COMMANDS};

/// The control request for `command` given `given`, or one line why it is a usage error.
pub(super) fn request_for(command: &str, given: &Given) -> Result<Value, String> {
    if let Some(why) = given.misplaced(command) {
        return Err(why);
    }
    let metadata = metadata(&given.metas)?;
    let request = match (command, given.operands.as_slice()) {
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
            if let Some(from) = given.values.get("from-task") {
                r["from_task"] = json!(from);
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
        ("renew", [id, ttl]) => json!({"operation": "renew", "worker_id": id, "ttl": ttl}),
        (op @ ("suspend" | "resume"), [id]) => json!({"operation": op, "worker_id": id}),
        ("workspaces", []) => json!({"operation": "workspaces"}),
        ("delete-workspace", [task]) => json!({"operation": "delete_workspace", "task": task}),
        ("copy-workspace", [from, task]) => {
            json!({"operation": "copy_workspace", "from_task": from, "task": task})
        }
        ("logs", [id]) => {
            let mut r = json!({"operation": "logs", "worker_id": id});
            if let Some(tail) = given.values.get("tail") {
                let n = tail
                    .parse::<u64>()
                    .map_err(|_| format!("--tail {tail:?} is not a number of lines"))?;
                r["tail"] = json!(n);
            }
            r
        }
        _ => {
            let operand = COMMANDS
                .iter()
                .find(|(name, _, _)| *name == command)
                .map(|(_, operand, _)| *operand)
                .unwrap_or("");
            return Err(format!("usage: a2a-worker-controller {command} {operand}"));
        }
    };
    Ok(request)
}

/// Every `--meta KEY=VALUE` as the request's `metadata`; a key given twice is refused.
fn metadata(metas: &[String]) -> Result<Map<String, Value>, String> {
    let mut metadata = Map::new();
    for kv in metas {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(format!("--meta {kv:?} is not KEY=VALUE"));
        };
        if metadata.insert(k.to_string(), json!(v)).is_some() {
            return Err(format!("--meta {k:?} is given twice"));
        }
    }
    Ok(metadata)
}

#[cfg(test)]
mod tests {
    use super::super::flags::parse_flags;
    use super::*;

    fn plan(command: &str, args: &[&str]) -> Result<Value, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        request_for(command, &parse_flags(&args).unwrap())
    }

    #[test]
    fn each_command_plans_its_control_request() {
        assert_eq!(
            plan(
                "create",
                &["t", "--ttl", "90", "--meta=team=a", "--template=coder"]
            )
            .unwrap(),
            json!({"operation": "create", "task": "t", "ttl": 90, "metadata": {"team": "a"}, "template": "coder"})
        );
        assert_eq!(
            plan("create", &["t", "--ttl=2h"]).unwrap()["ttl"],
            json!("2h")
        );
        assert_eq!(
            plan("watch", &["--state=running", "--task=t"]).unwrap(),
            json!({"operation": "watch", "state": "running", "task": "t"})
        );
        assert_eq!(
            plan("renew", &["w1", "2h"]).unwrap(),
            json!({"operation": "renew", "worker_id": "w1", "ttl": "2h"})
        );
        assert_eq!(
            plan("suspend", &["w1"]).unwrap(),
            json!({"operation": "suspend", "worker_id": "w1"})
        );
        assert_eq!(
            plan("resume", &["w1"]).unwrap(),
            json!({"operation": "resume", "worker_id": "w1"})
        );
        assert_eq!(
            plan("stop", &["w1", "--delete-workspace"]).unwrap(),
            json!({"operation": "stop", "worker_id": "w1", "workspace": "delete"})
        );
        assert_eq!(
            plan("logs", &["w1", "--tail=5"]).unwrap(),
            json!({"operation": "logs", "worker_id": "w1", "tail": 5})
        );
        assert_eq!(
            plan("delete-workspace", &["t"]).unwrap(),
            json!({"operation": "delete_workspace", "task": "t"})
        );
        assert_eq!(
            plan("copy-workspace", &["a", "b"]).unwrap(),
            json!({"operation": "copy_workspace", "from_task": "a", "task": "b"})
        );
        assert_eq!(
            plan("create", &["b", "--from-task", "a"]).unwrap(),
            json!({"operation": "create", "task": "b", "from_task": "a"})
        );
    }

    #[test]
    fn a_usage_error_is_one_line_and_nothing_is_planned() {
        for (command, args, says) in [
            (
                "create",
                &[][..],
                "usage: a2a-worker-controller create TASK",
            ),
            (
                "stop",
                &["a", "b"][..],
                "usage: a2a-worker-controller stop WORKER_ID",
            ),
            (
                "logs",
                &["w", "--tail=x"][..],
                "--tail \"x\" is not a number of lines",
            ),
            ("list", &["--meta=x"][..], "--meta \"x\" is not KEY=VALUE"),
            (
                "list",
                &["--meta=a=1", "--meta=a=2"][..],
                "--meta \"a\" is given twice",
            ),
            ("list", &["--ttl=1h"][..], "--ttl is for create only"),
        ] {
            assert_eq!(plan(command, args).unwrap_err(), says, "{command} {args:?}");
        }
    }
}
