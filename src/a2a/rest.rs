//! The HTTP+JSON binding (specification §11): the routes of §11.3 under one base path, each
//! a request object made of the path's ids, the query (§11.5) or the JSON body, answered
//! with the bare result object, an AIP-193 error body with §5.4's status (§11.6), or
//! server-sent events whose `data` is a bare `StreamResponse` (§11.7). It only translates:
//! the operations are [`Service`]'s.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::decode::{percent_decode, ServiceParams};
use super::service::Service;
use super::stream::{Frame, StreamResponse, TaskEvents};
use super::types::{rest_error_body, RpcError};
use crate::control::Caller;
use crate::http::Streamer;

/// The longest path segment (a task or config id) accepted; a longer one is not an id this
/// server issued.
const MAX_SEGMENT: usize = 256;

/// An HTTP+JSON answer: status, and a JSON body or a stream.
pub struct RestAnswer {
    pub status: u16,
    pub body: RestBody,
    /// For 405: the methods the route allows.
    pub allow: Option<&'static str>,
}

pub enum RestBody {
    Json(String),
    Events(Arc<dyn Streamer>),
    /// The task is another replica's: the request goes to it as it came; the function gives
    /// the answer should that replica not answer (why).
    Relay(std::net::SocketAddr, Box<dyn Fn(&str) -> RestAnswer + Send>),
}

/// One route of §11.3, with the ids its path carries.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Send,
    Stream,
    ListTasks,
    GetTask(String),
    Cancel(String),
    Subscribe(String),
    PushConfigs(String),
    PushConfig(String, String),
    ExtendedCard,
}

impl Route {
    /// The route a path (below the base path) names; `None` for any other path.
    fn parse(path: &str) -> Option<Route> {
        let rest = path.strip_prefix('/')?;
        let segments: Vec<&str> = rest.split('/').collect();
        let id = |s: &str| -> Option<String> {
            // In a path `+` is itself (only a query's `+` is a space).
            let id = percent_decode(&s.replace('+', "%2B"));
            (!id.is_empty() && id.len() <= MAX_SEGMENT && !id.chars().any(char::is_control))
                .then_some(id)
        };
        Some(match segments.as_slice() {
            ["message:send"] => Route::Send,
            ["message:stream"] => Route::Stream,
            ["tasks"] => Route::ListTasks,
            ["extendedAgentCard"] => Route::ExtendedCard,
            ["tasks", one] => match one.rsplit_once(':') {
                Some((task, "cancel")) => Route::Cancel(id(task)?),
                Some((task, "subscribe")) => Route::Subscribe(id(task)?),
                Some(_) => return None,
                None => Route::GetTask(id(one)?),
            },
            ["tasks", task, "pushNotificationConfigs"] => Route::PushConfigs(id(task)?),
            ["tasks", task, "pushNotificationConfigs", config] => {
                Route::PushConfig(id(task)?, id(config)?)
            }
            _ => return None,
        })
    }

    /// The task the route names, if any.
    fn task(&self) -> Option<&str> {
        match self {
            Route::GetTask(t)
            | Route::Cancel(t)
            | Route::Subscribe(t)
            | Route::PushConfigs(t)
            | Route::PushConfig(t, _) => Some(t),
            _ => None,
        }
    }

    /// The methods the route answers.
    fn allowed(&self) -> &'static str {
        match self {
            Route::Send | Route::Stream | Route::Cancel(_) => "POST",
            // The proto says GET, the specification's text POST; the official SDKs send either.
            Route::Subscribe(_) => "GET, POST",
            Route::ListTasks | Route::GetTask(_) | Route::ExtendedCard => "GET",
            Route::PushConfigs(_) => "GET, POST",
            Route::PushConfig(..) => "GET, DELETE",
        }
    }
}

pub struct Rest {
    service: Arc<Service>,
}

impl Rest {
    pub fn new(service: Arc<Service>) -> Rest {
        Rest { service }
    }

    /// Answers one request below the base path. `path` starts with `/`; `query` is the raw
    /// query string; `body` the request body (empty for none).
    pub fn handle(
        &self,
        caller: &Caller,
        params: &ServiceParams,
        method: &str,
        path: &str,
        query: &str,
        body: &[u8],
    ) -> RestAnswer {
        let Some(route) = Route::parse(path) else {
            return error(RpcError::no_route(path));
        };
        let allowed = route.allowed();
        if !allowed.split(", ").any(|m| m == method) {
            let body = rest_error_body(
                405,
                "UNIMPLEMENTED",
                "UNSUPPORTED_OPERATION",
                &format!("Unsupported operation: {method} is not allowed here: use {allowed}"),
                Default::default(),
            );
            return RestAnswer {
                status: 405,
                body: RestBody::Json(body.to_string()),
                allow: Some(allowed),
            };
        }
        if let Err(e) = self.service.check(params) {
            return error(e);
        }
        // A message may continue a task another replica holds: only a replica of several
        // looks into the body for it (the body is parsed once more below).
        let continued = match route {
            Route::Send | Route::Stream if self.service.relays(params) => body_object(body)
                .ok()
                .and_then(|b| super::decode::message_task(&b)),
            _ => None,
        };
        let addressed = route.task().filter(|_| self.service.relays(params));
        if let Some(task_id) = addressed.or(continued.as_deref()) {
            match self.service.holder(params, task_id) {
                Ok(None) => {}
                Ok(Some(addr)) => {
                    let service = Arc::clone(&self.service);
                    let task_id = task_id.to_string();
                    return RestAnswer {
                        status: 0,
                        body: RestBody::Relay(
                            addr,
                            Box::new(move |why| {
                                error(service.holder_unanswered(&task_id, addr, why))
                            }),
                        ),
                        allow: None,
                    };
                }
                Err(e) => return error(e),
            }
        }
        match self.answer(caller, params, route, method, query, body) {
            Ok(answer) => answer,
            Err(e) => error(e),
        }
    }

