//! Replica discovery, a seam of its own: where a controller that is one of several replicas
//! of one deployment finds the others. It is not a backend's job — a backend runs workers —
//! though the engine that runs the controller is often where its replicas are listed
//! (Kubernetes: the pods of the replica selector). The composition root (`lib.rs`) builds one
//! where the settings name one; a controller on its own has none.
//!
//! This file imports nothing of the crate, so whatever lists replicas can implement it.

use std::net::IpAddr;

/// Where this controller's replicas are.
pub trait Discovery: Send + Sync {
    /// This controller's own address among them.
    fn own(&self) -> IpAddr;

    /// The addresses of all the replicas that run now, this one included; why not, in one
    /// line.
    fn replicas(&self) -> Result<Vec<IpAddr>, String>;
}
