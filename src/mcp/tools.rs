//! The tools: one per control operation, as data (name, title, what an agent should know,
//! the input and output schemas, hints), and a call turned into the same control request an
//! A2A data part makes — read and checked by the same code, so every refusal is the one A2A
//! gives, with its code.

use serde_json::{json, Map, Value};

/// One tool as `tools/list` shows it.
pub struct Tool {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    /// The input schema's properties and the required ones.
    pub input: fn() -> (Value, &'static [&'static str]),
    /// The structured content of a completed call.
    pub output: fn() -> Value,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    /// Which ability of the backend it needs (`None`: every backend has it).
    pub needs: Option<Needs>,
    /// Whether it waits for a worker to become ready (its answer is then streamed, with
    /// progress, and closing the stream cancels it).
    pub waits: bool,
}

/// An ability not every backend has.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Renewal,
    Suspension,
}

const WORKER_ID: &str = "The worker's id, as create or list returned it.";

fn worker_id() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": 64, "description": WORKER_ID, "x-mcp-header": "Worker-Id"})
}

fn ttl(what: &str) -> Value {
    json!({
        "type": ["string", "integer"],
        "description": format!("{what}: a duration such as \"90m\", \"2h\" or \"1h30m\", or whole seconds. Bounded by MAX_WORKER_TTL and the template's max_ttl."),
    })
}

fn metadata(what: &str) -> Value {
    json!({
        "type": "object",
        "additionalProperties": {"type": "string", "maxLength": 256},
        "maxProperties": 16,
        "description": what,
    })
}

/// A worker as every reply gives it.
pub fn worker_schema() -> Value {
    let text = json!({"type": "string"});
    json!({
        "type": "object",
        "properties": {
            "worker_id": text, "task": text, "a2a_url": text, "backend": text,
            "state": {"type": "string", "enum": ["starting", "running", "exited", "stopping", "suspended", "unknown"]},
            "created_at": text, "expires_at": text, "reason": text, "scope": text,
            "template": text, "pane_id": text, "session_id": text,
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["worker_id", "task", "a2a_url", "state"],
    })
}

fn one_worker() -> Value {
    json!({"type": "object", "properties": {"worker": worker_schema()}, "required": ["worker"]})
}

fn workspace_schema() -> Value {
    json!({"type": "object"})
}

fn nothing() -> (Value, &'static [&'static str]) {
    (json!({}), &[])
}

