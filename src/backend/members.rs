//! Warm pools, as they cross the seam: a pool member as a backend lists it, what starting one
//! takes, how a claim can fail, and the activation contract's client, which every container
//! backend speaks the same way.
//!
//! **The activation contract** (what a worker image must do to be pooled; the README says it
//! for image authors):
//! - Started as a member, its environment has `A2A_POOL_MEMBER` (its name) and
//!   `A2A_ACTIVATION_SHA256` (SHA-256, hex, of its activation secret) and no task, worker id or
//!   token. It answers `GET /.well-known/agent-card.json` with a card whose
//!   `capabilities.extensions` lists [`ACTIVATION_EXTENSION`], and 401 to every other A2A call.
//! - `POST /activate` with `Authorization: Bearer <secret>` and the JSON body
//!   `{"worker_id", "task", "token", "a2a_url", "agent_name", "env"}` binds it: it answers 200
//!   only once it serves as that worker (its card's URL `a2a_url`, the bearer token `token`);
//!   `env` is the environment a worker started cold would have had. A wrong secret is 401, a
//!   second activation 409.
//! - A Docker image says it speaks the contract with the image label [`IMAGE_LABEL`]`=v1`.
//!
//! The secret is derived by the control layer from the pool key and the member's name and
//! nonce (labels hold the nonce and the key's id, never the secret); the member holds only its
//! hash, so nothing in the engine opens a member.

use std::time::{Duration, Instant};

use super::{BackendError, CreateSpec};
use crate::settings::templates::Template;
use crate::settings::ContainerSettings;
use crate::token::Token;

/// What a member's unbound Agent Card lists in `capabilities.extensions` (by `uri`).
pub const ACTIVATION_EXTENSION: &str = "urn:a2a-worker-controller:activation:v1";
/// The image label (Docker) with which an image says it speaks the contract (`v1`).
pub const IMAGE_LABEL: &str = "a2a-worker-controller.activation";

/// How a member is, as its engine shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// Made, not running yet (or not answering: the pool's own record says).
    Starting,
    /// Running, unclaimed.
    Ready,
    /// Being claimed by a create (this replica's or another's).
    Claiming,
    /// Ended (exited, failed): removed and replaced.
    Ended,
}

impl MemberState {
    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Starting => "starting",
            MemberState::Ready => "ready",
            MemberState::Claiming => "claiming",
            MemberState::Ended => "ended",
        }
    }
}

/// An unbound (or being claimed) member of a template's pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMember {
    /// Its name when started (its slot's name), which its label keeps.
    pub name: String,
    /// The engine's id of it (container id, pod uid).
    pub id: String,
    /// Where the controller reaches it (`http://host:port`); `""` when only a look at the
    /// engine at the claim says (a Docker network's address).
    pub address: String,
    pub template: String,
    /// The template's fingerprint it was started from.
    pub revision: String,
    /// The id of the pool key its secret comes from.
    pub key_id: String,
    pub nonce: String,
    pub state: MemberState,
    /// When the engine made it (Unix milliseconds).
    pub created_ms: u64,
}

/// What starting a member takes.
#[derive(Debug, Clone)]
pub struct MemberSpec {
    /// Its slot's name ([`super::labels::member_name`]).
    pub name: String,
    pub template: std::sync::Arc<Template>,
    pub revision: String,
    pub key_id: String,
    pub nonce: String,
    /// SHA-256, hex, of its activation secret.
    pub activation_sha256: String,
}

impl MemberSpec {
    /// The labels a member started from this spec carries.
    pub fn labels(&self) -> super::labels::MemberLabels {
        super::labels::MemberLabels {
            member: self.name.clone(),
            template: self.template.name.clone(),
            revision: self.revision.clone(),
            key_id: self.key_id.clone(),
            nonce: self.nonce.clone(),
        }
    }
}

/// How a member is activated at a claim.
#[derive(Debug, Clone)]
pub struct Activation {
    /// The member's secret (derived from the pool key, its name and nonce).
    pub secret: Token,
    /// How long the member has to answer.
    pub timeout: Duration,
}

/// Why a claim did not give a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// Another create took the member first: try another.
    Lost,
    /// The member could not be bound (it did not answer its activation in time, refused it,
    /// ended): it has been removed; try another.
    Broken(String),
    /// The task's own answer (it has a worker already, the engine refused): no other member
    /// would do better.
    Task(BackendError),
}

/// The worker a claim made for `spec`, reached at `a2a_url`: owned exactly like one created
/// cold (its creation time is the claim's, as its `claimed-at` label says).
pub fn claimed_worker(
    kind: super::BackendKind,
    spec: &super::CreateSpec,
    a2a_url: String,
) -> super::Worker {
    super::Worker {
        a2a_url,
        ..super::Worker::new(
            kind,
            &spec.worker_id,
            &spec.task,
            super::WorkerState::Running,
            crate::time::rfc3339_secs(crate::time::now_millis() / 1000),
        )
        .expiring(spec.expires_at)
        .tagged(spec.metadata.clone())
        .scoped(spec.scope.clone())
        .templated(spec.template.name.clone())
        .hashed(spec.token.hash())
    }
}

