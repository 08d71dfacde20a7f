//! Talking to a running controller as a client: one `SendMessage` carrying a control request,
//! and its reply read the way the contract defines it (a completed task's data, or a failed or
//! rejected task's `{"error": {"code", "message"}}`).

use std::fmt;
use std::io::{BufRead, BufReader};
use std::time::Duration;

use serde_json::{json, Value};

use crate::token::uuid_v4;

/// Why a control call did not complete. `Display` is the one line printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The controller could not be reached or answered something else than JSON-RPC.
    Transport(String),
    /// HTTP 401: the token was refused.
    Unauthorized(String),
    /// A JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The operation was rejected or failed: the contract's error code and message.
    Operation { code: String, message: String },
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Transport(why) => write!(f, "unreachable: {why}"),
            CallError::Unauthorized(why) => write!(f, "unauthorized: {why}"),
            CallError::Rpc { code, message } => write!(f, "json-rpc error {code}: {message}"),
            CallError::Operation { code, message } => write!(f, "{code}: {message}"),
        }
    }
}

pub struct Client {
    endpoint: String,
    token: String,
    agent: ureq::Agent,
}

impl Client {
    /// A client of the controller at `base_url` (its `A2A_PUBLIC_URL`).
    /// `timeout`: for the whole call; `None` for a stream that runs until it is ended.
    pub fn new(base_url: &str, token: String, timeout: Option<Duration>) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(timeout)
            .timeout_connect(Some(Duration::from_secs(5)))
            .max_redirects(0)
            .user_agent(concat!(
                "a2a-worker-controller-cli/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .new_agent();
        Client {
            endpoint: format!("{}/a2a", base_url.trim_end_matches('/')),
            token,
            agent,
        }
    }

    /// Sends one control request; the completed task's reply data.
    pub fn control(&self, request: Value) -> Result<Value, CallError> {
        let mut response = self.post("SendMessage", request)?;
        self.read_json(&mut response)
    }

    /// The same, streamed (`SendStreamingMessage`): each progress step the controller reports
    /// goes to `step` as it happens.
    pub fn control_streaming(
        &self,
        request: Value,
        step: &mut dyn FnMut(&str),
    ) -> Result<Value, CallError> {
        self.stream(request, &mut |status| {
            if let Some(text) = status["message"]["parts"][0]["text"].as_str() {
                step(text);
            }
        })
    }

    /// A `watch`: each worker event goes to `on_event` as it arrives, until the watch ends
    /// (canceled, cut off) or the process does.
    pub fn watch(
        &self,
        request: Value,
        on_event: &mut dyn FnMut(&Value),
    ) -> Result<Value, CallError> {
        self.stream(request, &mut |status| {
            if let Some(event) = status.pointer("/message/parts/1/data/event") {
                on_event(event);
            }
        })
    }

    /// One streamed operation: each WORKING status goes to `working`; the result is the
    /// completed task's data.
    fn stream(&self, request: Value, working: &mut dyn FnMut(&Value)) -> Result<Value, CallError> {
        let mut response = self.post("SendStreamingMessage", request)?;
        let is_events = response
            .headers()
            .get("Content-Type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !is_events {
            // A refusal before any stream (401), or a controller without streaming.
            return self.read_json(&mut response);
        }
        let transport = |e: std::io::Error| CallError::Transport(format!("{}: {e}", self.endpoint));
        let reader = BufReader::new(response.body_mut().as_reader());
        let mut result = None;
        for line in reader.lines() {
            let line = line.map_err(transport)?;
            let Some(data) = line.strip_prefix("data:") else {
                continue;
            };
            let event: Value = serde_json::from_str(data.trim()).map_err(|_| {
                CallError::Transport(format!("{} sent an event that is not JSON", self.endpoint))
            })?;
            if event.get("error").is_some() {
                return read_reply(&event);
            }
            let r = &event["result"];
            if let Some(a) = r.get("artifactUpdate") {
                result = Some(a["artifact"]["parts"][0]["data"].clone());
            }
            let status = r
                .get("statusUpdate")
                .map(|u| &u["status"])
                .or_else(|| r.get("task").map(|t| &t["status"]));
            let Some(status) = status else { continue };
            match status["state"].as_str() {
                Some("TASK_STATE_WORKING") => working(status),
                Some("TASK_STATE_COMPLETED") => {
                    return result.ok_or_else(|| {
                        CallError::Transport("the stream ended without a result".into())
                    })
                }
                Some(_) => return read_reply(&json!({"result": {"task": {"status": status}}})),
                None => {}
            }
        }
        Err(CallError::Transport(format!(
            "{}: the stream ended before the operation did",
            self.endpoint
        )))
    }

    fn post(
        &self,
        method: &str,
        request: Value,
    ) -> Result<ureq::http::Response<ureq::Body>, CallError> {
        let id = uuid_v4().map_err(|e| CallError::Transport(format!("no message id: {e}")))?;
        let body = json!({
            "jsonrpc": "2.0", "id": 1, "method": method,
            "params": {"message": {"messageId": id, "role": "ROLE_USER",
                "parts": [{"data": request}]}}
        });
        let auth = format!("Bearer {}", self.token);
        self.agent
            .post(&self.endpoint)
            .header("Authorization", &auth)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| CallError::Transport(format!("{}: {e}", self.endpoint)))
    }

