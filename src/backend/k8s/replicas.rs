//! The controller's own replicas, found the Kubernetes way: the running pods of the replica
//! selector (`K8S_REPLICA_IP`, `K8S_REPLICA_SELECTOR`). Not part of the backend seam: the
//! composition root asks [`K8sBackend::discovery`] for it and hands it to the replicas layer.

use std::net::IpAddr;
use std::sync::Arc;

use super::K8sBackend;
use crate::replicas::discovery::Discovery;
use crate::settings::ReplicaSettings;

/// The replicas of one controller deployment, listed by the API server.
struct Pods {
    backend: Arc<K8sBackend>,
    replica: ReplicaSettings,
}

impl K8sBackend {
    /// Its replicas, when the settings say this controller is one of several.
    pub fn discovery(self: &Arc<Self>) -> Option<Arc<dyn Discovery>> {
        let replica = self.k8s.replica.clone()?;
        Some(Arc::new(Pods {
            backend: Arc::clone(self),
            replica,
        }))
    }
}

impl Discovery for Pods {
    fn own(&self) -> IpAddr {
        self.replica.ip
    }

    /// The running pods of the replica selector that have an IP (one in its grace period
    /// still answers until it exits).
    fn replicas(&self) -> Result<Vec<IpAddr>, String> {
        let pods = self
            .backend
            .select(std::slice::from_ref(&self.replica.selector))
            .map_err(|e| e.to_string())?;
        Ok(pods
            .iter()
            .filter(|p| p.status.phase == "Running")
            .filter_map(|p| p.status.pod_ip.parse().ok())
            .collect())
    }
}
