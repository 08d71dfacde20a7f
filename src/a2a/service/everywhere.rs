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

/// Where each replica's part of a page begins (`None`: at its first task).
type Cursors = Vec<(IpAddr, Option<String>)>;

/// How a merged page token begins.
const MERGED: &str = "r:";

/// Who asks, and what: the same for every replica.
struct Asked<'a> {
    caller: &'a Caller,
    authorization: &'a str,
    params: &'a Map<String, Value>,
    own: IpAddr,
}

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
        let Some(cursors) = self.cursors(replicas, params)? else {
            return self.list_tasks(caller, params);
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
        let asked = Asked {
            caller,
            authorization,
            params,
            own,
        };
        let (parts, total) = self.look(replicas, &asked, cursors, size)?;
        let taken = page_shares(&parts, size);
        let (mut tasks, more) = self.fetch(&asked, &parts, &taken)?;
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

    /// Where each replica's part of the page begins: every replica from its first task, or
    /// where a merged page token says; `None` when this replica answers alone (no others, or
    /// a token it issued alone).
    fn cursors(
        &self,
        replicas: &replicas::Replicas,
        params: &Map<String, Value>,
    ) -> Result<Option<Cursors>, RpcError> {
        let token = optional_string(params, &["pageToken", "page_token"], "pageToken")?
            .filter(|t| !t.is_empty());
        match token {
            None => {
                let others = replicas.others().map_err(|why| {
                    RpcError::internal(&format!("the replicas cannot be listed now: {why}"))
                })?;
                if others.is_empty() {
                    return Ok(None);
                }
                Ok(Some(
                    std::iter::once(replicas.own())
                        .chain(others)
                        .map(|ip| (ip, None))
                        .collect(),
                ))
            }
            Some(t) => match t.strip_prefix(MERGED) {
                Some(merged) => parse_cursors(merged).map(Some),
                None => Ok(None),
            },
        }
    }

    /// Step one: what comes next on each replica (status times and page tokens, no data),
    /// and how many tasks they hold in all. A replica that does not answer is left out.
    fn look(
        &self,
        replicas: &replicas::Replicas,
        asked: &Asked<'_>,
        cursors: Cursors,
        size: usize,
    ) -> Result<(Vec<Part>, usize), RpcError> {
        let mut parts = Vec::new();
        let mut total = 0;
        for (ip, cursor) in cursors {
            let first = replica_params(asked.params, &cursor, size, true);
            let looked = if ip == asked.own {
                serde_json::to_value(self.list_tasks(asked.caller, &first)?)
                    .map_err(|e| RpcError::internal(&e.to_string()))
            } else if !replicas.is_replica(ip).unwrap_or(false) {
                log::info!("ListTasks: replica {ip} of the page token is gone");
                continue;
            } else {
                self.call_replica(ip, asked.authorization, &first)
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
        Ok((parts, total))
    }

    /// Step two: the tasks of each replica that made the page (`taken[i]` of part `i`), as
    /// the caller asked for them, and where each replica goes on (`<tag>~<its token>`).
    fn fetch(
        &self,
        asked: &Asked<'_>,
        parts: &[Part],
        taken: &[usize],
    ) -> Result<(Vec<ListedTask>, Vec<String>), RpcError> {
        let mut tasks: Vec<ListedTask> = Vec::new();
        let mut more = Vec::new();
        for (part, &k) in parts.iter().zip(taken) {
            if k > 0 {
                let exact = replica_params(asked.params, &part.cursor, k, false);
                if part.ip == asked.own {
                    tasks.extend(self.list_tasks(asked.caller, &exact)?.tasks);
                } else {
                    match self.call_replica(part.ip, asked.authorization, &exact) {
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
            if let Some(cursor) = part.goes_on(k) {
                more.push(format!(
                    "{}~{}",
                    replicas::tag(part.ip),
                    cursor.unwrap_or_default()
                ));
            }
        }
        Ok((tasks, more))
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

impl Part {
    /// Where this replica goes on after `k` of its next tasks made the page (`None`: it has
    /// no more; `Some(None)`: from its first task).
    fn goes_on(&self, k: usize) -> Option<Option<String>> {
        if k == self.next.len() {
            self.after.clone().map(Some)
        } else if k == 0 {
            Some(self.cursor.clone())
        } else {
            Some(Some(self.next[k - 1].1.clone()))
        }
    }
}

/// How many of each part's next tasks make a page of `size`: the newest of all.
fn page_shares(parts: &[Part], size: usize) -> Vec<usize> {
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
    taken
}

/// The parameters a replica is asked with, from `cursor` for `size` tasks; the first step
/// asks for no data, only the times and page tokens.
fn replica_params(
    params: &Map<String, Value>,
    cursor: &Option<String>,
    size: usize,
    first: bool,
) -> Map<String, Value> {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(ip: &str, times: &[&str], after: Option<&str>) -> Part {
        Part {
            ip: ip.parse().unwrap(),
            cursor: Some("c0".into()),
            next: times
                .iter()
                .enumerate()
                .map(|(i, t)| (t.to_string(), format!("c{}", i + 1)))
                .collect(),
            after: after.map(str::to_string),
        }
    }

    #[test]
    fn a_page_takes_the_newest_of_every_replica_and_each_goes_on_after_its_share() {
        let parts = [
            part(
                "10.0.0.1",
                &["2026-12-06T00:00:05Z", "2026-12-06T00:00:01Z"],
                None,
            ),
            part(
                "10.0.0.2",
                &["2026-12-06T00:00:04Z", "2026-12-06T00:00:03Z"],
                Some("more"),
            ),
            part("10.0.0.3", &["2026-12-06T00:00:00Z"], None),
        ];
        let taken = page_shares(&parts, 3);
        assert_eq!(taken, [1, 2, 0], "the three newest: 05, 04, 03");
        assert_eq!(parts[0].goes_on(1), Some(Some("c1".to_string())));
        assert_eq!(
            parts[1].goes_on(2),
            Some(Some("more".to_string())),
            "all taken: its own token"
        );
        assert_eq!(
            parts[2].goes_on(0),
            Some(Some("c0".to_string())),
            "none taken: where it was"
        );
        assert_eq!(part("10.0.0.4", &[], None).goes_on(0), None, "nothing more");
        assert_eq!(page_shares(&parts, 10), [2, 2, 1]);
    }
}
