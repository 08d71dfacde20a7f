//! One `tools/call`: read into the control request an A2A data part would make, run for the
//! caller, and answered as a tool result — its reply data as structured content (with a
//! create's token, given once), or a refusal as a tool error carrying the same code and
//! one-line reason A2A gives.
//!
//! A call that waits for a worker (create, resume) is answered as an SSE stream when the
//! client takes one: a progress notification per step when it sent a progress token, then
//! the result. The stream's client going away cancels the call (2026-07-28 says closing the
//! stream is the cancellation; a 2025-11-25 `notifications/cancelled` does the same): the
//! operation cannot be cut off halfway in the engine, so a create whose answer nobody will
//! read has its worker stopped as soon as it exists — never a worker whose token was lost.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{json, Map, Value};

use super::era::Era;
use super::exchange::{Answer, Registered};
use super::tools::{self, Tool};
use super::wire::{self, RpcError};
use crate::backend::Progress;
use crate::control::{parse_request, Caller, Control, ControlError, ControlRequest, Outcome};
use crate::http::{Sink, Streamer};

/// How often a waiting stream looks whether its client is still there.
const TICK: Duration = Duration::from_millis(250);

/// What a result's object ends with in its era, as JSON text: 2026-07-28's `resultType` and
/// server name (`,"resultType":...`), nothing in the handshake revisions.
pub type Stamp = Arc<str>;

/// A tool call, read.
pub struct Call {
    control: Arc<Control>,
    caller: Caller,
    tool: &'static Tool,
    request: Result<ControlRequest, ControlError>,
    id: Value,
    progress_token: Option<Value>,
    /// What the operation's log line names as its task: the call's JSON-RPC id.
    task_id: String,
}

impl Call {
    /// The call in `params`. An unknown tool, or arguments that are not an object, are
    /// protocol errors; arguments the tool does not take, or values the operation refuses,
    /// are the tool's own errors (an agent reads them and tries again).
    pub fn read(
        control: &Arc<Control>,
        caller: &Caller,
        _era: &Era,
        id: &Value,
        params: &Map<String, Value>,
    ) -> Result<Call, RpcError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::params("tools/call needs the tool's name"))?;
        let abilities = control.backend().abilities();
        let tool = tools::find(name)
            .filter(|t| t.available(&abilities))
            .ok_or_else(|| {
                let shown: String = name.chars().take(64).collect();
                RpcError::params(format!("Unknown tool: {shown:?} (tools/list names them)"))
            })?;
        let arguments = match params.get("arguments") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(a)) => a.clone(),
            Some(_) => return Err(RpcError::params("arguments must be an object")),
        };
        let request = tool
            .data_part(&arguments)
            .map_err(ControlError::invalid)
            .and_then(|part| parse_request([&part]));
        let progress_token = params
            .get("_meta")
            .and_then(|m| m.get("progressToken"))
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        Ok(Call {
            control: Arc::clone(control),
            caller: caller.clone(),
            tool,
            request,
            task_id: format!(
                "mcp:{}",
                id.to_string().chars().take(80).collect::<String>()
            ),
            id: id.clone(),
            progress_token,
        })
    }

    /// Whether it waits for a worker (and can be cancelled while it does).
    pub fn waits(&self) -> bool {
        self.tool.waits
    }

    /// Runs the call: streamed when it waits and the client takes a stream, else answered
    /// once it is done. `cancel` is raised by a `notifications/cancelled` naming it.
    pub fn run(
        self,
        accepts_events: bool,
        cancel: Arc<AtomicBool>,
        registered: Option<Registered>,
        stamp: Stamp,
    ) -> Answer {
        if self.tool.waits && accepts_events && self.request.is_ok() {
            return Answer::Events(Arc::new(Streamed {
                job: Mutex::new(Some(Job {
                    call: self,
                    cancel,
                    registered,
                    stamp,
                })),
            }));
        }
        let outcome = self.execute(Progress::default());
        drop(registered);
        if cancel.load(Ordering::SeqCst) {
            self.undo(&outcome);
            let e = RpcError::new(
                200,
                wire::INTERNAL_ERROR,
                "the call was cancelled by its client",
            );
            return Answer::Json {
                status: 200,
                body: e.response(&self.id),
                session: None,
            };
        }
        Answer::Text {
            status: 200,
            body: wire::result_text(&self.id, &tool_result(&outcome, &stamp)),
        }
    }

    fn execute(&self, progress: Progress) -> Outcome {
        self.control
            .execute_reporting(&self.caller, self.request.clone(), &self.task_id, progress)
    }

    /// A cancelled create's worker is stopped (nobody got its token); anything else stands.
    fn undo(&self, outcome: &Outcome) {
        let (Outcome::Completed { data, .. }, Ok(ControlRequest::Create { task, .. })) =
            (outcome, &self.request)
        else {
            return;
        };
        let Some(worker_id) = serde_json::from_str::<Value>(data.get())
            .ok()
            .and_then(|d| d["worker"]["worker_id"].as_str().map(str::to_string))
        else {
            return;
        };
        log::info!(
            "mcp: the client of create {task:?} went away or cancelled it: its worker {worker_id} is stopped"
        );
        let stop = ControlRequest::Stop {
            worker_id,
            delete_workspace: false,
        };
        self.control.execute(&self.caller, Ok(stop), &self.task_id);
    }
}

