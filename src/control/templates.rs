//! Templates and workspaces in the control layer: which templates a caller may create from
//! (and the `templates` reply), the task workspaces a scope has (`workspaces`,
//! `delete_workspace`, a stop that deletes the workspace too, `max_workspaces`), and the last
//! use a stop leaves on a workspace.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{completed, Caller, Control, ControlError, ErrorCode, Outcome};
use crate::backend::{BackendError, TaskWorkspace, Template, Worker, DEFAULT_TEMPLATE};

/// `templates`' reply data: what a caller may create from.
#[derive(Serialize)]
struct TemplateList {
    templates: Vec<TemplateInfo>,
}

/// One template as callers see it: what it starts and its limits (never its environment's
/// values, nor its files' paths).
#[derive(Serialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
    /// The image (docker, k8s) or the program (local).
    pub image: String,
    pub memory_bytes: Option<i64>,
    pub cpus: Option<f64>,
    pub pids_limit: Option<i64>,
    /// Seconds; `None`: none.
    pub ttl: Option<u64>,
    pub max_ttl: Option<u64>,
    pub port: u16,
    /// The workspace's path and size, when the template has one.
    pub workspace: Option<WorkspaceInfo>,
    /// Its warm pool, when it keeps one: the members it keeps and those ready now.
    pub pool: Option<PoolInfo>,
}

#[derive(Serialize)]
pub struct PoolInfo {
    /// The members it should hold now: its fixed size, or what the demand asks for.
    pub size: u32,
    /// Its bounds (equal for a fixed pool).
    pub min: u32,
    pub max: u32,
    pub ready: u32,
}

#[derive(Serialize)]
pub struct WorkspaceInfo {
    pub path: String,
    pub size: String,
}

impl TemplateInfo {
    pub fn of(t: &Template) -> TemplateInfo {
        TemplateInfo {
            name: t.name.clone(),
            description: t.description.clone(),
            image: if t.image.is_empty() {
                t.command.first().cloned().unwrap_or_default()
            } else {
                t.image.clone()
            },
            memory_bytes: t.memory_bytes,
            cpus: t.nano_cpus.map(|n| n as f64 / 1e9),
            pids_limit: t.pids_limit,
            ttl: t.lifetime.default_ttl.map(|d| d.as_secs()),
            max_ttl: t.lifetime.max_ttl.map(|d| d.as_secs()),
            port: t.port,
            workspace: t.workspace.as_ref().map(|w| WorkspaceInfo {
                path: w.path.clone(),
                size: w.size.clone(),
            }),
            pool: t.pool.is_kept().then_some(PoolInfo {
                size: t.pool.min,
                min: t.pool.min,
                max: t.pool.max,
                ready: 0,
            }),
        }
    }
}

/// `workspaces`' reply data.
#[derive(Serialize)]
struct Workspaces {
    workspaces: Vec<TaskWorkspace>,
}

/// `delete_workspace`'s reply data, and `stop`'s with `"workspace": "delete"`.
#[derive(Serialize)]
struct Stopped {
    worker: Option<Worker>,
    workspace: Option<TaskWorkspace>,
}

impl Control {
    /// The same, with workspaces deleted this long after their last use.
    pub fn with_workspace_ttl(mut self, ttl: Option<Duration>) -> Control {
        self.workspace_ttl = ttl;
        self
    }

    /// Every workspace the backend keeps (none, for a backend that keeps none).
    pub(super) fn owned_workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        self.backend
            .abilities()
            .workspaces
            .map_or(Ok(Vec::new()), |spaces| spaces.owned())
    }

    /// Deletes the workspace of `task` in `scope` on the backend, returning it as it was;
    /// [`BackendError::NotFound`] when there is none (or the backend keeps none).
    pub(super) fn remove_workspace(
        &self,
        scope: &str,
        task: &str,
    ) -> Result<TaskWorkspace, BackendError> {
        self.backend
            .abilities()
            .workspaces
            .map_or(Err(BackendError::NotFound), |spaces| {
                spaces.delete(scope, task)
            })
    }

    /// The task workspaces, each with whether a worker of its task exists now.
    pub fn workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        let mut spaces = self.owned_workspaces()?;
        if spaces.is_empty() {
            return Ok(spaces);
        }
        let workers = self.backend.list()?;
        for s in &mut spaces {
            s.in_use = workers
                .iter()
                .any(|w| w.task == s.task && w.scope == s.scope);
        }
        spaces.sort_by(|a, b| (&a.created_at, &a.name).cmp(&(&b.created_at, &b.name)));
        Ok(spaces)
    }

    /// Deletes the workspace of `task` in `scope` unless a worker of the task exists.
    fn delete_workspace(&self, scope: &str, task: &str) -> Result<TaskWorkspace, ControlError> {
        let workers = self.backend.list().map_err(ControlError::from)?;
        if let Some(w) = workers.iter().find(|w| w.task == task && w.scope == scope) {
            let mut e = ControlError::from(BackendError::WorkerExists {
                worker_id: w.worker_id.clone(),
                state: w.state,
            });
            e.message = format!(
                "the task's worker {} ({}) still has the workspace: stop it first, or stop it with \"workspace\": \"delete\"",
                w.worker_id,
                w.state.as_str()
            );
            return Err(e);
        }
        self.remove_workspace(scope, task).map_err(|e| match e {
            BackendError::NotFound => ControlError::new(
                ErrorCode::NotFound,
                format!("task {task:?} has no workspace (in this caller's scope)"),
            ),
            e => ControlError::from(e),
        })
    }

    /// The templates `caller` may create from, by name.
    pub fn templates_for(&self, caller: &Caller) -> Vec<Arc<Template>> {
        let templates = self.templates.current();
        templates
            .all()
            .filter(|t| caller.may_use(&t.name))
            .cloned()
            .collect()
    }

    /// The template a create of `caller` asked for (`None`: `default`), or a refusal naming
    /// the templates it may use (never the others).
    pub(super) fn template_for(
        &self,
        caller: &Caller,
        asked: Option<&str>,
    ) -> Result<Arc<Template>, ControlError> {
        let name = asked.unwrap_or(DEFAULT_TEMPLATE);
        let templates = self.templates.current();
        match templates.get(name) {
            Some(t) if caller.may_use(name) => Ok(Arc::clone(t)),
            _ => {
                let usable: Vec<&str> = templates
                    .all()
                    .map(|t| t.name.as_str())
                    .filter(|n| caller.may_use(n))
                    .collect();
                let which = if asked.is_none() {
                    "no template was named and this caller may not use default".to_string()
                } else {
                    format!("unknown template {name:?}")
                };
                Err(ControlError::invalid(if usable.is_empty() {
                    format!("{which}: this caller may use no template")
                } else {
                    format!("{which}: this caller may use {}", usable.join(", "))
                }))
            }
        }
    }

    /// Whether a create of `template` for `task` may make a workspace under the caller's
    /// `max_workspaces` (a task that has one already reuses it).
    pub(super) fn workspace_room(
        &self,
        caller: &Caller,
        task: &str,
        template: &Template,
    ) -> Result<(), ControlError> {
        if caller.max_workspaces.is_none() || template.workspace.is_none() {
            return Ok(());
        }
        let spaces = self.owned_workspaces().map_err(ControlError::from)?;
        room_among(caller, task, &spaces)
    }
}

