//! `ListTasks` over every replica: the caller's tasks of each replica, merged newest status
//! first, a page at a time, whichever replica answers. Each replica is asked on the caller's
//! behalf with the caller's own credential (so each applies the caller's scope), and answers
//! its own part; a replica that does not answer is left out of the page (and logged).
//!
//! A page is made in two steps, so that a worker's token is never handed out for a task the
//! page then leaves out: first each replica says which tasks come next and when their status
//! changed (no data), then each is asked for exactly the tasks of its own that made the page,
//! as the caller asked for them (artifacts, history). The page token names, per replica that
//! has more, where it goes on: `r:<replica>~<its own page token>,...`.

use std::net::IpAddr;

use serde_json::{json, Map, Value};

use super::super::decode::{optional_string, ServiceParams};
use super::super::types::RpcError;
use super::queries::{page_size, ListedTask, TasksPage};
use super::Service;
use crate::control::Caller;
use crate::replicas::{self, relay};

/// How a merged page token begins.
const MERGED: &str = "r:";

/// One replica's part, as it first said it.
struct Part {
    ip: IpAddr,
    /// Where it was asked from (`None`: its first task).
    cursor: Option<String>,
    /// Its next tasks: status time, and the page token after each.
    next: Vec<(String, String)>,
    /// Its page token after all of them (`None`: it has no more).
    after: Option<String>,
}

impl Service {
    /// `ListTasks` (§3.1.4): with other replicas, theirs merged with this one's.
    pub fn list_tasks_everywhere(
        &self,
        caller: &Caller,
        service: &ServiceParams,
        params: &Map<String, Value>,
    ) -> Result<TasksPage, RpcError> {
        let (Some(replicas), false, Some(authorization)) = (
            self.replicas.as_ref(),
            service.relayed,
            service.authorization.0.as_deref(),
        ) else {
            return self.list_tasks(caller, params);
        };
        let own = replicas.own();
        let token = optional_string(params, &["pageToken", "page_token"], "pageToken")?
            .filter(|t| !t.is_empty());
        let cursors: Vec<(IpAddr, Option<String>)> = match token {
            None => {
                let others = replicas.others().map_err(|why| {
                    RpcError::internal(&format!("the replicas cannot be listed now: {why}"))
                })?;
                if others.is_empty() {
                    return self.list_tasks(caller, params);
                }
                std::iter::once(own)
                    .chain(others)
                    .map(|ip| (ip, None))
                    .collect()
            }
            Some(t) => match t.strip_prefix(MERGED) {
                Some(merged) => parse_cursors(merged)?,
                // A token this replica issued alone.
                None => return self.list_tasks(caller, params),
            },
        };
        let size = page_size(params)?;
        if !cursors.iter().any(|(ip, _)| *ip == own) {
            // The request is checked here, whether or not this replica has tasks to add.
            self.list_tasks(caller, &{
                let mut p = params.clone();
                p.insert("pageToken".into(), json!(""));
                p
            })?;
        }
        let ask = |cursor: &Option<String>, size: usize, first: bool| {
            let mut p = params.clone();
            p.remove("page_token");
            p.remove("page_size");
            p.insert(
                "pageToken".into(),
                json!(cursor.clone().unwrap_or_default()),
            );
            p.insert("pageSize".into(), json!(size));
            if first {
                p.remove("include_artifacts");
                p.remove("history_length");
                p.insert("includeArtifacts".into(), json!(false));
                p.insert("historyLength".into(), json!(0));
                p.insert("replicaPageTokens".into(), json!(true));
            }
            p
        };

        // What comes next on each replica.
        let mut parts = Vec::new();
        let mut total = 0;
        for (ip, cursor) in cursors {
            let first = ask(&cursor, size, true);
            let looked = if ip == own {
                serde_json::to_value(self.list_tasks(caller, &first)?)
                    .map_err(|e| RpcError::internal(&e.to_string()))
            } else if !replicas.is_replica(ip).unwrap_or(false) {
                log::info!("ListTasks: replica {ip} of the page token is gone");
                continue;
            } else {
                self.call_replica(ip, authorization, &first)
            };
            match looked {
                Ok(v) if v.get("pageTokens").is_none() => log::warn!(
                    "ListTasks: replica {ip} left out of the page: it does not merge pages (an older version)"
                ),
                Ok(v) => {
                    total += v["totalSize"].as_u64().unwrap_or(0) as usize;
                    parts.push(part_of(ip, cursor, &v));
                }
                Err(e) => log::warn!(
                    "ListTasks: replica {ip} left out of the page: {}",
                    e.message
                ),
            }
        }

        // The page: the newest `size` of all, so many of each replica's.
        let mut order: Vec<(&str, usize)> = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| p.next.iter().map(move |(at, _)| (at.as_str(), i)))
            .collect();
        order.sort_by(|a, b| b.0.cmp(a.0));
        let mut taken = vec![0usize; parts.len()];
        for (_, i) in order.into_iter().take(size) {
            taken[i] += 1;
        }