    fn answer(
        &self,
        caller: &Caller,
        params: &ServiceParams,
        route: Route,
        method: &str,
        query: &str,
        body: &[u8],
    ) -> Result<RestAnswer, RpcError> {
        let service = &self.service;
        // GET and DELETE carry their parameters in the query (§11.5), POST in its body.
        let request = |ids: &[(&str, &str)]| -> Result<Map<String, Value>, RpcError> {
            let mut m = if matches!(method, "GET" | "DELETE") {
                query_params(query)?
            } else {
                body_object(body)?
            };
            for (k, v) in ids {
                m.insert((*k).to_string(), json!(v));
            }
            Ok(m)
        };
        match route {
            Route::Send => {
                let task = service.send_message(caller, &request(&[])?)?;
                ok(&TaskResult { task: &task }, task.data_bytes())
            }
            Route::Stream => Ok(events(service.send_streaming(caller, &request(&[])?)?)),
            Route::ListTasks => {
                let page = service.list_tasks_everywhere(caller, params, &request(&[])?)?;
                ok(&page, page.data_bytes())
            }
            Route::GetTask(id) => {
                let task = service.get_task(caller, &request(&[("id", &id)])?)?;
                ok(&task, task.data_bytes())
            }
            Route::Cancel(id) => {
                let task = service.cancel_task(caller, &request(&[("id", &id)])?)?;
                ok(&task, task.data_bytes())
            }
            Route::Subscribe(id) => {
                // A subscribe carries nothing but its id; a body, if any, is not read.
                let mut m = Map::new();
                m.insert("id".into(), json!(id));
                Ok(events(service.subscribe(caller, &m)?))
            }
            Route::PushConfigs(task) => {
                let req = request(&[("taskId", &task)])?;
                match method {
                    "POST" => ok(&service.push_create(caller, &req)?, 0),
                    _ => ok(&service.push_list(caller, &req)?, 0),
                }
            }
            Route::PushConfig(task, config) => {
                let req = request(&[("taskId", &task), ("id", &config)])?;
                match method {
                    "DELETE" => ok(&service.push_delete(caller, &req)?, 0),
                    _ => ok(&service.push_get(caller, &req)?, 0),
                }
            }
            Route::ExtendedCard => ok(service.extended_card(), 0),
        }
    }
}

/// `SendMessageResponse` with its task (fields in the proto's order: `id` first).
#[derive(Serialize)]
struct TaskResult<'a> {
    task: &'a super::types::Task,
}

/// The body as a request object: none at all is an empty one (clients send no body for a
/// cancel), anything else must be a JSON object.
fn body_object(body: &[u8]) -> Result<Map<String, Value>, RpcError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(RpcError::invalid_request("the body must be a JSON object")),
        Err(e) => Err(RpcError::parse_error(e)),
    }
}

/// The query as a request object (§11.5): camelCase names, values percent-decoded; `true`
/// and `false` are booleans, numbers stay strings (ProtoJSON's form, which the service reads
/// as numbers); an enum may be given by its short name (`status=working`). A name given twice
/// is refused: no request field here is repeated.
fn query_params(query: &str) -> Result<Map<String, Value>, RpcError> {
    let mut m = Map::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        // A query component: percent_decode reads `+` as a space, as forms write it.
        let (k, v) = (percent_decode(k), percent_decode(v));
        if k.eq_ignore_ascii_case("A2A-Version") {
            continue; // a service parameter, read with the headers
        }
        let value = match (k.as_str(), v.as_str()) {
            (_, "true") => Value::Bool(true),
            (_, "false") => Value::Bool(false),
            ("status", short) if !short.is_empty() && !short.starts_with("TASK_STATE_") => {
                json!(format!("TASK_STATE_{}", short.to_ascii_uppercase()))
            }
            _ => Value::String(v.clone()),
        };
        if m.insert(k.clone(), value).is_some() {
            return Err(RpcError::invalid_params(format!(
                "query parameter {:?} is given more than once",
                k.chars().take(64).collect::<String>()
            )));
        }
    }
    Ok(m)
}

