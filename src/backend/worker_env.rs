//! What a container or pod worker receives in its environment (the contract's list).

use super::{BackendError, CreateSpec};
use crate::settings::templates::extra_env;
use crate::settings::ContainerSettings;

/// `(NAME, value)` pairs for a worker reachable at `a2a_url`, in the contract's order, then
/// the template's own (which may replace `ANTHROPIC_MODEL` and `ANTHROPIC_BASE_URL`, never
/// another of the contract's), with `A2A_WORKSPACE` when the template has a workspace. A
/// template's secret file that cannot be read now fails the create.
pub fn environment(
    spec: &CreateSpec,
    a2a_url: &str,
    container: &ContainerSettings,
    anthropic_auth_token: Option<&str>,
) -> Result<Vec<(String, String)>, BackendError> {
    let mut env = contract_env(spec, a2a_url, container, anthropic_auth_token);
    if let Some(w) = &spec.template.workspace {
        env.push(("A2A_WORKSPACE".to_string(), w.path.clone()));
    }
    let extra = extra_env(&spec.template).map_err(BackendError::Internal)?;
    env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    env.extend(extra);
    Ok(env)
}

fn contract_env(
    spec: &CreateSpec,
    a2a_url: &str,
    container: &ContainerSettings,
    anthropic_auth_token: Option<&str>,
) -> Vec<(String, String)> {
    let pair = |name: &str, value: String| (name.to_string(), value);
    let mut env = vec![
        pair("A2A_PUBLIC_URL", a2a_url.to_string()),
        pair(&container.token_env, spec.token.expose().to_string()),
        pair(
            "A2A_AGENT_NAME",
            format!("claude-interactive-{}", spec.worker_id),
        ),
        pair("AGENT_TYPE", "service".into()),
        pair("LISTEN", format!(":{}", spec.template.port)),
        pair("WORKER_ID", spec.worker_id.clone()),
        pair("WORKER_TASK", spec.task.clone()),
        pair("ANTHROPIC_MODEL", container.anthropic_model.clone()),
    ];
    // None on Kubernetes unless set: the Docker default names a host no cluster has.
    if !container.anthropic_base_url.is_empty() {
        env.insert(
            env.len() - 1,
            pair("ANTHROPIC_BASE_URL", container.anthropic_base_url.clone()),
        );
    }
    if let Some(token) = anthropic_auth_token {
        env.push(pair("ANTHROPIC_AUTH_TOKEN", token.to_string()));
    }
    env
}

/// The same as Docker's `Env`: `NAME=value` strings.
pub fn as_docker_env(env: &[(String, String)]) -> Vec<String> {
    env.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// What a warm pool's member starts with: who it is and the hash of its activation secret,
/// how it listens, the model settings and the template's plain variables; no task, worker
/// id or token, and no secret (a template's `env_files` and the model token come with its
/// activation, in [`environment`]'s full list).
pub fn member_environment(
    member: &super::MemberSpec,
    container: &ContainerSettings,
) -> Vec<(String, String)> {
    let pair = |name: &str, value: String| (name.to_string(), value);
    let mut env = vec![
        pair("A2A_POOL_MEMBER", member.name.clone()),
        pair("A2A_ACTIVATION_SHA256", member.activation_sha256.clone()),
        pair("AGENT_TYPE", "service".into()),
        pair("LISTEN", format!(":{}", member.template.port)),
        pair("ANTHROPIC_MODEL", container.anthropic_model.clone()),
    ];
    if !container.anthropic_base_url.is_empty() {
        env.push(pair(
            "ANTHROPIC_BASE_URL",
            container.anthropic_base_url.clone(),
        ));
    }
    let extra = &member.template.env;
    env.retain(|(k, _)| !extra.iter().any(|(e, _)| e == k));
    env.extend(extra.iter().cloned());
    env
}
