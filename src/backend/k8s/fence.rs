//! Fenced workers on Kubernetes (a template whose `egress` is `"none"` or a list): the pod
//! carries the label `a2a-worker-controller/egress=fenced`, and a NetworkPolicy the operator
//! applies once (`scripts/k8s/70-egress.yaml`, named by `EGRESS_NETWORK`) lets pods with that
//! label reach only the egress proxy's pods and the cluster's DNS. One policy serves every
//! fenced template: what each may reach through the proxy is the proxy's to judge, by the
//! template's rules. Enforcement is the CNI's: one that does not enforce NetworkPolicy (the
//! plain bridge plugin) lets a fenced pod out; the docs say so.
//!
//! At startup and in `check`, a fenced template is refused when that NetworkPolicy is missing
//! or does not fence that label's egress. A template's runtime is the pod's
//! `runtimeClassName`: a RuntimeClass that does not exist is refused by the API server's
//! admission on the startup dry run already (a RuntimeClass is cluster-wide: the Role need not
//! read it).

use serde_json::Value;

use super::api::{ApiError, Method};
use super::K8sBackend;
use crate::backend::Template;

use super::pod::{EGRESS_LABEL, FENCED};

impl K8sBackend {
    /// Why template `t`'s fence is not there (`None`: it is, or `t` is not fenced).
    pub(super) fn fence_refusal(&self, t: &Template) -> Option<String> {
        if !t.egress.fenced() {
            return None;
        }
        let name = &self.k8s.egress_policy;
        let path = format!(
            "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies/{name}",
            self.namespace
        );
        let cannot = |why: String| {
            Some(format!(
                "egress: {} cannot be enforced: {why}",
                t.egress.describe()
            ))
        };
        match self.api.call(Method::Get, &path, None) {
            Ok((_, body)) => match serde_json::from_slice::<Value>(&body) {
                Ok(policy) if fences(&policy) => None,
                Ok(_) => cannot(format!(
                    "the NetworkPolicy {name} in namespace {} does not limit the egress of pods labelled {EGRESS_LABEL}={FENCED} (apply scripts/k8s/70-egress.yaml)",
                    self.namespace
                )),
                Err(e) => cannot(format!("the NetworkPolicy {name} could not be read: {e}")),
            },
            Err(ApiError::Status { code: 404, .. }) => cannot(format!(
                "there is no NetworkPolicy {name} in namespace {} (apply scripts/k8s/70-egress.yaml; enforcement needs a CNI that enforces NetworkPolicy)",
                self.namespace
            )),
            Err(ApiError::Status { code: 403, .. }) => cannot(format!(
                "the Role may not get networkpolicies, so the NetworkPolicy {name} cannot be checked (scripts/k8s/20-role.yaml allows it)"
            )),
            Err(e) => cannot(format!("the NetworkPolicy {name} could not be read: {e}")),
        }
    }
}

/// Whether a NetworkPolicy selects fenced pods and limits their egress.
fn fences(policy: &Value) -> bool {
    let spec = &policy["spec"];
    let selects = spec["podSelector"]["matchLabels"][EGRESS_LABEL] == FENCED;
    let egress = spec["policyTypes"]
        .as_array()
        .is_some_and(|t| t.iter().any(|v| v == "Egress"));
    selects && egress
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_policy_fences_only_when_it_selects_the_label_and_limits_egress() {
        let ok = json!({"spec": {"podSelector": {"matchLabels": {EGRESS_LABEL: FENCED}}, "policyTypes": ["Egress"]}});
        assert!(fences(&ok));
        let ingress = json!({"spec": {"podSelector": {"matchLabels": {EGRESS_LABEL: FENCED}}, "policyTypes": ["Ingress"]}});
        assert!(!fences(&ingress));
        let other = json!({"spec": {"podSelector": {}, "policyTypes": ["Egress"]}});
        assert!(!fences(&other));
    }
}
