//! Validation across the seam, in two steps: [`Backend::validate`](super::Backend::validate)
//! without the engine (a template when templates are read, a task name before anything runs),
//! and [`Backend::check`](super::Backend::check) with it (what `check` proves, and the dry run
//! at startup). A refusal names the field it is about.

use std::fmt;

use super::BackendError;
use crate::settings::templates::Template;

/// What is validated without the engine.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// A template, whenever templates are read (at startup, and when the file changed): a
    /// program that does not exist, a pod template that breaks the rules, a field that does
    /// not apply to this backend.
    Template(&'a Template),
    /// A task name, before anything runs. The operation layer has already checked what every
    /// backend requires.
    Task(&'a str),
}

/// Why a backend refuses a template or a task: the field, and one line why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The template's key (`image`, `network`, `pod_template`, ...), or `task`.
    pub field: &'static str,
    /// Why, for people: one line, no field name.
    pub why: String,
}

impl Refusal {
    pub fn new(field: &'static str, why: impl Into<String>) -> Refusal {
        Refusal {
            field,
            why: why.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.why)
    }
}

impl std::error::Error for Refusal {}

/// A fenced template (egress not `"open"`) needs the egress proxy's URL (`EGRESS_PROXY_URL`):
/// its workers are given that and their placeholder instead of any key.
pub fn fence_refusal(t: &Template, proxy_set: bool) -> Result<(), Refusal> {
    if t.egress.fenced() && !proxy_set {
        return Err(Refusal::new(
            "egress",
            format!(
                "{} needs the egress proxy: set EGRESS_PROXY_URL (where fenced workers reach it)",
                t.egress.describe()
            ),
        ));
    }
    Ok(())
}

/// What is checked with the engine.
#[derive(Debug, Clone, Copy)]
pub enum Check<'a> {
    /// The engine itself (for `check`): that it answers, and what the backend can ask it of
    /// its own access. One finding per line.
    Engine,
    /// One template (for `check`), asking the engine: the image is present, the pod passes a
    /// dry run, the program is executable. One finding.
    Template(&'a Template),
    /// One template at startup: a dry run of what its creates will send, where the engine
    /// offers one. A failed finding is a configuration the engine will always refuse, and
    /// stops startup; an engine that cannot be asked now is not one (the controller starts
    /// and says so in `/readiness`). Nothing to say is no finding.
    Startup(&'a Template),
}

/// One line of `check`: what was asked, and whether it passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub ok: bool,
    pub what: String,
}

impl Finding {
    pub fn ok(what: impl Into<String>) -> Finding {
        Finding {
            ok: true,
            what: what.into(),
        }
    }

    pub fn failed(what: impl fmt::Display) -> Finding {
        Finding {
            ok: false,
            what: what.to_string(),
        }
    }

    /// "answers" when the engine does, else why not.
    pub fn of_health(health: Result<(), BackendError>) -> Finding {
        match health {
            Ok(()) => Finding::ok("answers"),
            Err(e) => Finding::failed(e),
        }
    }

    /// `ok` when `validated` passed, else the refusal.
    pub fn of(validated: Result<(), Refusal>, ok: impl Into<String>) -> Finding {
        match validated {
            Ok(()) => Finding::ok(ok),
            Err(refusal) => Finding::failed(refusal),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_its_field_first() {
        let r = Refusal::new(
            "image",
            "a docker template needs an image (or WORKER_IMAGE)",
        );
        assert_eq!(
            r.to_string(),
            "image: a docker template needs an image (or WORKER_IMAGE)"
        );
        assert_eq!(Finding::of(Err(r.clone()), "usable"), Finding::failed(r));
        assert_eq!(Finding::of(Ok(()), "usable"), Finding::ok("usable"));
    }
}