/// Every tool, in the order `tools/list` gives them (always the same: clients cache it).
pub const TOOLS: &[Tool] = &[
    Tool {
        name: "create",
        title: "Create a worker",
        description: "Starts one isolated AI-agent worker for a task and waits until it is ready. Returns the worker (its a2a_url) and its bearer token: talk to the worker directly over A2A at a2a_url with that token. The token is a secret, given once: pass it only to whoever talks to the worker, never into logs or shared text. One worker per task: a task that has one is refused with worker_exists (its worker_id is in the error).",
        input: || (json!({
            "task": {"type": "string", "minLength": 1, "maxLength": 256, "description": "What the worker is for; one worker per task.", "x-mcp-header": "Task"},
            "template": {"type": "string", "description": "A template from the templates tool (default: \"default\")."},
            "ttl": ttl("How long the worker may live before it is stopped (or suspended)"),
            "metadata": metadata("Labels to find the worker by later (list filters on them): up to 16 keys [a-z0-9._-], string values."),
        }), &["task"]),
        output: || json!({
            "type": "object",
            "properties": {"worker": worker_schema(), "token": {"type": "string", "description": "The worker's bearer token: a secret."}},
            "required": ["worker", "token"],
        }),
        read_only: false,
        destructive: false,
        idempotent: false,
        needs: None,
        waits: true,
    },
    Tool {
        name: "list",
        title: "List workers",
        description: "The workers this caller may see, oldest first, each with its state (starting, running, exited, stopping, suspended), a2a_url and expiry. Every filter given must match.",
        input: || (json!({
            "state": {"type": "string", "enum": ["starting", "running", "exited", "stopping", "suspended", "unknown"]},
            "task": {"type": "string", "maxLength": 256},
            "template": {"type": "string"},
            "metadata": metadata("Only workers with all of these labels."),
        }), &[]),
        output: || json!({
            "type": "object",
            "properties": {"workers": {"type": "array", "items": worker_schema()}},
            "required": ["workers"],
        }),
        read_only: true,
        destructive: false,
        idempotent: true,
        needs: None,
        waits: false,
    },
    Tool {
        name: "stop",
        title: "Stop a worker",
        description: "Stops and removes a worker for good. Its task workspace is kept unless workspace is \"delete\". A worker this caller cannot see is not_found.",
        input: || (json!({
            "worker_id": worker_id(),
            "workspace": {"type": "string", "enum": ["keep", "delete"], "description": "Whether the task's workspace goes too (default keep)."},
        }), &["worker_id"]),
        output: || json!({"type": "object", "properties": {"worker": worker_schema(), "workspace": workspace_schema()}}),
        read_only: false,
        destructive: true,
        idempotent: false,
        needs: None,
        waits: false,
    },
    Tool {
        name: "logs",
        title: "Read a worker's output",
        description: "The last lines of a worker's output (stdout and stderr), for seeing why it failed or what it is doing.",
        input: || (json!({
            "worker_id": worker_id(),
            "tail": {"type": "integer", "minimum": 1, "maximum": 10000, "description": "How many lines (default 200)."},
        }), &["worker_id"]),
        output: || json!({
            "type": "object",
            "properties": {"worker_id": {"type": "string"}, "text": {"type": "string"}, "truncated": {"type": "boolean"}},
            "required": ["worker_id", "text", "truncated"],
        }),
        read_only: true,
        destructive: false,
        idempotent: true,
        needs: None,
        waits: false,
    },
    Tool {
        name: "templates",
        title: "List worker templates",
        description: "The templates this caller may create workers from: what each starts, its limits and lifetime.",
        input: nothing,
        output: || json!({"type": "object", "properties": {"templates": {"type": "array", "items": {"type": "object"}}}, "required": ["templates"]}),
        read_only: true,
        destructive: false,
        idempotent: true,
        needs: None,
        waits: false,
    },
    Tool {
        name: "workspaces",
        title: "List task workspaces",
        description: "The task workspaces of this caller's scope (the files a task's workers share, which outlive them).",
        input: nothing,
        output: || json!({"type": "object", "properties": {"workspaces": {"type": "array", "items": workspace_schema()}}, "required": ["workspaces"]}),
        read_only: true,
        destructive: false,
        idempotent: true,
        needs: None,
        waits: false,
    },
    Tool {
        name: "delete_workspace",
        title: "Delete a task workspace",
        description: "Deletes a task's workspace and its files for good; refused while a worker of the task exists (stop it first).",
        input: || (json!({
            "task": {"type": "string", "minLength": 1, "maxLength": 256},
            "scope": {"type": "string", "description": "Admins only: the scope whose workspace it is."},
        }), &["task"]),
        output: || json!({"type": "object", "properties": {"workspace": workspace_schema()}}),
        read_only: false,
        destructive: true,
        idempotent: false,
        needs: None,
        waits: false,
    },
    Tool {
        name: "renew",
        title: "Renew a worker's lifetime",
        description: "The worker's expiry becomes now + ttl (say a busy worker is still in use). A worker without a TTL may be given one. Returns the worker with its new expires_at.",
        input: || (json!({"worker_id": worker_id(), "ttl": ttl("The new lifetime from now")}), &["worker_id", "ttl"]),
        output: one_worker,
        read_only: false,
        destructive: false,
        idempotent: true,
        needs: Some(Needs::Renewal),
        waits: false,
    },
    Tool {
        name: "suspend",
        title: "Suspend a worker",
        description: "Stops a running worker while keeping its files and identity (its id, URL and token); resume brings it back. Its lifetime does not tick while suspended.",
        input: || (json!({"worker_id": worker_id()}), &["worker_id"]),
        output: one_worker,
        read_only: false,
        destructive: false,
        idempotent: false,
        needs: Some(Needs::Suspension),
        waits: false,
    },
    Tool {
        name: "resume",
        title: "Resume a worker",
        description: "Runs a suspended worker again, with its files, id, URL and token, and waits until it is ready.",
        input: || (json!({"worker_id": worker_id()}), &["worker_id"]),
        output: one_worker,
        read_only: false,
        destructive: false,
        idempotent: false,
        needs: Some(Needs::Suspension),
        waits: true,
    },
];

