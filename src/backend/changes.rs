//! The change stream, an ability of its own: a backend whose engine tells of changes to its
//! workers as they happen answers [`Backend::changes`](super::Backend::changes) with it; the
//! watch source follows it. Without one, watchers rely on listing alone.

use super::{BackendError, Worker};

/// What an engine's change stream told ([`Changes::follow`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The worker with this id changed (or may have): [`Changes::worker`] says how it is now.
    Worker(String),
    /// Something changed that the event does not tie to one worker: list them all.
    Any,
}

/// An engine's change stream of this controller's workers.
pub trait Changes: Send + Sync {
    /// Follows the stream, calling `changed` after each change (it says whether to go on).
    /// Returns when `changed` says stop, when the stream ends (the caller follows again, and
    /// lists: nothing is missed), or fails. The events only say *which* worker changed (or
    /// that something did); what it is now is read from the engine ([`Changes::worker`], or a
    /// list), so a stream that reconnects or runs late can neither lose nor invent an event.
    /// Events that change nothing a list shows (an exec, an unclaimed pool member) need not
    /// be told.
    fn follow(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError>;

    /// One worker this controller owns, as a list would show it, read from the engine now;
    /// `None` when it owns none by that id (any more). Asked after each [`Change::Worker`]:
    /// one engine call instead of a list of every worker.
    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError>;
}
