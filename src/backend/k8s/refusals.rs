//! How the Kubernetes API's refusals become the seam's errors: one mapping for every call, and
//! the one a create's refusal gets (admission, validation, quota, RBAC, told apart as the real
//! API server words them).

use super::super::BackendError;
use super::api::{ApiError, Reason};

/// An API failure as the seam's error, the one mapping for every call (and so for `list`,
/// `/readiness` and `check` alike): unreachable, refusing the controller's credentials, or
/// throttling is `Unavailable`; an RBAC refusal is `Internal` naming the verb and resource
/// (the operator's Role needs fixing); anything else `Internal` with the server's message.
pub(super) fn api_error(e: ApiError) -> BackendError {
    match e {
        ApiError::Unreachable(why) => {
            BackendError::Unavailable(format!("Kubernetes API unreachable: {why}"))
        }
        ApiError::Status {
            reason: Reason::Unauthorized,
            message,
            ..
        } => BackendError::Unavailable(format!(
            "the Kubernetes API refused the controller's credentials: {message}"
        )),
        ApiError::Status {
            reason: Reason::TooManyRequests,
            message,
            ..
        } => BackendError::Unavailable(format!("the Kubernetes API is throttling: {message}")),
        ApiError::Status {
            reason: Reason::Forbidden,
            message,
            ..
        } if is_rbac(&message) => {
            BackendError::Internal(format!("Kubernetes RBAC refused: {message}"))
        }
        ApiError::Status {
            reason: Reason::Forbidden,
            message,
            ..
        } => BackendError::Internal(format!("the Kubernetes API refused: {message}")),
        other @ (ApiError::Status { .. } | ApiError::Protocol(_)) => {
            BackendError::Internal(other.to_string())
        }
    }
}

/// A refused create: admission refusing the pod (PodSecurity, ServiceAccount admission) is
/// the cluster rejecting what this configuration builds; an exhausted ResourceQuota is
/// capacity; an invalid pod (`422`) or a field the API does not know (`400` under
/// `fieldValidation=Strict`) is the configuration's too. As the real server words them
/// (`create403psa.b`, `s27-quota.txt`, `create422noimage.b`, `s15b-template-typo.txt`).
pub(super) fn create_error(e: ApiError, templated: bool) -> BackendError {
    let hint = if templated { TEMPLATE_HINT } else { "" };
    match e {
        ApiError::Status {
            reason: Reason::Forbidden,
            message,
            ..
        } if !is_rbac(&message) => {
            if message.contains("exceeded quota") {
                BackendError::Capacity(format!("a ResourceQuota is used up: {message}"))
            } else if message.contains("failed quota") {
                BackendError::Rejected(format!(
                    "{message} (a ResourceQuota needs the limit: set WORKER_MEMORY / WORKER_CPUS)"
                ))
            } else {
                BackendError::Rejected(format!("{message}{hint}"))
            }
        }
        ApiError::Status {
            code: 400 | 422,
            message,
            ..
        } => BackendError::Rejected(format!("{message}{hint}")),
        other => api_error(other),
    }
}

/// Said after a refusal of a pod built with the operator's template.
pub(super) const TEMPLATE_HINT: &str = " (check K8S_POD_TEMPLATE)";

/// Whether a 403 is RBAC's (`User "..." cannot VERB resource "..."`), not admission's.
fn is_rbac(message: &str) -> bool {
    message.contains("User \"") && message.contains(" cannot ") && message.contains("resource \"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, reason: Reason, message: &str) -> ApiError {
        ApiError::Status {
            code,
            reason,
            message: message.into(),
        }
    }

    #[test]
    fn refusals_are_told_apart_as_the_real_server_words_them() {
        let rbac = r#"pods "p" is forbidden: User "system:serviceaccount:a2a:c" cannot delete resource "pods" in API group "" in the namespace "a2a""#;
        let e = api_error(status(403, Reason::Forbidden, rbac));
        assert!(
            matches!(&e, BackendError::Internal(m) if m.starts_with("Kubernetes RBAC refused")),
            "{e}"
        );
        let e = create_error(status(403, Reason::Forbidden, rbac), false);
        assert!(
            matches!(&e, BackendError::Internal(m) if m.contains("RBAC")),
            "{e}"
        );
        let psa = r#"pods "p" is forbidden: violates PodSecurity "restricted:latest": hostPort (container "side" uses hostPort 8080)"#;
        let e = create_error(status(403, Reason::Forbidden, psa), true);
        assert!(
            matches!(&e, BackendError::Rejected(m) if m.contains("PodSecurity") && m.contains("K8S_POD_TEMPLATE")),
            "{e}"
        );
        let quota = r#"pods "p" is forbidden: exceeded quota: q-pods, requested: pods=1, used: pods=30, limited: pods=30"#;
        let e = create_error(status(403, Reason::Forbidden, quota), false);
        assert!(
            matches!(&e, BackendError::Capacity(m) if m.contains("q-pods")),
            "{e}"
        );
        let needs =
            r#"pods "p" is forbidden: failed quota: q-mem: must specify limits.memory for: worker"#;
        let e = create_error(status(403, Reason::Forbidden, needs), false);
        assert!(
            matches!(&e, BackendError::Rejected(m) if m.contains("WORKER_MEMORY")),
            "{e}"
        );
        let sa = r#"pods "p" is forbidden: error looking up service account a2a/agents: serviceaccount "agents" not found"#;
        assert!(matches!(
            create_error(status(403, Reason::Forbidden, sa), true),
            BackendError::Rejected(_)
        ));
        let invalid = r#"Pod "p" is invalid: spec.containers[1].image: Required value"#;
        assert!(matches!(
            create_error(status(422, Reason::Invalid, invalid), true),
            BackendError::Rejected(_)
        ));
        let e = api_error(status(
            429,
            Reason::TooManyRequests,
            "Too many requests, please try again later.",
        ));
        assert!(matches!(e, BackendError::Unavailable(_)));
    }
}