impl Tool {
    /// The tool as `tools/list` shows it.
    pub fn describe(&self) -> Value {
        let (properties, required) = (self.input)();
        json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            },
            "outputSchema": output_schema((self.output)()),
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "destructiveHint": self.destructive,
                "idempotentHint": self.idempotent,
                "openWorldHint": false,
            },
        })
    }

    /// The arguments a 2026-07-28 client mirrors into `Mcp-Param-*` headers (so a gateway
    /// can route or limit by worker or task without reading the body): (argument, header name).
    pub fn mirrored(&self) -> Vec<(String, String)> {
        let (properties, _) = (self.input)();
        properties
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(name, schema)| {
                let header = schema.get("x-mcp-header")?.as_str()?;
                Some((name.clone(), header.to_string()))
            })
            .collect()
    }

    /// The control request's data part for a call with `arguments`: the arguments, and the
    /// operation named by the tool. An argument the schema does not name is refused here (the
    /// control layer ignores unknown fields; a tool's schema says it has none).
    pub fn data_part(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let (properties, _) = (self.input)();
        if let Some(unknown) = arguments
            .keys()
            .find(|k| properties.get(k.as_str()).is_none())
        {
            let shown: String = unknown.chars().take(64).collect();
            let known: Vec<&String> = properties
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k)
                .collect();
            return Err(match known.is_empty() {
                true => format!("{} takes no arguments, not {shown:?}", self.name),
                false => format!(
                    "{} has no argument {shown:?} (it takes {})",
                    self.name,
                    known
                        .iter()
                        .map(|k| k.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
        let mut part = arguments.clone();
        part.insert("operation".into(), Value::String(self.name.into()));
        Ok(Value::Object(part))
    }
}

/// A refusal's structured content: the code and one-line reason A2A gives.
fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string", "description": "worker_exists, not_found, capacity, invalid_request, ..."},
            "message": {"type": "string"},
            "worker_id": {"type": "string"},
            "state": {"type": "string"},
        },
        "required": ["code", "message"],
    })
}

/// A completed call's schema, widened to a refusal's: a tool error's structured content is
/// `{"error": ...}` (clients that check structured content against the schema even for an
/// error find it valid).
fn output_schema(mut success: Value) -> Value {
    success["properties"]["error"] = error_schema();
    if let Some(required) = success.as_object_mut().and_then(|o| o.remove("required")) {
        success["anyOf"] = json!([{"required": required}, {"required": ["error"]}]);
    }
    success
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    TOOLS.iter().find(|t| t.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{parse_request, ControlRequest};

    #[test]
    fn every_tool_is_an_operation_the_control_layer_reads() {
        for tool in TOOLS {
            let (_, required) = (tool.input)();
            let mut args = Map::new();
            for r in required {
                let v = match *r {
                    "ttl" => json!("1h"),
                    _ => json!("w-1"),
                };
                args.insert(r.to_string(), v);
            }
            let part = tool.data_part(&args).unwrap();
            let request = parse_request([&part]).unwrap_or_else(|e| panic!("{}: {e:?}", tool.name));
            assert_eq!(request.operation(), tool.name);
            let described = tool.describe();
            assert_eq!(described["inputSchema"]["type"], "object");
            assert_eq!(described["outputSchema"]["type"], "object");
        }
        assert!(matches!(
            parse_request([&find("list").unwrap().data_part(&Map::new()).unwrap()]),
            Ok(ControlRequest::List { .. })
        ));
    }

    #[test]
    fn an_argument_the_schema_does_not_name_is_refused_with_the_ones_it_does() {
        let mut args = Map::new();
        args.insert("tsak".into(), json!("x"));
        let why = find("create").unwrap().data_part(&args).unwrap_err();
        assert!(why.contains("\"tsak\"") && why.contains("task"), "{why}");
        let why = find("templates").unwrap().data_part(&args).unwrap_err();
        assert!(why.contains("takes no arguments"), "{why}");
    }
}
