//! What the Kubernetes backend validates: a template without the API (`template_refusal`),
//! and what `check` asks the API server, and the dry run at startup.
//!
//! - One `SelfSubjectAccessReview` per verb the backend uses (every authenticated user may
//!   ask about itself: no extra permission is needed), so a Role without `watch` or `delete`
//!   fails `check` instead of the first stop.
//! - A worker pod created with `dryRun=All` (and `fieldValidation=Strict`): validation,
//!   PodSecurity and quota admission all run on a dry run, nothing is stored. At startup the
//!   same dry run turns a configuration the API will always refuse into a startup error.

use serde_json::{json, Value};

use super::api::{ApiError, Method};
use super::refusals::{api_error, create_error, TEMPLATE_HINT};
use super::{labels, pod, K8sBackend};
use std::sync::Arc;

use crate::backend::{Backend, BackendError, CreateSpec, Finding, Progress, Refusal, Template};
use crate::token::{random_hex, Token};

/// `(verb, resource, subresource)` of every call the backend makes.
const VERBS: [(&str, &str, &str); 7] = [
    ("create", "pods", ""),
    ("get", "pods", ""),
    ("list", "pods", ""),
    ("watch", "pods", ""),
    ("delete", "pods", ""),
    ("get", "pods", "log"),
    ("list", "events", ""),
];

/// What a verb is for, said when it is missing.
fn needed_for(verb: &str, resource: &str, sub: &str) -> &'static str {
    match (verb, resource, sub) {
        ("create", "pods", "") => "create fails",
        ("get", "pods", "") | ("list", "pods", "") => "list, stop and create fail",
        ("watch", "pods", "") => "create polls for readiness instead of watching",
        ("delete", "pods", "") => "stop fails and failed creates leave their pods",
        ("get", "pods", "log") => "logs fails",
        _ => "a worker that never gets ready is reported without the probe's failure",
    }
}

/// Validation's first step: a k8s template needs an image, uses the cluster's network, and
/// its own pod template follows the rules `K8S_POD_TEMPLATE` does.
pub(super) fn template_refusal(template: &Template) -> Result<(), Refusal> {
    if template.image.is_empty() {
        return Err(Refusal::new(
            "image",
            "a k8s template needs an image (or WORKER_IMAGE)",
        ));
    }
    if template.network.is_some() {
        return Err(Refusal::new(
            "network",
            "applies to the docker backend only (pods use the cluster's network)",
        ));
    }
    match &template.pod_template {
        Some(own) => super::pod::check_template(&own.value)
            .map_err(|why| Refusal::new("pod_template", format!("{}: {why}", own.path.display()))),
        None => Ok(()),
    }
}

impl K8sBackend {
    pub(super) fn findings(&self) -> Vec<Finding> {
        let mut out = Vec::new();
        match self.health() {
            Ok(()) => out.push(Finding::ok(format!(
                "the API server {} answers (namespace {})",
                self.api.base(),
                self.namespace
            ))),
            Err(e) => {
                out.push(Finding::failed(format!(
                    "the API server {} (namespace {}): {e}",
                    self.api.base(),
                    self.namespace
                )));
                if matches!(e, BackendError::Unavailable(_)) {
                    return out;
                }
            }
        }
        for (verb, resource, sub) in VERBS {
            let what = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            let optional = resource == "events";
            match self.may(verb, resource, sub) {
                Ok((true, _)) => out.push(Finding::ok(format!("may {what}"))),
                Ok((false, why)) if optional => out.push(Finding::ok(format!(
                    "may not {what} (optional: {}){why}",
                    needed_for(verb, resource, sub)
                ))),
                Ok((false, why)) => out.push(Finding::failed(format!(
                    "may not {what}: {}{why}",
                    needed_for(verb, resource, sub)
                ))),
                Err(e) => out.push(Finding::failed(format!(
                    "cannot ask whether it may {what}: {e}"
                ))),
            }
        }
        out.extend(self.copy_job_finding());
        out
    }

