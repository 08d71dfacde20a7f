//! What a container or pod worker receives in its environment (the contract's list).

use super::CreateSpec;
use crate::settings::ContainerSettings;

/// `(NAME, value)` pairs for a worker reachable at `a2a_url`, in the contract's order.
pub fn environment(
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
        pair("LISTEN", format!(":{}", container.port)),
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
