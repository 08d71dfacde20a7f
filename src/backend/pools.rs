//! Warm pools, an ability of its own: a backend that keeps them answers
//! [`Backend::pools`](super::Backend::pools) with this, so "has pools" and "implements pools"
//! cannot disagree. What crosses with it (members, their specs, activations, claim errors) is
//! in `members.rs`; the pool itself (sizes, refills, claims' order) is the control layer's.

use super::members::{Activation, ClaimError, MemberSpec, PoolMember};
use super::{BackendError, CreateSpec, Worker};

/// The engine's side of warm pools.
pub trait Pools: Send + Sync {
    /// This controller's pool members that are not workers (unclaimed, or being claimed), of
    /// every template, read from the engine. A claimed member is a worker, and only
    /// [`Backend::list`](super::Backend::list) shows it.
    fn members(&self) -> Result<Vec<PoolMember>, BackendError>;

    /// Starts a member in its slot and waits until it answers its card as an unbound member
    /// (one that does not speak the activation contract is removed and refused).
    /// [`BackendError::WorkerExists`] when the slot is taken (another replica filled it).
    fn start_member(&self, member: &MemberSpec) -> Result<(), BackendError>;

    /// Binds `member` to `spec`'s task, atomically in the engine against every other create
    /// of the task and every other claim of the member (from any replica), activates it, and
    /// returns the worker, owned exactly like one created cold.
    fn claim_member(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        activation: &Activation,
    ) -> Result<Worker, ClaimError>;

    /// Removes a member that is not a worker (drained, ended, stuck in a claim), and what an
    /// interrupted claim left of it. A member that is gone already is not an error.
    fn remove_member(&self, member: &PoolMember) -> Result<(), BackendError>;

    /// Removes what interrupted claims left behind that belongs to no member or worker
    /// (Docker: bindings of containers that are gone); how many.
    fn sweep(&self) -> Result<usize, BackendError>;
}