/// A completed operation as a tool result's JSON text (with a create's token in its structured
/// content), or a refusal as a tool error, ending with the era's `stamp`. Written as text: a
/// list's reply data goes out as it came, once as structured content and once escaped as the
/// text content, never parsed and written again (the token is the one thing added, to a
/// create's one small worker).
pub fn tool_result(outcome: &Outcome, stamp: &str) -> String {
    let (structured, text, is_error) = match outcome {
        Outcome::Completed { data, token } => {
            let structured = match token {
                None => data.get().to_string(),
                Some(token) => {
                    let mut reply: Value =
                        serde_json::from_str(data.get()).unwrap_or_else(|_| json!({}));
                    if let Value::Object(o) = &mut reply {
                        o.insert("token".into(), Value::String(token.expose().to_string()));
                    }
                    reply.to_string()
                }
            };
            let text = Value::String(structured.clone()).to_string();
            (structured, text, false)
        }
        Outcome::Rejected(e) | Outcome::Failed(e) => {
            let code = serde_json::to_value(e.code).unwrap_or(Value::Null);
            let code = code.as_str().unwrap_or("internal");
            let text = Value::String(format!("{code}: {}", e.message)).to_string();
            (json!({ "error": e }).to_string(), text, true)
        }
    };
    let mut out = String::with_capacity(structured.len() + text.len() + stamp.len() + 80);
    out.push_str("{\"content\":[{\"type\":\"text\",\"text\":");
    out.push_str(&text);
    out.push_str("}],\"structuredContent\":");
    out.push_str(&structured);
    out.push_str(if is_error {
        ",\"isError\":true"
    } else {
        ",\"isError\":false"
    });
    out.push_str(stamp);
    out.push('}');
    out
}

/// Where the operation's thread and the stream meet: the steps on their way to the stream,
/// the outcome, and whether the stream is gone — exactly one of the two undoes a create whose
/// answer cannot be delivered.
#[derive(Default)]
struct Meeting {
    /// Steps reported and not written yet.
    steps: VecDeque<String>,
    /// The stream has ended without the answer (its client went, or cancelled).
    gone: bool,
    /// The operation's outcome, until the stream takes it.
    done: Option<Outcome>,
    /// The operation's thread has ended (with or without an outcome).
    ended: bool,
}

/// A [`Meeting`] and the condition both sides wait on.
#[derive(Default)]
struct Place {
    meeting: Mutex<Meeting>,
    changed: Condvar,
}

impl Place {
    fn lock(&self) -> MutexGuard<'_, Meeting> {
        self.meeting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut Meeting)) {
        change(&mut self.lock());
        self.changed.notify_all();
    }
}

/// What a streamed call runs with.
struct Job {
    call: Call,
    cancel: Arc<AtomicBool>,
    registered: Option<Registered>,
    stamp: Stamp,
}

/// A waiting call as an SSE stream.
struct Streamed {
    job: Mutex<Option<Job>>,
}