    fn read_json(
        &self,
        response: &mut ureq::http::Response<ureq::Body>,
    ) -> Result<Value, CallError> {
        let status = response.status().as_u16();
        let text = response
            .body_mut()
            .with_config()
            .limit(64 << 20)
            .read_to_string()
            .map_err(|e| CallError::Transport(format!("{}: {e}", self.endpoint)))?;
        let reply: Value = serde_json::from_str(&text).map_err(|_| {
            CallError::Transport(format!(
                "{} answered HTTP {status} without JSON",
                self.endpoint
            ))
        })?;
        if status == 401 {
            let message = reply["message"].as_str().unwrap_or("the token was refused");
            return Err(CallError::Unauthorized(message.to_string()));
        }
        read_reply(&reply)
    }
}

/// The data of a completed control task, or why it is not one.
pub fn read_reply(reply: &Value) -> Result<Value, CallError> {
    if let Some(e) = reply.get("error") {
        return Err(CallError::Rpc {
            code: e["code"].as_i64().unwrap_or(0),
            message: e["message"].as_str().unwrap_or("").to_string(),
        });
    }
    let task = &reply["result"]["task"];
    match task["status"]["state"].as_str() {
        Some("TASK_STATE_COMPLETED") => Ok(task["artifacts"][0]["parts"][0]["data"].clone()),
        Some(_) => {
            let error = task["status"]["message"]["parts"]
                .as_array()
                .and_then(|parts| parts.iter().find_map(|p| p["data"].get("error")))
                .cloned()
                .unwrap_or(Value::Null);
            Err(CallError::Operation {
                code: error["code"].as_str().unwrap_or("unknown").to_string(),
                message: error["message"]
                    .as_str()
                    .unwrap_or("the operation did not complete")
                    .to_string(),
            })
        }
        None => Err(CallError::Transport(
            "the reply is not an A2A task".to_string(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_the_contract_defines_them() {
        let done = json!({"result": {"task": {"status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"parts": [{"data": {"workers": []}}]}]}}});
        assert_eq!(read_reply(&done), Ok(json!({"workers": []})));
        let failed = json!({"result": {"task": {"status": {"state": "TASK_STATE_FAILED",
            "message": {"parts": [{"text": "x"}, {"data": {"error": {"code": "worker_exists", "message": "the task already has worker w1 (running)"}}}]}}}}});
        assert_eq!(
            read_reply(&failed).unwrap_err().to_string(),
            "worker_exists: the task already has worker w1 (running)"
        );
        let rpc = json!({"error": {"code": -32602, "message": "bad params"}});
        assert_eq!(
            read_reply(&rpc).unwrap_err().to_string(),
            "json-rpc error -32602: bad params"
        );
    }
}
