//! What a container or pod worker receives in its environment (the contract's list).

use super::CreateSpec;
use crate::settings::ContainerSettings;

/// `NAME=value` entries for a worker reachable at `a2a_url`.
pub fn environment(
    spec: &CreateSpec,
    a2a_url: &str,
    container: &ContainerSettings,
    anthropic_auth_token: Option<&str>,
) -> Vec<String> {
    let mut env = vec![
        format!("A2A_PUBLIC_URL={a2a_url}"),
        format!("{}={}", container.token_env, spec.token.expose()),
        format!("A2A_AGENT_NAME=claude-interactive-{}", spec.worker_id),
        "AGENT_TYPE=service".to_string(),
        format!("LISTEN=:{}", container.port),
        format!("WORKER_ID={}", spec.worker_id),
        format!("WORKER_TASK={}", spec.task),
        format!("ANTHROPIC_BASE_URL={}", container.anthropic_base_url),
        format!("ANTHROPIC_MODEL={}", container.anthropic_model),
    ];
    if let Some(token) = anthropic_auth_token {
        env.push(format!("ANTHROPIC_AUTH_TOKEN={token}"));
    }
    env
}
