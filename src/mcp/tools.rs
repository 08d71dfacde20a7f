//! The tools: one per control operation, as data (`tools.json`: name, title, what an agent
//! should know, the input and output schemas, hints, which ability of the backend each needs
//! and whether it waits for a worker), read once; and a call's arguments turned into the same
//! control request an A2A data part makes — read and checked by the same code, so every
//! refusal is the one A2A gives, with its code.

use std::sync::OnceLock;

use serde_json::{json, Map, Value};

/// The catalogue, compiled in.
const CATALOGUE: &str = include_str!("tools.json");

/// One tool.
pub struct Tool {
    pub name: String,
    /// The tool as `tools/list` shows it.
    pub described: Value,
    /// Which ability of the backend it needs (`None`: every backend has it).
    pub needs: Option<Needs>,
    /// Whether it waits for a worker to become ready (its answer is then streamed, with
    /// progress, and closing the stream cancels it).
    pub waits: bool,
}

/// An ability not every backend has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    Renewal,
    Suspension,
    Copies,
}

/// Every tool, in the order `tools/list` gives them (always the same: clients cache it).
pub fn all() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| read(CATALOGUE).unwrap_or_else(|why| panic!("src/mcp/tools.json: {why}")))
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<&'static Tool> {
    all().iter().find(|t| t.name == name)
}

/// Reads a catalogue: each `"@name"` string stands for `definitions.name`.
fn read(text: &str) -> Result<Vec<Tool>, String> {
    let doc: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let definitions = doc["definitions"].as_object().cloned().unwrap_or_default();
    let Value::Array(tools) = expand(doc["tools"].clone(), &definitions, 0)? else {
        return Err("tools is not an array".into());
    };
    let error = definitions
        .get("error")
        .cloned()
        .ok_or("no definitions.error")?;
    tools
        .into_iter()
        .map(|mut t| {
            let name = t["name"]
                .as_str()
                .ok_or("a tool without a name")?
                .to_string();
            let needs = match t["needs"].as_str() {
                None => None,
                Some("renewal") => Some(Needs::Renewal),
                Some("suspension") => Some(Needs::Suspension),
                Some("copies") => Some(Needs::Copies),
                Some(other) => return Err(format!("{name}: needs {other:?}")),
            };
            let waits = t["waits"].as_bool().unwrap_or(false);
            let object = t.as_object_mut().ok_or("a tool is not an object")?;
            object.remove("needs");
            object.remove("waits");
            let output = object.remove("outputSchema").unwrap_or_else(|| json!({}));
            object.insert("outputSchema".into(), widened(output, &error));
            Ok(Tool {
                name,
                described: t,
                needs,
                waits,
            })
        })
        .collect()
}

/// `value` with each `"@name"` replaced by its definition (themselves expanded).
fn expand(value: Value, definitions: &Map<String, Value>, depth: u32) -> Result<Value, String> {
    if depth > 8 {
        return Err("definitions nest too deep".into());
    }
    Ok(match value {
        Value::String(s) if s.starts_with('@') => {
            let d = definitions
                .get(&s[1..])
                .ok_or_else(|| format!("no definition {s}"))?;
            expand(d.clone(), definitions, depth + 1)?
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| expand(v, definitions, depth))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.into_iter()
                .map(|(k, v)| Ok((k, expand(v, definitions, depth)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other,
    })
}

/// A completed call's schema, widened to a refusal's: a tool error's structured content is
/// `{"error": ...}` (clients that check structured content against the schema even for an
/// error find it valid).
fn widened(mut success: Value, error: &Value) -> Value {
    success["properties"]["error"] = error.clone();
    if let Some(required) = success.as_object_mut().and_then(|o| o.remove("required")) {
        success["anyOf"] = json!([{"required": required}, {"required": ["error"]}]);
    }
    success
}

impl Tool {
    /// Whether the backend has what the tool needs (renew, suspend and resume are not every
    /// backend's).
    pub fn available(&self, abilities: &crate::backend::Abilities<'_>) -> bool {
        match self.needs {
            None => true,
            Some(Needs::Renewal) => abilities.renewal.is_some(),
            Some(Needs::Suspension) => abilities.suspension.is_some(),
            Some(Needs::Copies) => abilities.copies.is_some(),
        }
    }

    fn properties(&self) -> Option<&Map<String, Value>> {
        self.described["inputSchema"]["properties"].as_object()
    }

    /// The arguments a 2026-07-28 client mirrors into `Mcp-Param-*` headers (so a gateway
    /// can route or limit by worker or task without reading the body): (argument, header name).
    pub fn mirrored(&self) -> Vec<(&str, &str)> {
        self.properties()
            .into_iter()
            .flatten()
            .filter_map(|(name, schema)| {
                Some((name.as_str(), schema.get("x-mcp-header")?.as_str()?))
            })
            .collect()
    }

    /// The control request's data part for a call with `arguments`: the arguments, and the
    /// operation named by the tool. An argument the schema does not name is refused here (the
    /// control layer ignores unknown fields; a tool's schema says it has none).
    pub fn data_part(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let known: Vec<&str> = self
            .properties()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        if let Some(unknown) = arguments.keys().find(|k| !known.contains(&k.as_str())) {
            let shown: String = unknown.chars().take(64).collect();
            return Err(match known.is_empty() {
                true => format!("{} takes no arguments, not {shown:?}", self.name),
                false => format!(
                    "{} has no argument {shown:?} (it takes {})",
                    self.name,
                    known.join(", ")
                ),
            });
        }
        let mut part = arguments.clone();
        part.insert("operation".into(), Value::String(self.name.clone()));
        Ok(Value::Object(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{parse_request, ControlRequest};

    #[test]
    fn every_tool_is_an_operation_the_control_layer_reads() {
        assert_eq!(all().len(), 11);
        for tool in all() {
            let required = tool.described["inputSchema"]["required"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let mut args = Map::new();
            for r in required.iter().filter_map(Value::as_str) {
                let v = match r {
                    "ttl" => json!("1h"),
                    _ => json!("w-1"),
                };
                args.insert(r.to_string(), v);
            }
            let part = tool.data_part(&args).unwrap();
            let request = parse_request([&part]).unwrap_or_else(|e| panic!("{}: {e:?}", tool.name));
            assert_eq!(request.operation(), tool.name);
            let d = &tool.described;
            assert_eq!(d["inputSchema"]["type"], "object");
            assert_eq!(d["outputSchema"]["type"], "object");
            assert!(d["title"].is_string() && d["description"].is_string());
            assert!(
                !d.to_string().contains("\"@"),
                "{}: a definition left unexpanded",
                tool.name
            );
        }
        assert!(matches!(
            parse_request([&find("list").unwrap().data_part(&Map::new()).unwrap()]),
            Ok(ControlRequest::List { .. })
        ));
        assert_eq!(
            find("stop").unwrap().mirrored(),
            [("worker_id", "Worker-Id")]
        );
        assert_eq!(find("create").unwrap().mirrored(), [("task", "Task")]);
        assert_eq!(
            find("copy_workspace").map(|t| (t.needs, t.mirrored())),
            Some((Some(Needs::Copies), vec![("task", "Task")]))
        );
        assert_eq!(
            find("resume").map(|t| (t.needs, t.waits)),
            Some((Some(Needs::Suspension), true))
        );
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

    #[test]
    fn a_catalogue_naming_a_definition_it_lacks_is_refused() {
        let bad =
            r#"{"definitions": {"error": {}}, "tools": [{"name": "x", "inputSchema": "@nope"}]}"#;
        assert!(read(bad).is_err_and(|e| e.contains("@nope")));
    }
}
