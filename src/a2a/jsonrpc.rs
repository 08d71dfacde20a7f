//! The JSON-RPC 2.0 binding (specification §9): one endpoint, the method named in the
//! envelope, each answer a JSON-RPC response object; streaming methods answer server-sent
//! events, each a response whose `result` is a `StreamResponse`. It only translates: the
//! operations are [`Service`]'s.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use super::decode::{envelope, ServiceParams};
use super::service::Service;
use super::stream::{Frame, OneEvent, StreamResponse, TaskEvents};
use super::types::{response_err, RpcError, Task};
use crate::control::Caller;
use crate::http::Streamer;

/// What a binding answers: a JSON body, or a stream of server-sent events.
pub enum Answer {
    /// A JSON-RPC response object.
    Json(String),
    /// Server-sent events (`text/event-stream`), each a JSON-RPC response.
    Events(Arc<dyn Streamer>),
    /// The task is another replica's: the request goes there as it came, and this is the
    /// answer should that replica not answer.
    Relay(std::net::SocketAddr, Relayed),
}

/// What a relay that got no answer is answered instead: the refusal for a reason.
pub struct Relayed(Box<dyn Fn(&str) -> Answer + Send>);

impl Relayed {
    /// The answer when the replica did not answer, `why`.
    pub fn unanswered(&self, why: &str) -> Answer {
        (self.0)(why)
    }
}

pub struct JsonRpc {
    service: Arc<Service>,
}

impl JsonRpc {
    pub fn new(service: Arc<Service>) -> JsonRpc {
        JsonRpc { service }
    }

    /// Answers one JSON-RPC request body: a JSON-RPC response object as the JSON text to send,
    /// or, for the streaming methods, a stream of server-sent events (each one a JSON-RPC
    /// response; an error before the stream starts is its one event).
    pub fn handle(&self, caller: &Caller, params: &ServiceParams, body: &[u8]) -> Answer {
        let request: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return Answer::Json(
                    response_err(&Value::Null, &RpcError::parse_error(e)).to_string(),
                )
            }
        };
        let (id, method, rpc_params) = match envelope(&request) {
            Ok(parts) => parts,
            Err((id, e)) => return Answer::Json(response_err(&id, &e).to_string()),
        };
        let streaming = matches!(method, "SendStreamingMessage" | "SubscribeToTask");
        let refuse = |e: RpcError| {
            let text = response_err(&id, &e).to_string();
            if streaming {
                Answer::Events(Arc::new(OneEvent(text)))
            } else {
                Answer::Json(text)
            }
        };
        if let Err(e) = self.service.check(params) {
            return refuse(e);
        }
        let addressed = rpc_params
            .filter(|_| self.service.relays(params))
            .and_then(|p| addressed_task(method, p));
        if let Some(task_id) = addressed {
            match self.service.holder(params, &task_id) {
                Ok(None) => {}
                Ok(Some(addr)) => return self.relayed(addr, task_id, id, streaming),
                Err(e) => return refuse(e),
            }
        }
        let need = || rpc_params.ok_or_else(|| RpcError::invalid_params("params are required"));
        if streaming {
            let stream = need().and_then(|p| match method {
                "SendStreamingMessage" => self.service.send_streaming(caller, p),
                _ => self.service.subscribe(caller, p),
            });
            return match stream {
                Ok(stream) => Answer::Events(Arc::new(TaskEvents::new(
                    Enveloped { id: id.clone() },
                    stream,
                ))),
                Err(e) => refuse(e),
            };
        }
        let reply = self.unary(caller, params, method, &id, rpc_params);
        Answer::Json(reply.unwrap_or_else(|e| response_err(&id, &e).to_string()))
    }

    /// A call on a task another replica holds: relayed there; if it does not answer, the
    /// error says so (as one event, for a streaming method).
    fn relayed(
        &self,
        addr: std::net::SocketAddr,
        task_id: String,
        id: Value,
        streaming: bool,
    ) -> Answer {
        let service = Arc::clone(&self.service);
        Answer::Relay(
            addr,
            Relayed(Box::new(move |why| {
                let e = service.holder_unanswered(&task_id, addr, why);
                let text = response_err(&id, &e).to_string();
                if streaming {
                    Answer::Events(Arc::new(OneEvent(text)))
                } else {
                    Answer::Json(text)
                }
            })),
        )
    }

    /// A method answered at once: its JSON-RPC response text, or its error.
    fn unary(
        &self,
        caller: &Caller,
        params: &ServiceParams,
        method: &str,
        id: &Value,
        rpc_params: Option<&Map<String, Value>>,
    ) -> Result<String, RpcError> {
        let need = || rpc_params.ok_or_else(|| RpcError::invalid_params("params are required"));
        // One arm per method: what it calls, and how its result is framed.
        match method {
            "SendMessage" => need()
                .and_then(|p| self.service.send_message(caller, p))
                .and_then(|task| reply(id, &TaskResult { task: &task }, task.data_bytes())),
            "GetTask" => need()
                .and_then(|p| self.service.get_task(caller, p))
                .and_then(|task| reply(id, &task, task.data_bytes())),
            "ListTasks" => self
                .service
                .list_tasks_everywhere(caller, params, rpc_params.unwrap_or(&Map::new()))
                .and_then(|page| reply(id, &page, page.data_bytes())),
            "CancelTask" => need()
                .and_then(|p| self.service.cancel_task(caller, p))
                .and_then(|task: Task| reply(id, &task, task.data_bytes())),
            "CreateTaskPushNotificationConfig" => need()
                .and_then(|p| self.service.push_create(caller, p))
                .and_then(|c| reply(id, &c, 0)),
            "GetTaskPushNotificationConfig" => need()
                .and_then(|p| self.service.push_get(caller, p))
                .and_then(|c| reply(id, &c, 0)),
            "ListTaskPushNotificationConfigs" => need()
                .and_then(|p| self.service.push_list(caller, p))
                .and_then(|l| reply(id, &l, 0)),
            "DeleteTaskPushNotificationConfig" => need()
                .and_then(|p| self.service.push_delete(caller, p))
                .and_then(|e| reply(id, &e, 0)),
            "GetExtendedAgentCard" => reply(id, self.service.extended_card(), 0),
            other => Err(RpcError::method_not_found(other)),
        }
    }
}