/// One engine's steps of a claim; [`claim`] runs them in the protocol's order. Each step
/// that fails after the activation cleans up after itself (the member, a binding).
pub trait ClaimSteps: super::Backend {
    /// What step 2 made, which step 3 commits.
    type Bound;
    /// The URL the claimed worker will serve at (a member without an address is `Broken`).
    fn worker_url(&self, member: &PoolMember, spec: &CreateSpec) -> Result<String, ClaimError>;
    /// What a worker's environment is made from: the container settings and the model
    /// route's key.
    fn worker_settings(&self) -> (&ContainerSettings, Option<&str>);
    /// The environment a worker started cold would have had, at `url`.
    fn environment(&self, spec: &CreateSpec, url: &str) -> Result<Environment, BackendError> {
        let (container, key) = self.worker_settings();
        super::worker_env::environment(spec, url, container, key)
    }
    /// Refuses (`Task`) when the task has its worker already, or a claim is binding one.
    fn task_free(&self, spec: &CreateSpec) -> Result<(), ClaimError>;
    /// Whether the member is still unclaimed as listed: the pool's list may be a second old,
    /// and a member another replica took or removed meanwhile is passed over at once.
    fn still_unclaimed(&self, member: &PoolMember) -> Result<bool, ClaimError>;
    /// Where the member answers its activation, reaching `url` once claimed.
    fn activation_base(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        url: &str,
    ) -> Result<String, ClaimError>;
    /// Removes a member whose activation failed.
    fn discard(&self, member: &PoolMember);
    /// Step 2: the worker's identity bound to the member.
    fn bind(&self, member: &PoolMember, spec: &CreateSpec) -> Result<Self::Bound, ClaimError>;
    /// Step 3: the commit, which the engine gives one claim of the task (a cold create or
    /// another claim may win it: then this member goes, and so does its binding).
    fn commit(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        bound: Self::Bound,
    ) -> Result<(), ClaimError>;
}

/// A worker's environment, as `worker_env` builds it.
pub type Environment = Vec<(String, String)>;

/// The claim protocol, one for every engine: the member's URL and environment, the task free
/// and the member unclaimed, then (1) the activation, which the member takes once — of claims
/// racing for it (from any replica) one is answered 200, the others 409 and try another —
/// (2) the binding, (3) the commit. The worker is owned exactly like one created cold. An
/// engine's refusal never carries the worker's token (engines may quote what they were sent).
pub fn claim<S: ClaimSteps>(
    steps: &S,
    member: &PoolMember,
    spec: &CreateSpec,
    activation: &Activation,
) -> Result<super::Worker, ClaimError> {
    claim_unredacted(steps, member, spec, activation).map_err(|e| match e {
        ClaimError::Task(e) => ClaimError::Task(e.redact(&spec.token)),
        e => e,
    })
}

/// [`claim`], its refusals as the engine said them.
fn claim_unredacted<S: ClaimSteps>(
    steps: &S,
    member: &PoolMember,
    spec: &CreateSpec,
    activation: &Activation,
) -> Result<super::Worker, ClaimError> {
    let a2a_url = steps.worker_url(member, spec)?;
    let env = steps
        .environment(spec, &a2a_url)
        .map_err(ClaimError::Task)?;
    steps.task_free(spec)?;
    if !steps.still_unclaimed(member)? {
        return Err(ClaimError::Lost);
    }
    let base = steps.activation_base(member, spec, &a2a_url)?;
    let body = activation_body(spec, &a2a_url, &env);
    let agent = super::api_call::worker_agent(activation.timeout);
    match activate(&agent, &base, activation, &body) {
        Ok(()) => {}
        Err(ActivateError::Taken) => return Err(ClaimError::Lost),
        Err(ActivateError::Failed(why)) => {
            steps.discard(member);
            return Err(ClaimError::Broken(format!("member {}: {why}", member.name)));
        }
    }
    spec.progress
        .step("a started worker from the pool took its task");
    let bound = steps.bind(member, spec)?;
    steps.commit(member, spec, bound)?;
    spec.progress.step("ready");
    Ok(claimed_worker(super::Backend::kind(steps), spec, a2a_url))
}

/// `POST <base>/activate` until the member answers or `timeout` passes: a member that is
/// still starting refuses connections for a moment. `body` is the JSON the contract names.
pub fn activate(
    agent: &ureq::Agent,
    base: &str,
    activation: &Activation,
    body: &serde_json::Value,
) -> Result<(), ActivateError> {
    activate_once(agent, base, activation, body).map_err(|(status, why)| match status {
        Some(409) => ActivateError::Taken,
        _ => ActivateError::Failed(why),
    })
}

