//! What a container or pod worker receives in its environment (the contract's list).

use super::{BackendError, CreateSpec};
use crate::settings::egress::MODEL_ROUTE;
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
    if spec.template.egress.fenced() {
        let fence = container.fence.as_ref().ok_or_else(|| {
            BackendError::Internal(format!(
                "template {} fences its workers, but EGRESS_PROXY_URL is not set",
                spec.template.name
            ))
        })?;
        let fenced = fenced_env(&spec.worker_id, &spec.template, fence);
        env.retain(|(k, _)| !fenced.iter().any(|(f, _)| f == k));
        env.extend(fenced);
    }
    Ok(env)
}

/// What a fenced worker reaches the world with: the proxy for everything (its placeholder as
/// the proxy's credentials), the model route for the model (the placeholder as its token: the
/// worker never holds the model key), and one URL per route of its template.
pub fn fenced_env(
    worker_id: &str,
    template: &crate::settings::templates::Template,
    fence: &crate::settings::Fence,
) -> Vec<(String, String)> {
    let placeholder = fence.key.placeholder(worker_id);
    let placeholder = placeholder.expose();
    let (scheme, authority) = fence
        .proxy_url
        .split_once("://")
        .unwrap_or(("http", &fence.proxy_url));
    let authority = authority.split('/').next().unwrap_or(authority);
    let host = authority
        .rsplit_once(':')
        .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
        .map_or(authority, |(h, _)| h);
    let proxy = format!("{scheme}://{worker_id}:{placeholder}@{authority}");
    let pair = |name: &str, value: String| (name.to_string(), value);
    let mut env = vec![
        pair("A2A_EGRESS_URL", fence.proxy_url.clone()),
        pair("A2A_EGRESS_TOKEN", placeholder.to_string()),
        pair(
            "ANTHROPIC_BASE_URL",
            format!("{}/{MODEL_ROUTE}", fence.proxy_url),
        ),
        pair("ANTHROPIC_AUTH_TOKEN", placeholder.to_string()),
    ];
    for name in ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"] {
        env.push(pair(name, proxy.clone()));
    }
    for name in ["NO_PROXY", "no_proxy"] {
        env.push(pair(name, host.to_string()));
    }
    for r in &template.egress_routes {
        let var = format!(
            "A2A_EGRESS_ROUTE_{}",
            r.name.to_ascii_uppercase().replace('-', "_")
        );
        env.push((var, format!("{}/{}", fence.proxy_url, r.name)));
    }
    env
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