/// The task a method works on, for the methods that name one (where it is held decides who
/// answers); a malformed one is left to the method to refuse.
fn addressed_task(method: &str, params: &Map<String, Value>) -> Option<String> {
    if matches!(method, "SendMessage" | "SendStreamingMessage") {
        return super::decode::message_task(params);
    }
    let names: &[&str] = match method {
        "GetTask" | "CancelTask" | "SubscribeToTask" => &["id", "taskId", "task_id"],
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => &["taskId", "task_id"],
        _ => return None,
    };
    names
        .iter()
        .find_map(|n| params.get(*n))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// JSON-RPC's framing of a stream event: a response object with the request's id.
struct Enveloped {
    id: Value,
}

impl Frame for Enveloped {
    fn frame_into(&self, event: &StreamResponse<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        crate::json::append_sized(&Reply::new(&self.id, event), event.data_bytes(), out)
            .map_err(|e| e.to_string())
    }
}

/// A JSON-RPC success response.
#[derive(Serialize)]
struct Reply<'a, T: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

impl<'a, T: Serialize + ?Sized> Reply<'a, T> {
    fn new(id: &'a Value, result: &'a T) -> Self {
        Reply {
            jsonrpc: "2.0",
            id,
            result,
        }
    }
}

/// `SendMessage`'s result.
#[derive(Serialize)]
struct TaskResult<'a> {
    task: &'a Task,
}

/// The response text, in one buffer of about its final size: `hint` is what the result's
/// reply data adds to a small reply ([`crate::json`]).
fn reply<T: Serialize + ?Sized>(id: &Value, result: &T, hint: usize) -> Result<String, RpcError> {
    crate::json::to_string_sized(&Reply::new(id, result), hint)
        .map_err(|e| RpcError::internal(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::stream::StatusUpdateEvent;
    use crate::a2a::types::{TaskState, TaskStatus};
    use serde_json::json;

    #[test]
    fn a_written_event_is_framed_as_its_serialized_self() {
        let status = TaskStatus {
            state: TaskState::Working,
            timestamp: "2026-12-05T10:00:00.123Z".into(),
            message: None,
        };
        let event = StreamResponse::StatusUpdate(StatusUpdateEvent {
            task_id: "t",
            context_id: "c",
            status: &status,
        });
        let text = serde_json::value::to_raw_value(&event).unwrap();
        for id in [json!(7), json!("a \"quoted\" id"), Value::Null] {
            let frame = Enveloped { id };
            let (mut built, mut written) = (Vec::new(), Vec::new());
            frame.frame_into(&event, &mut built).unwrap();
            frame
                .frame_into(&StreamResponse::Written(&text), &mut written)
                .unwrap();
            assert_eq!(String::from_utf8(written), String::from_utf8(built));
        }
    }
}
