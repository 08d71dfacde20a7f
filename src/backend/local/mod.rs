//! The local backend: a worker is a WezTerm tab, with no endpoint, recorded in a JSON state
//! file reconciled against the live panes. Being built in steps (issue 9): so far the state
//! file (`store`) and task files (`task`); the WezTerm CLI client, GUI discovery,
//! reconciliation and the `Backend` implementation come next, and until they do
//! `build_backend` refuses `BACKEND=local` with one clear line.

pub(crate) mod store;
pub(crate) mod task;