    /// With `WORKSPACE_COPY_IMAGE` set, whether the Role lets copy Jobs run (create, get and
    /// delete jobs in group batch).
    fn copy_job_finding(&self) -> Option<Finding> {
        let image = self.container.copy_image.as_deref()?;
        for verb in ["create", "get", "delete"] {
            match self.may_in("batch", verb, "jobs", "") {
                Ok((true, _)) => {}
                Ok((false, why)) => {
                    return Some(Finding::failed(format!(
                        "may not {verb} jobs: a workspace copy of a storage class that does not clone fails{why}"
                    )))
                }
                Err(e) => {
                    return Some(Finding::failed(format!(
                        "cannot ask whether it may {verb} jobs: {e}"
                    )))
                }
            }
        }
        Some(Finding::ok(format!(
            "workspace copies by a Job of {image}: may create, get and delete jobs"
        )))
    }

    /// Whether the controller may `verb` `resource` in its namespace, and RBAC's reason.
    pub(super) fn may(
        &self,
        verb: &str,
        resource: &str,
        sub: &str,
    ) -> Result<(bool, String), BackendError> {
        self.may_in("", verb, resource, sub)
    }

    /// [`Self::may`] for a resource of API group `group` (`""`: the core group).
    fn may_in(
        &self,
        group: &str,
        verb: &str,
        resource: &str,
        sub: &str,
    ) -> Result<(bool, String), BackendError> {
        let mut attributes = json!({"namespace": self.namespace, "verb": verb,
            "group": group, "resource": resource});
        if !sub.is_empty() {
            attributes["subresource"] = json!(sub);
        }
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        });
        let (_, body) = self
            .api
            .call(
                Method::Post,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                Some(&review),
            )
            .map_err(api_error)?;
        let answer: Value = serde_json::from_slice(&body)
            .map_err(|e| BackendError::Internal(format!("unexpected access review: {e}")))?;
        let allowed = answer["status"]["allowed"].as_bool().unwrap_or(false);
        let reason = answer["status"]["reason"].as_str().unwrap_or("");
        let reason = if reason.is_empty() {
            String::new()
        } else {
            format!(" ({reason})")
        };
        Ok((allowed, reason))
    }

    /// Sends a worker pod of `template` as a create would, with `dryRun=All`; the pod's name
    /// on success.
    pub(super) fn dry_run(&self, template: &Template) -> Result<String, BackendError> {
        let suffix = random_hex(4).map_err(|e| {
            BackendError::Internal(format!("the system random generator failed: {e}"))
        })?;
        let token = Token::generate().map_err(|e| {
            BackendError::Internal(format!("the system random generator failed: {e}"))
        })?;
        let spec = CreateSpec {
            worker_id: format!("dryrun{suffix}"),
            task: format!("a2a-check-{suffix}"),
            scope: crate::backend::ADMIN_SCOPE.to_string(),
            token,
            expires_at: None,
            metadata: Default::default(),
            template: Arc::new(template.clone()),
            progress: Progress::default(),
        };
        let name = labels::pod_name(&self.controller_id, &spec.scope, &spec.task);
        let body = self.manifest(&spec, &name)?;
        let path = format!("{}?dryRun=All&fieldValidation=Strict", self.pods_path());
        match self.api.call(Method::Post, &path, Some(&body)) {
            Ok(_) => Ok(name),
            Err(e @ ApiError::Unreachable(_)) => Err(api_error(e)),
            Err(e) => {
                Err(create_error(e, self.pod_template(template).is_some()).redact(&spec.token))
            }
        }
    }

    /// The startup dry run: a configuration the API refuses stops startup with one line
    /// naming the setting; an API that cannot be asked now (unreachable, RBAC, a quota in
    /// use) only warns, and `/readiness` says the rest.
    pub(super) fn validate_template(&self, template: &Template) -> Result<(), String> {
        let own = template.pod_template.as_ref();
        let setting = match own {
            Some(_) => format!(
                "WORKER_TEMPLATES_FILE (template {:?}, pod_template)",
                template.name
            ),
            None => "K8S_POD_TEMPLATE".to_string(),
        };
        let path = own
            .map(|p| p.path.clone())
            .or_else(|| self.k8s.pod_template.clone());
        match self.dry_run(template) {
            Ok(_) => Ok(()),
            Err(BackendError::Rejected(why)) => Err(match path {
                // The line names the setting already.
                Some(path) if why.ends_with(TEMPLATE_HINT) => format!(
                    "setting {setting} is invalid: the API server refuses the worker pod built with {}: {}",
                    path.display(),
                    why.trim_end_matches(TEMPLATE_HINT)
                ),
                Some(path) => format!(
                    "setting {setting} is invalid: the API server refuses the worker pod built with {}: {why}",
                    path.display()
                ),
                None if template.name != crate::backend::DEFAULT_TEMPLATE => format!(
                    "setting WORKER_TEMPLATES_FILE is invalid: the API server refuses the worker pod of template {:?} (image {}): {why}",
                    template.name, template.image
                ),
                None => format!(
                    "the API server refuses the worker pod this configuration builds (WORKER_IMAGE, WORKER_MEMORY, WORKER_CPUS, K8S_NAMESPACE): {why}"
                ),
            }),
            Err(e) => {
                log::warn!(
                    "the worker pod of template {:?} could not be checked with a dry run at startup: {e}",
                    template.name
                );
                Ok(())
            }
        }
    }

    /// What `check` proves of one template: its workspace's and its pool's permissions, a
    /// pool claim's binding pod and a worker pod pass a dry run.
    pub(super) fn template_finding(&self, template: &Template) -> Finding {
        if let Err(refusal) = template_refusal(template) {
            return Finding::failed(refusal);
        }
        if let Some(why) = self.fence_refusal(template) {
            return Finding::failed(why);
        }
        if template.workspace.is_some() {
            for verb in ["create", "get", "list", "patch", "delete"] {
                match self.may(verb, "persistentvolumeclaims", "") {
                    Ok((true, _)) => {}
                    Ok((false, why)) => {
                        return Finding::failed(format!(
                        "its workspace needs the Role to allow {verb} persistentvolumeclaims{why}"
                    ))
                    }
                    Err(e) => {
                        return Finding::failed(format!(
                            "cannot ask whether it may {verb} persistentvolumeclaims: {e}"
                        ))
                    }
                }
            }
        }
        if template.pool.is_kept() {
            match self.may("patch", "pods", "") {
                Ok((true, _)) => {}
                Ok((false, why)) => {
                    return Finding::failed(format!(
                    "its pool needs the Role to allow patch pods (a claim labels its member){why}"
                ))
                }
                Err(e) => {
                    return Finding::failed(format!("cannot ask whether it may patch pods: {e}"))
                }
            }
            if let Err(e) = self.dry_run_binding(template) {
                return Finding::failed(format!(
                    "the dry run of a pool claim's binding pod was refused: {e}"
                ));
            }
        }
        match self.dry_run(template) {
            Ok(name) => Finding::ok(format!(
                "image {}: a worker pod passes validation and admission (dry run of {name}: nothing created){}{}",
                template.image,
                if template.workspace.is_some() { "; may keep its workspace claims" } else { "" },
                if template.pool.is_kept() {
                    "; may patch pods, and a claim's binding pod passes too (whether the image speaks the activation contract is asked of each member's card: the API cannot read image labels)"
                } else {
                    ""
                }
            )),
            Err(e) => Finding::failed(format!("the dry run of a worker pod was refused: {e}")),
        }
    }

    /// A claim's binding pod for template `t`, sent as a dry run (nothing is created): what
    /// `check` asks, so a quota or an admission policy that would refuse it is found there.
    pub(super) fn dry_run_binding(&self, t: &crate::backend::Template) -> Result<(), BackendError> {
        let suffix = crate::token::random_hex(4).map_err(|e| {
            BackendError::Internal(format!("the system random generator failed: {e}"))
        })?;
        let name = labels::pod_name(
            &self.controller_id,
            crate::backend::ADMIN_SCOPE,
            &format!("a2a-check-{suffix}"),
        );
        let body = pod::binding_manifest(
            &name,
            &self.namespace,
            &self.controller_id,
            ("a2a-check-member", "00000000-0000-0000-0000-000000000000"),
            "dryrun",
            &t.image,
        );
        let path = format!("{}?dryRun=All&fieldValidation=Strict", self.pods_path());
        self.api
            .call(Method::Post, &path, Some(&body))
            .map(|_| ())
            .map_err(|e| create_error(e, false))
    }
}