        // Those tasks, as the caller asked for them; where each replica goes on.
        let mut tasks: Vec<ListedTask> = Vec::new();
        let mut more = Vec::new();
        for (part, &k) in parts.iter().zip(&taken) {
            if k > 0 {
                let exact = ask(&part.cursor, k, false);
                if part.ip == own {
                    tasks.extend(self.list_tasks(caller, &exact)?.tasks);
                } else {
                    match self.call_replica(part.ip, authorization, &exact) {
                        Ok(v) => tasks.extend(
                            v["tasks"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .map(|t| ListedTask::There(Box::new(t.clone()))),
                        ),
                        Err(e) => log::warn!(
                            "ListTasks: replica {} left out of the page: {}",
                            part.ip,
                            e.message
                        ),
                    }
                }
            }
            let goes_on = if k == part.next.len() {
                part.after.clone().map(Some)
            } else if k == 0 {
                Some(part.cursor.clone())
            } else {
                Some(Some(part.next[k - 1].1.clone()))
            };
            if let Some(cursor) = goes_on {
                more.push(format!(
                    "{}~{}",
                    replicas::tag(part.ip),
                    cursor.unwrap_or_default()
                ));
            }
        }
        tasks.sort_by(|a, b| status_time(b).cmp(status_time(a)));
        Ok(TasksPage {
            tasks,
            next_page_token: if more.is_empty() {
                String::new()
            } else {
                format!("{MERGED}{}", more.join(","))
            },
            page_size: size,
            total_size: total,
            page_tokens: None,
        })
    }

    /// `ListTasks` on the replica at `ip` for the caller (its credential as it came): the
    /// result, or why there is none.
    fn call_replica(
        &self,
        ip: IpAddr,
        authorization: &str,
        params: &Map<String, Value>,
    ) -> Result<Value, RpcError> {
        let Some(replicas) = &self.replicas else {
            return Err(RpcError::internal("no replicas"));
        };
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params});
        let mut answer = relay::call(replicas.address(ip), replicas.own(), authorization, &body)
            .map_err(|e| RpcError::internal(&format!("it does not answer: {e}")))?;
        if let Some(e) = answer.get("error") {
            return Err(RpcError::internal(
                e["message"].as_str().unwrap_or("an error"),
            ));
        }
        Ok(answer["result"].take())
    }
}

/// A replica's first answer, as a [`Part`].
fn part_of(ip: IpAddr, cursor: Option<String>, page: &Value) -> Part {
    let tokens = page["pageTokens"].as_array().cloned().unwrap_or_default();
    let next = page["tasks"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(tokens)
        .map(|(t, token)| {
            (
                t["status"]["timestamp"].as_str().unwrap_or("").to_string(),
                token.as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let after = page["nextPageToken"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    Part {
        ip,
        cursor,
        next,
        after,
    }
}

/// The replicas and their page tokens of a merged page token.
fn parse_cursors(merged: &str) -> Result<Vec<(IpAddr, Option<String>)>, RpcError> {
    let bad = || RpcError::invalid_params("pageToken is not one this server issued");
    merged
        .split(',')
        .map(|entry| {
            let (tag, token) = entry.split_once('~').ok_or_else(bad)?;
            let ip = replicas::parse_tag(tag).ok_or_else(bad)?;
            if !token.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            Ok((ip, (!token.is_empty()).then(|| token.to_string())))
        })
        .collect()
}

fn status_time(task: &ListedTask) -> &str {
    match task {
        ListedTask::Here(t) => &t.status.timestamp,
        ListedTask::There(v) => v["status"]["timestamp"].as_str().unwrap_or(""),
    }
}
