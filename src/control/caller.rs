//! Who asks. The routes authenticate a request (a caller of `A2A_CALLERS_FILE`, the admin
//! token, an OIDC access token) and hand the [`Caller`] down; this layer and the task store
//! decide with it what the request may reach. Scoping is done here, once, above the seam: a
//! backend stores and returns a worker's scope like any label and filters nothing.

use crate::backend::{Worker, ADMIN_SCOPE};

pub const MAX_SCOPE_CHARS: usize = 32;

/// An authenticated caller. Its `name` goes into logs and metrics; no field is a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// For people: logs, the `caller` metric label (a static caller's name, an OIDC `sub`).
    pub name: String,
    /// Whose workers it creates and sees.
    pub scope: String,
    /// Sees and stops every scope's workers.
    pub admin: bool,
    /// Its own bound on the workers of its scope, beside `MAX_WORKERS` overall.
    pub max_workers: Option<u32>,
    /// What its control tasks belong to: unique across static and OIDC callers, so an OIDC
    /// subject can never take a static caller's tasks by sharing its name.
    pub key: String,
    /// The worker templates it may create from; `None`: every one.
    pub templates: Option<Vec<String>>,
    /// Its bound on its scope's task workspaces; `None`: none.
    pub max_workspaces: Option<u32>,
    /// A worker presenting its own token ([`Caller::worker`]): the token's one-way hash. Such
    /// a caller may renew the worker stored with that hash, and do nothing else.
    pub renews_only: Option<String>,
}

impl Caller {
    /// The caller of `A2A_AUTH_TOKEN` / `_FILE`: an admin in the admin scope, as every request
    /// was before callers existed.
    pub fn admin() -> Caller {
        Caller {
            name: "admin".into(),
            scope: ADMIN_SCOPE.into(),
            admin: true,
            max_workers: None,
            key: "static:admin".into(),
            templates: None,
            max_workspaces: None,
            renews_only: None,
        }
    }

    /// A caller of the callers file.
    pub fn named(name: &str, scope: &str, admin: bool, max_workers: Option<u32>) -> Caller {
        Caller {
            name: name.into(),
            scope: scope.into(),
            admin,
            max_workers,
            key: format!("static:{name}"),
            templates: None,
            max_workspaces: None,
            renews_only: None,
        }
    }

    /// The same, allowed only the templates named (`None`: every one).
    pub fn limited_to(mut self, templates: Option<Vec<String>>) -> Caller {
        self.templates = templates;
        self
    }

    /// The same, with at most `max` workspaces in its scope.
    pub fn with_max_workspaces(mut self, max: Option<u32>) -> Caller {
        self.max_workspaces = max;
        self
    }

    /// Whether it may create workers from template `name`.
    pub fn may_use(&self, name: &str) -> bool {
        self.templates
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == name))
    }

    /// A caller with a verified OIDC access token: named by its subject.
    pub fn oidc(subject: &str, scope: &str) -> Caller {
        Caller {
            name: subject.into(),
            scope: scope.into(),
            admin: false,
            max_workers: None,
            key: format!("oidc:{subject}"),
            templates: None,
            max_workspaces: None,
            renews_only: None,
        }
    }

    /// A worker presenting its own token (the one create returned): it may renew that worker
    /// and nothing else. It is in no scope and may use no template; every worker token shares
    /// one caller key, so their request limits are shared too (a stream of made-up tokens
    /// costs what one caller's requests cost).
    pub fn worker(token: &str) -> Caller {
        Caller {
            name: "worker".into(),
            scope: String::new(),
            admin: false,
            max_workers: None,
            key: "worker-token".into(),
            templates: Some(Vec::new()),
            max_workspaces: None,
            renews_only: Some(crate::token::token_hash(token)),
        }
    }

    /// Whether this caller may see (and stop, and read the logs of) `worker`. A worker's own
    /// token sees its worker only (its stored hash, compared in constant time).
    pub fn sees(&self, worker: &Worker) -> bool {
        match &self.renews_only {
            Some(hash) => {
                !worker.token_hash.is_empty()
                    && crate::token::constant_time_eq(hash.as_bytes(), worker.token_hash.as_bytes())
            }
            None => self.admin || worker.scope == self.scope,
        }
    }

    /// The scope a list or watch is limited to: `None` for an admin (every scope).
    pub fn visible_scope(&self) -> Option<String> {
        (!self.admin).then(|| self.scope.clone())
    }
}

/// A scope name: 1 to 32 of `[a-z0-9-]`, a letter or digit at both ends (it is a Kubernetes
/// label value, which must be), or why not.
pub fn check_scope(scope: &str) -> Result<(), String> {
    let ok = !scope.is_empty()
        && scope.len() <= MAX_SCOPE_CHARS
        && scope
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !scope.starts_with('-')
        && !scope.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a scope is 1 to {MAX_SCOPE_CHARS} of a-z, 0-9 and '-', starting and ending with a letter or digit (got {:?})",
            scope.chars().take(40).collect::<String>()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackendKind, WorkerState};

    #[test]
    fn scopes_at_the_limits() {
        assert!(check_scope("a").is_ok());
        assert!(check_scope(&"z".repeat(32)).is_ok());
        assert!(check_scope("team-a-1").is_ok());
        for bad in [
            "",
            &"z".repeat(33),
            "-a",
            "a-",
            "Team",
            "a_b",
            "a.b",
            "ä",
            "a b",
        ] {
            assert!(check_scope(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn who_sees_what() {
        let w = Worker::new(BackendKind::Docker, "w", "t", WorkerState::Running, "").scoped("a");
        assert!(Caller::named("x", "a", false, None).sees(&w));
        assert!(!Caller::named("x", "b", false, None).sees(&w));
        assert!(Caller::named("x", "b", true, None).sees(&w));
        assert!(Caller::admin().sees(&w));
        assert_eq!(Caller::admin().visible_scope(), None);
        assert_ne!(
            Caller::oidc("alice", "a").key,
            Caller::named("alice", "a", false, None).key
        );
    }
}