/// A 200 with `result` as its body, written as [`crate::json`] does (`hint`: what the result's
/// reply data adds to a small body).
fn ok(result: &impl Serialize, hint: usize) -> Result<RestAnswer, RpcError> {
    let body = crate::json::to_string_sized(result, hint)
        .map_err(|e| RpcError::internal(&e.to_string()))?;
    Ok(RestAnswer {
        status: 200,
        body: RestBody::Json(body),
        allow: None,
    })
}

fn events(stream: super::stream::TaskStream) -> RestAnswer {
    RestAnswer {
        status: 200,
        body: RestBody::Events(Arc::new(TaskEvents::new(Bare, stream))),
        allow: None,
    }
}

/// An error as its status and AIP-193 body.
pub fn error(e: RpcError) -> RestAnswer {
    RestAnswer {
        status: e.http_status().0,
        body: RestBody::Json(e.to_rest_json().to_string()),
        allow: None,
    }
}

/// HTTP+JSON's framing of a stream event: the `StreamResponse` itself.
struct Bare;

impl Frame for Bare {
    fn frame_into(&self, event: &StreamResponse<'_>, out: &mut Vec<u8>) -> Result<(), String> {
        crate::json::append_sized(event, event.data_bytes(), out).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_of_section_11_3() {
        let r = |p: &str| Route::parse(p);
        assert_eq!(r("/message:send"), Some(Route::Send));
        assert_eq!(r("/message:stream"), Some(Route::Stream));
        assert_eq!(r("/tasks"), Some(Route::ListTasks));
        assert_eq!(r("/tasks/abc"), Some(Route::GetTask("abc".into())));
        assert_eq!(r("/tasks/a%2Fb"), Some(Route::GetTask("a/b".into())));
        assert_eq!(r("/tasks/a+b"), Some(Route::GetTask("a+b".into())));
        assert_eq!(r("/tasks/abc:cancel"), Some(Route::Cancel("abc".into())));
        assert_eq!(
            r("/tasks/abc:subscribe"),
            Some(Route::Subscribe("abc".into()))
        );
        assert_eq!(
            r("/tasks/t/pushNotificationConfigs"),
            Some(Route::PushConfigs("t".into()))
        );
        assert_eq!(
            r("/tasks/t/pushNotificationConfigs/c"),
            Some(Route::PushConfig("t".into(), "c".into()))
        );
        assert_eq!(r("/extendedAgentCard"), Some(Route::ExtendedCard));
        for bad in [
            "",
            "/",
            "/tasks/",
            "/tasks//x",
            "/tasks/abc:pause",
            "/tasks/:cancel",
            "/message:send/x",
            "/tenant/tasks",
            "/tasks/%00",
            "/tasks/a/b",
            "/tasks/t/pushNotificationConfigs/c/d",
        ] {
            assert_eq!(r(bad), None, "{bad:?}");
        }
        assert_eq!(r(&format!("/tasks/{}", "x".repeat(MAX_SEGMENT + 1))), None);
    }

    #[test]
    fn query_parameters_of_section_11_5() {
        let m = query_params("contextId=c%201&pageSize=5&includeArtifacts=true&status=working&historyLength=2&A2A-Version=1.0").unwrap();
        assert_eq!(m["contextId"], "c 1");
        assert_eq!(m["pageSize"], "5");
        assert_eq!(m["includeArtifacts"], true);
        assert_eq!(m["status"], "TASK_STATE_WORKING");
        assert_eq!(m["historyLength"], "2");
        assert!(!m.contains_key("A2A-Version"));
        assert_eq!(
            query_params("status=TASK_STATE_COMPLETED").unwrap()["status"],
            "TASK_STATE_COMPLETED"
        );
        let e = query_params("pageSize=1&pageSize=2").unwrap_err();
        assert_eq!(e.code, -32602);
    }

    #[test]
    fn bodies_are_objects_or_nothing() {
        assert!(body_object(b"").unwrap().is_empty());
        assert!(body_object(b" \n").unwrap().is_empty());
        assert_eq!(body_object(b"[1]").unwrap_err().code, -32600);
        assert_eq!(body_object(b"{").unwrap_err().code, -32700);
    }

    #[test]
    fn errors_map_to_http_statuses_with_error_info() {
        let e = error(RpcError::task_not_found("t1"));
        assert_eq!(e.status, 404);
        let RestBody::Json(body) = e.body else {
            panic!("json")
        };
        let v: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["error"]["code"], 404);
        assert_eq!(v["error"]["status"], "NOT_FOUND");
        assert_eq!(v["error"]["details"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(v["error"]["details"][0]["metadata"]["taskId"], "t1");
        assert_eq!(error(RpcError::task_not_cancelable("t", "x")).status, 409);
        assert_eq!(error(RpcError::content_type_not_supported("x")).status, 415);
        assert_eq!(error(RpcError::version_not_supported("9")).status, 400);
        assert_eq!(error(RpcError::invalid_params("x")).status, 400);
        assert_eq!(error(RpcError::internal("x")).status, 500);
    }
}