/// Whether `caller`'s `max_workspaces` leaves room for task `task`'s workspace among `spaces`
/// (a task that has one already takes no more).
pub(super) fn room_among(
    caller: &Caller,
    task: &str,
    spaces: &[TaskWorkspace],
) -> Result<(), ControlError> {
    let Some(max) = caller.max_workspaces else {
        return Ok(());
    };
    let mine: Vec<&TaskWorkspace> = spaces.iter().filter(|w| w.scope == caller.scope).collect();
    if mine.iter().any(|w| w.task == task) || mine.len() < max as usize {
        return Ok(());
    }
    Err(ControlError::new(
        ErrorCode::Capacity,
        format!(
            "caller {}'s max_workspaces ({max}) reached in scope {}: delete a workspace first (delete_workspace)",
            caller.name, caller.scope
        ),
    ))
}

impl Control {
    /// Notes a stopped worker's workspace as used until now (its TTL counts from here).
    pub(super) fn released(&self, worker: &Worker) {
        let Some(spaces) = self.backend.abilities().workspaces else {
            return;
        };
        if let Err(e) = spaces.released(&worker.scope, &worker.task) {
            log::warn!(
                "the workspace of task {:?} could not be marked as used now: {e}",
                worker.task
            );
        }
    }

    /// `templates`: what `caller` may create from.
    pub(super) fn template_list(&self, caller: &Caller) -> Outcome {
        let pools = self.pool_status();
        let templates = self
            .templates_for(caller)
            .iter()
            .map(|t| {
                let mut info = TemplateInfo::of(t);
                if let Some(p) = &mut info.pool {
                    if let Some(s) = pools.iter().find(|s| s.template == t.name) {
                        p.ready = s.ready;
                        p.size = s.size;
                    }
                }
                info
            })
            .collect();
        completed(&TemplateList { templates }, None, 0)
    }

    /// `workspaces`: those of the caller's scope (an admin's: every scope's).
    pub(super) fn workspace_list(&self, caller: &Caller) -> Outcome {
        match self.workspaces() {
            Ok(mut workspaces) => {
                let scope = caller.visible_scope();
                workspaces.retain(|w| scope.as_ref().is_none_or(|s| &w.scope == s));
                completed(&Workspaces { workspaces }, None, 0)
            }
            Err(e) => Outcome::Failed(e.into()),
        }
    }

    /// `delete_workspace`. Only an admin names another scope; anyone else's workspace elsewhere
    /// is the same not_found as none at all.
    pub(super) fn delete_workspace_of(
        &self,
        caller: &Caller,
        task: &str,
        scope: Option<String>,
    ) -> Outcome {
        let scope = match scope {
            Some(s) if caller.admin => s,
            _ => caller.scope.clone(),
        };
        match self.delete_workspace(&scope, task) {
            Ok(space) => completed(
                &Stopped {
                    worker: None,
                    workspace: Some(space),
                },
                None,
                0,
            ),
            Err(e) => Outcome::Failed(e),
        }
    }

    /// What a stop answers once its worker is stopped: the worker, and with
    /// `"workspace": "delete"` its workspace deleted (`null` when it had none); without, the
    /// workspace's last use is now.
    pub(super) fn stopped(&self, worker: Worker, delete_workspace: bool) -> Outcome {
        if !delete_workspace {
            self.released(&worker);
            return completed(&super::OneWorker { worker }, None, 0);
        }
        let workspace = match self.remove_workspace(&worker.scope, &worker.task) {
            Ok(space) => Some(space),
            Err(BackendError::NotFound) => None,
            Err(e) => {
                let mut e = ControlError::from(e);
                e.message = format!(
                    "worker {} was stopped, but its workspace could not be deleted (delete_workspace tries again): {}",
                    worker.worker_id, e.message
                );
                return Outcome::Failed(e);
            }
        };
        completed(
            &Stopped {
                worker: Some(worker),
                workspace,
            },
            None,
            0,
        )
    }
}