/// Why an activation was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActivateError {
    /// The member was activated already (409): by a claim that raced this one, or earlier.
    Taken,
    /// It refused otherwise, or did not answer in time (one line why).
    Failed(String),
}

fn activate_once(
    agent: &ureq::Agent,
    base: &str,
    activation: &Activation,
    body: &serde_json::Value,
) -> Result<(), (Option<u16>, String)> {
    let deadline = Instant::now() + activation.timeout;
    let url = format!("{base}/activate");
    let text = body.to_string();
    let mut pause = Duration::from_millis(2);
    loop {
        let sent = agent
            .post(&url)
            .header(
                "Authorization",
                &format!("Bearer {}", activation.secret.expose()),
            )
            .header("Content-Type", "application/json")
            .send(text.as_str());
        match sent {
            Ok(r) => {
                let status = r.status().as_u16();
                let why = match status {
                    200 => return Ok(()),
                    401 => "the member refused its activation secret (401): it was started with another pool key".to_string(),
                    409 => "the member was activated already (409)".to_string(),
                    404 | 405 => format!(
                        "the member does not speak the activation contract ({status} at /activate)"
                    ),
                    other => format!("the member answered its activation with {other}"),
                };
                return Err((Some(status), why));
            }
            Err(e) if Instant::now() + pause < deadline && is_not_yet(&e) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(20));
            }
            Err(e) => {
                return Err((
                    None,
                    format!(
                        "the member did not answer its activation within {}s: {e}",
                        activation.timeout.as_secs_f32()
                    ),
                ))
            }
        }
    }
}

/// A member that is not listening yet (its connection refused): asked again.
fn is_not_yet(e: &ureq::Error) -> bool {
    matches!(e, ureq::Error::Io(io) if matches!(io.kind(), std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::ConnectionReset))
        || matches!(e, ureq::Error::ConnectionFailed)
}

/// Whether an unbound member's Agent Card (its JSON) says it speaks the contract.
pub fn speaks_contract(card: &serde_json::Value) -> bool {
    card["capabilities"]["extensions"]
        .as_array()
        .is_some_and(|exts| {
            exts.iter()
                .any(|e| e["uri"].as_str() == Some(ACTIVATION_EXTENSION))
        })
}

/// `GET <base><card path>` of a started member, and whether it speaks the contract; `Err`
/// when it does not answer (yet).
/// A started member at `base` (of image `image`) answers its card as an unbound member: it
/// speaks the contract, or it cannot be pooled (an error saying so).
pub fn check_member(base: &str, image: &str) -> Result<(), BackendError> {
    match member_card(&super::api_call::worker_agent(Duration::from_secs(2)), base) {
        Ok(true) => Ok(()),
        Ok(false) => Err(BackendError::Internal(format!(
            "image {image} does not speak the activation contract: its card lists no {ACTIVATION_EXTENSION} extension, so it cannot be pooled"
        ))),
        Err(why) => Err(BackendError::NotReady(format!("its card: {why}"))),
    }
}

pub fn member_card(agent: &ureq::Agent, base: &str) -> Result<bool, String> {
    let url = format!("{base}{}", crate::settings::templates::DEFAULT_READY_PATH);
    let mut r = agent.get(&url).call().map_err(|e| e.to_string())?;
    if r.status().as_u16() != 200 {
        return Err(format!("its card answered {}", r.status().as_u16()));
    }
    let card: serde_json::Value = r
        .body_mut()
        .with_config()
        .limit(1 << 20)
        .read_json()
        .map_err(|e| format!("its card is not JSON: {e}"))?;
    Ok(speaks_contract(&card))
}

/// The activation's body: who the member is from now on, and the environment a cold worker
/// would have had (the template's own, the contract's variables).
pub fn activation_body(
    spec: &super::CreateSpec,
    a2a_url: &str,
    env: &[(String, String)],
) -> serde_json::Value {
    let env: serde_json::Map<String, serde_json::Value> = env
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
        .collect();
    serde_json::json!({
        "worker_id": spec.worker_id,
        "task": spec.task,
        "token": spec.token.expose(),
        "a2a_url": a2a_url,
        "agent_name": format!("claude-interactive-{}", spec.worker_id),
        "env": env,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_card_says_whether_it_speaks_the_contract() {
        let yes = serde_json::json!({"capabilities": {"extensions": [
            {"uri": "urn:other"}, {"uri": ACTIVATION_EXTENSION}]}});
        assert!(speaks_contract(&yes));
        assert!(!speaks_contract(
            &serde_json::json!({"capabilities": {"streaming": true}})
        ));
        assert!(!speaks_contract(&serde_json::json!({})));
    }
}