impl Streamer for Streamed {
    fn run(&self, sink: &mut dyn Sink) {
        let Some(Job {
            call,
            cancel,
            registered,
            stamp,
        }) = self.job.lock().ok().and_then(|mut j| j.take())
        else {
            return;
        };
        let call = Arc::new(call);
        let place = Arc::new(Place::default());
        let progress = match &call.progress_token {
            Some(_) => {
                let place = Arc::clone(&place);
                Progress::new(move |step| place.update(|m| m.steps.push_back(step.to_string())))
            }
            None => Progress::default(),
        };
        let worker = {
            let (call, place) = (Arc::clone(&call), Arc::clone(&place));
            move || {
                let outcome = call.execute(progress);
                let mut m = place.lock();
                m.ended = true;
                if m.gone {
                    drop(m);
                    call.undo(&outcome);
                } else {
                    m.done = Some(outcome);
                    drop(m);
                    place.changed.notify_all();
                }
            }
        };
        if let Err(e) = std::thread::Builder::new()
            .name("mcp-call".into())
            .spawn(worker)
        {
            let e = RpcError::new(
                200,
                wire::INTERNAL_ERROR,
                format!("no thread for the call: {e}"),
            );
            sink.send(&wire::event(&e.response(&call.id)));
            return;
        }
        let delivered = follow(&call, sink, &cancel, &place, &stamp);
        drop(registered);
        if !delivered {
            let mut m = place.lock();
            m.gone = true;
            if let Some(outcome) = m.done.take() {
                drop(m);
                call.undo(&outcome);
            }
        }
    }
}

/// What the stream writes next.
enum Next {
    Step(String),
    Done(Outcome),
    /// Nothing yet: look whether the client is still there.
    Tick,
    /// The operation's thread ended without an outcome (it panicked).
    Lost,
}

/// Writes each step as a progress notification, then the result; `false` when the stream
/// ended without the result delivered (the client went, or the call was cancelled).
fn follow(
    call: &Call,
    sink: &mut dyn Sink,
    cancel: &AtomicBool,
    place: &Place,
    stamp: &Stamp,
) -> bool {
    let mut steps = 0u64;
    loop {
        let next = {
            let mut m = place.lock();
            if m.steps.is_empty() && m.done.is_none() && !m.ended {
                m = place
                    .changed
                    .wait_timeout(m, TICK)
                    .map(|(m, _)| m)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            match (m.steps.pop_front(), m.done.take()) {
                (Some(step), done) => {
                    m.done = done;
                    Next::Step(step)
                }
                (None, Some(outcome)) => Next::Done(outcome),
                (None, None) if m.ended => Next::Lost,
                (None, None) => Next::Tick,
            }
        };
        match next {
            Next::Step(step) => {
                steps += 1;
                let note = wire::notification(
                    "notifications/progress",
                    json!({"progressToken": call.progress_token, "progress": steps, "message": step}),
                );
                if !sink.send(&wire::event(&note)) {
                    return false;
                }
            }
            Next::Done(outcome) => {
                let body = wire::result_text(&call.id, &tool_result(&outcome, stamp));
                if sink.send(&wire::event_text(&body)) {
                    return true;
                }
                // Not delivered: the outcome goes back to be undone.
                place.lock().done = Some(outcome);
                return false;
            }
            Next::Tick => {
                if cancel.load(Ordering::SeqCst) || sink.gone() {
                    return false;
                }
            }
            Next::Lost => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ErrorCode;
    use crate::token::Token;

    #[test]
    fn a_tool_result_carries_the_reply_twice_and_a_refusal_its_code() {
        let data =
            serde_json::value::to_raw_value(&json!({"workers": [{"worker_id": "w\"1"}]})).unwrap();
        let done = tool_result(
            &Outcome::Completed { data, token: None },
            ",\"resultType\":\"complete\"",
        );
        let v: Value = serde_json::from_str(&done).unwrap();
        assert_eq!(v["structuredContent"]["workers"][0]["worker_id"], "w\"1");
        let text: Value = serde_json::from_str(v["content"][0]["text"].as_str().unwrap()).unwrap();
        assert_eq!(text, v["structuredContent"]);
        assert_eq!(
            (&v["isError"], &v["resultType"]),
            (&json!(false), &json!("complete"))
        );

        let data = serde_json::value::to_raw_value(&json!({"worker": {"worker_id": "w"}})).unwrap();
        let token = Some(Token::from_secret("ab".repeat(32)));
        let made: Value =
            serde_json::from_str(&tool_result(&Outcome::Completed { data, token }, "")).unwrap();
        assert_eq!(made["structuredContent"]["token"], "ab".repeat(32));

        let refused = ControlError::new(ErrorCode::NotFound, "no such worker");
        let v: Value = serde_json::from_str(&tool_result(&Outcome::Rejected(refused), "")).unwrap();
        assert_eq!(v["content"][0]["text"], "not_found: no such worker");
        assert_eq!(v["structuredContent"]["error"]["code"], "not_found");
        assert_eq!(v["isError"], true);
    }
}
