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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
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

/// What a result gets before it is sent (its era's stamp).
pub type Stamp = Box<dyn Fn(Value) -> Value + Send + Sync>;

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
            .filter(|t| match t.needs {
                None => true,
                Some(tools::Needs::Renewal) => abilities.renewal.is_some(),
                Some(tools::Needs::Suspension) => abilities.suspension.is_some(),
            })
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
        Answer::Json {
            status: 200,
            body: wire::result(&self.id, stamp(tool_result(&outcome))),
            session: None,
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

/// A completed operation as a tool result (with a create's token in its structured content),
/// or a refusal as a tool error.
pub fn tool_result(outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Completed { data, token } => {
            let mut structured: Value =
                serde_json::from_str(data.get()).unwrap_or_else(|_| json!({}));
            if let (Some(token), Value::Object(o)) = (token, &mut structured) {
                o.insert("token".into(), Value::String(token.expose().to_string()));
            }
            json!({
                "content": [{"type": "text", "text": structured.to_string()}],
                "structuredContent": structured,
                "isError": false,
            })
        }
        Outcome::Rejected(e) | Outcome::Failed(e) => {
            let code = serde_json::to_value(e.code).unwrap_or(Value::Null);
            let code = code.as_str().unwrap_or("internal");
            json!({
                "content": [{"type": "text", "text": format!("{code}: {}", e.message)}],
                "structuredContent": {"error": e},
                "isError": true,
            })
        }
    }
}

/// Where the operation's thread and the stream meet: exactly one of them undoes a create
/// whose answer cannot be delivered.
#[derive(Default)]
struct Meeting {
    /// The stream has ended without the answer (its client went, or cancelled).
    gone: bool,
    /// The operation's outcome, until the stream takes it.
    done: Option<Outcome>,
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
        let meeting = Arc::new(Mutex::new(Meeting::default()));
        let (tx, rx) = mpsc::channel::<Option<String>>();
        let progress = match &call.progress_token {
            Some(_) => {
                let tx = tx.clone();
                Progress::new(move |step| {
                    let _ = tx.send(Some(step.to_string()));
                })
            }
            None => Progress::default(),
        };
        let worker = {
            let (call, meeting) = (Arc::clone(&call), Arc::clone(&meeting));
            move || {
                let outcome = call.execute(progress);
                let mut m = meeting.lock().unwrap_or_else(|p| p.into_inner());
                if m.gone {
                    drop(m);
                    call.undo(&outcome);
                } else {
                    m.done = Some(outcome);
                    drop(m);
                    let _ = tx.send(None);
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
        let delivered = follow(&call, sink, &rx, &cancel, &meeting, &stamp);
        drop(registered);
        if !delivered {
            let mut m = meeting.lock().unwrap_or_else(|p| p.into_inner());
            m.gone = true;
            if let Some(outcome) = m.done.take() {
                drop(m);
                call.undo(&outcome);
            }
        }
    }
}

/// Writes each step as a progress notification, then the result; `false` when the stream
/// ended without the result delivered (the client went, or the call was cancelled).
fn follow(
    call: &Call,
    sink: &mut dyn Sink,
    rx: &mpsc::Receiver<Option<String>>,
    cancel: &AtomicBool,
    meeting: &Mutex<Meeting>,
    stamp: &Stamp,
) -> bool {
    let mut steps = 0u64;
    loop {
        match rx.recv_timeout(TICK) {
            Ok(Some(step)) => {
                steps += 1;
                let note = wire::notification(
                    "notifications/progress",
                    json!({"progressToken": call.progress_token, "progress": steps, "message": step}),
                );
                if !sink.send(&wire::event(&note)) {
                    return false;
                }
            }
            Ok(None) => {
                let Some(outcome) = meeting.lock().ok().and_then(|mut m| m.done.take()) else {
                    return false;
                };
                let body = wire::result(&call.id, stamp(tool_result(&outcome)));
                if sink.send(&wire::event(&body)) {
                    return true;
                }
                // Not delivered: the outcome goes back to be undone.
                if let Ok(mut m) = meeting.lock() {
                    m.done = Some(outcome);
                }
                return false;
            }
            Err(RecvTimeoutError::Timeout) => {
                if cancel.load(Ordering::SeqCst) || sink.gone() {
                    return false;
                }
            }
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}
