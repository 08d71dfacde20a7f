//! Ownership: the five labels every container (and pod) worker carries (owner, worker id,
//! task, scope, template; a sixth for one with a TTL), and the
//! deterministic container name that makes "one worker per task" atomic in the engine.
//! No credential is ever written to a label.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use super::{Metadata, ADMIN_SCOPE, DEFAULT_TEMPLATE};
use crate::hash::{fnv1a64, FNV_OFFSET};

pub const OWNER: &str = "a2a-worker-controller/owner";
pub const WORKER_ID: &str = "a2a-worker-controller/worker-id";
pub const TASK: &str = "a2a-worker-controller/task";
/// Unix seconds; only on a worker created with a TTL. Labels cannot change in place, so the
/// expiry is fixed at create.
pub const EXPIRES_AT: &str = "a2a-worker-controller/expires-at";
/// The creating caller's scope (absent on workers made before scopes: [`ADMIN_SCOPE`]).
pub const SCOPE: &str = "a2a-worker-controller/scope";
/// The template the worker was made from (absent on workers made before templates:
/// [`DEFAULT_TEMPLATE`]).
pub const TEMPLATE: &str = "a2a-worker-controller/template";
/// On a task workspace's volume (Docker): `workspace` for the volume itself, `stamp` for the
/// empty volume whose labels say when the workspace was last used (a volume's labels are
/// fixed at create, so the stamp is made again at each use).
pub const WORKSPACE: &str = "a2a-worker-controller/workspace";
/// A workspace's size as its template said it.
pub const SIZE: &str = "a2a-worker-controller/size";
/// Unix seconds: when the workspace was last used.
pub const LAST_USED: &str = "a2a-worker-controller/last-used";
/// On a warm pool's member: its own name (a claimed member keeps the label under its task's
/// name, which is how a claimed member is told from an unclaimed one).
pub const MEMBER: &str = "a2a-worker-controller/pool-member";
/// On a member: its template's fingerprint when it was started (another drains it).
pub const REVISION: &str = "a2a-worker-controller/pool-revision";
/// On a member: which pool key its activation secret is derived from (an id, not the key).
pub const KEY_ID: &str = "a2a-worker-controller/pool-key";
/// On a member: the random part of what its activation secret is derived from.
pub const NONCE: &str = "a2a-worker-controller/pool-nonce";
/// On a claimed member's binding (a Docker volume whose labels are the worker's identity):
/// the member it binds, `<member name>/<nonce>`.
pub const BINDING: &str = "a2a-worker-controller/binding";
/// The one-way hash of the worker's token ([`crate::token::Token::hash`]): what lets a worker
/// renew itself with its own token while no token is stored.
pub const TOKEN_HASH: &str = "a2a-worker-controller/token-hash";
/// On a worker from a warm pool: when it was claimed (Unix milliseconds), which is when it
/// became its task's worker: its `created_at`, and what a pool that follows the demand counts.
pub const CLAIMED_AT: &str = "a2a-worker-controller/claimed-at";
/// On a Kubernetes workspace claim being filled by a copy Job: when the copy began (Unix
/// seconds). While it is there the claim is no workspace: not listed, never mounted.
pub const COPYING: &str = "a2a-worker-controller/copying";
/// On a Kubernetes copy Job and its pod: the controller id whose copy it is (not
/// [`OWNER`], which would make its pod a worker).
pub const COPY: &str = "a2a-worker-controller/copy";
/// A caller's metadata key `k` is the label (Docker) or annotation (Kubernetes) `META + k`.
pub const META: &str = "a2a-worker-controller.meta/";

/// A worker's identity labels, built the same way on every engine: its id, task, scope,
/// template and (when it has one) expiry. `task` is given as the engine's label takes it
/// (Kubernetes bounds label values: [`task_label_value`]); the owner label and the caller's
/// metadata are each engine's to place (labels on Docker, annotations on Kubernetes).
pub fn identity(
    worker_id: &str,
    task: String,
    scope: &str,
    template: &str,
    expires_at: Option<u64>,
    token_hash: &str,
) -> Vec<(&'static str, String)> {
    let mut labels = vec![
        (WORKER_ID, worker_id.to_string()),
        (TASK, task),
        (SCOPE, scope.to_string()),
        (TEMPLATE, template.to_string()),
    ];
    if let Some(at) = expires_at {
        labels.push((EXPIRES_AT, at.to_string()));
    }
    if !token_hash.is_empty() {
        labels.push((TOKEN_HASH, token_hash.to_string()));
    }
    labels
}

/// The labels of a new worker (Docker's: its [`identity`] with the task whole, the owner,
/// the caller's metadata beside).
pub fn for_worker(
    controller_id: &str,
    own: Vec<(&'static str, String)>,
    metadata: &Metadata,
) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([(OWNER.to_string(), controller_id.to_string())]);
    labels.extend(own.into_iter().map(|(k, v)| (k.to_string(), v)));
    labels.extend(meta_entries(metadata));
    labels
}

/// The caller's metadata as label or annotation entries.
pub fn meta_entries(metadata: &Metadata) -> impl Iterator<Item = (String, String)> + '_ {
    metadata
        .iter()
        .map(|(k, v)| (format!("{META}{k}"), v.clone()))
}

/// The caller's metadata read back from labels or annotations (every other key skipped).
pub fn meta_of<'a>(entries: impl IntoIterator<Item = (&'a String, &'a String)>) -> Metadata {
    entries
        .into_iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(META)?.to_string(), v.clone())))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

/// The label a claim adds to its worker's identity: claimed now.
pub fn claimed_now() -> (&'static str, String) {
    (CLAIMED_AT, crate::time::now_millis().to_string())
}

/// A worker's `created_at`: when it was claimed from a pool, else when the engine made it
/// (`made_ms`), RFC 3339 to the second.
pub fn created_at(claimed_ms: Option<u64>, made_ms: u64) -> String {
    crate::time::rfc3339_secs(claimed_ms.unwrap_or(made_ms) / 1000)
}

/// `key=value` selectors that match this controller's workers (all must match).
pub fn owner_selector(controller_id: &str) -> Vec<String> {
    vec![format!("{OWNER}={controller_id}")]
}

/// Selectors that match one worker of this controller.
pub fn worker_selector(controller_id: &str, worker_id: &str) -> Vec<String> {
    vec![
        format!("{OWNER}={controller_id}"),
        format!("{WORKER_ID}={worker_id}"),
    ]
}

/// A worker's identity read back from labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    pub worker_id: String,
    pub task: String,
    /// Unix seconds; `None` without the label (or with one that is not a number).
    pub expires_at: Option<u64>,
    /// The caller's metadata, from `META` labels (Docker; pods keep it in annotations).
    pub metadata: Metadata,
    /// The creating caller's scope; [`ADMIN_SCOPE`] without the label.
    pub scope: String,
    /// The template it was made from; [`DEFAULT_TEMPLATE`] without the label.
    pub template: String,
    /// Its token's one-way hash; `""` without the label.
    pub token_hash: String,
    /// When it was claimed from a warm pool (Unix milliseconds); `None` for a worker made cold.
    pub claimed_ms: Option<u64>,
}

/// This controller's labels on an object, read from its label map; every other label is
/// skipped without being copied (an engine's list carries a map per container).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ours {
    owner: Option<String>,
    worker_id: Option<String>,
    task: Option<String>,
    expires_at: Option<u64>,
    metadata: Metadata,
    scope: Option<String>,
    template: Option<String>,
    member: Option<String>,
    revision: Option<String>,
    key_id: Option<String>,
    nonce: Option<String>,
    binding: Option<String>,
    token_hash: Option<String>,
    claimed_ms: Option<u64>,
}

/// A pool member's labels: whose it is, what it was started as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLabels {
    pub member: String,
    pub template: String,
    pub revision: String,
    pub key_id: String,
    pub nonce: String,
}

impl Ours {
    /// The member labels, when these are this controller's pool member's.
    pub fn member(&self, controller_id: &str) -> Option<MemberLabels> {
        if self.owner.as_deref() != Some(controller_id) || self.worker_id.is_some() {
            return None;
        }
        Some(MemberLabels {
            member: self.member.clone().filter(|m| !m.is_empty())?,
            template: self.template.clone().unwrap_or_default(),
            revision: self.revision.clone().unwrap_or_default(),
            key_id: self.key_id.clone().unwrap_or_default(),
            nonce: self.nonce.clone().unwrap_or_default(),
        })
    }

    /// The container a binding binds (these are the labels of this controller's binding).
    pub fn binding(&self, controller_id: &str) -> Option<&str> {
        if self.owner.as_deref() != Some(controller_id) {
            return None;
        }
        self.binding.as_deref().filter(|b| !b.is_empty())
    }
}

/// The labels of a new pool member.
pub fn for_member(controller_id: &str, m: &MemberLabels) -> BTreeMap<String, String> {
    BTreeMap::from([
        (OWNER.to_string(), controller_id.to_string()),
        (MEMBER.to_string(), m.member.clone()),
        (TEMPLATE.to_string(), m.template.clone()),
        (REVISION.to_string(), m.revision.clone()),
        (KEY_ID.to_string(), m.key_id.clone()),
        (NONCE.to_string(), m.nonce.clone()),
    ])
}

/// Selectors that match this controller's pool members, claimed or not.
pub fn member_selector(controller_id: &str) -> Vec<String> {
    vec![format!("{OWNER}={controller_id}"), MEMBER.to_string()]
}

/// The name of slot `slot` of template `template`'s pool at `revision`: the engine keeps it
/// unique, so every replica of one controller id fills the same slots (N per controller id,
/// not per process), and a template's new revision fills new ones while the old drain.
/// A DNS-1123 label of at most 63 characters.
pub fn member_name(controller_id: &str, template: &str, revision: &str, slot: u32) -> String {
    let prefix = dns_slug(controller_id, 20);
    let t = dns_slug(template, 16);
    // Of the whole template name and the revision: two templates whose names share their
    // first 16 characters never share a slot.
    let of = format!("{template}/{revision}");
    let hash = crate::hash::fnv1a64(crate::hash::FNV_OFFSET, of.bytes()) as u32;
    format!("{prefix}-pool-{t}-{hash:08x}-{slot}")
}

impl<'de> Deserialize<'de> for Ours {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Ours, D::Error> {
        deserializer.deserialize_map(OursVisitor)
    }
}

struct OursVisitor;

impl<'de> Visitor<'de> for OursVisitor {
    type Value = Ours;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of labels")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ours, A::Error> {
        let mut ours = Ours::default();
        while let Some(Text(key)) = map.next_key::<Text>()? {
            let slot = match key.as_ref() {
                OWNER => &mut ours.owner,
                WORKER_ID => &mut ours.worker_id,
                TASK => &mut ours.task,
                SCOPE => &mut ours.scope,
                TEMPLATE => &mut ours.template,
                MEMBER => &mut ours.member,
                REVISION => &mut ours.revision,
                KEY_ID => &mut ours.key_id,
                NONCE => &mut ours.nonce,
                BINDING => &mut ours.binding,
                TOKEN_HASH => &mut ours.token_hash,
                EXPIRES_AT => {
                    // Not a number: as if absent (the worker is then not reaped).
                    let Text(value) = map.next_value::<Text>()?;
                    ours.expires_at = value.parse().ok();
                    continue;
                }
                CLAIMED_AT => {
                    let Text(value) = map.next_value::<Text>()?;
                    ours.claimed_ms = value.parse().ok();
                    continue;
                }
                other if other.starts_with(META) && other.len() > META.len() => {
                    let key = other[META.len()..].to_string();
                    let Text(value) = map.next_value::<Text>()?;
                    ours.metadata.insert(key, value.into_owned());
                    continue;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            let Text(value) = map.next_value::<Text>()?;
            *slot = Some(value.into_owned());
        }
        Ok(ours)
    }
}

/// A JSON string borrowed from the input when it has no escapes, copied when it has.
struct Text<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text<'de>, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// The worker's identity if the labels carry this controller's marker and a worker id;
/// `None` for anything else, however it is named.
pub fn owned(labels: Option<Ours>, controller_id: &str) -> Option<Owned> {
    let mut labels = labels?;
    let worker_id = labels.worker_id.take().filter(|w| !w.is_empty())?;
    let expires_at = labels.expires_at.take();
    let metadata = std::mem::take(&mut labels.metadata);
    let token_hash = labels.token_hash.take().unwrap_or_default();
    let claimed_ms = labels.claimed_ms.take();
    Some(Owned {
        worker_id,
        expires_at,
        metadata,
        token_hash,
        claimed_ms,
        ..owned_workspace(labels, controller_id)?
    })
}

/// A workspace's identity (scope, template, task label) if its labels carry this controller's
/// marker; a workspace has no worker id, expiry or metadata (`""`, `None`, none).
pub fn owned_workspace(labels: Ours, controller_id: &str) -> Option<Owned> {
    if labels.owner.as_deref() != Some(controller_id) {
        return None;
    }
    Some(Owned {
        worker_id: String::new(),
        task: labels.task.unwrap_or_default(),
        expires_at: None,
        metadata: Metadata::new(),
        token_hash: String::new(),
        claimed_ms: None,
        scope: labels
            .scope
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| ADMIN_SCOPE.to_string()),
        template: labels
            .template
            .filter(|t| !t.is_empty())
            .unwrap_or_else(|| DEFAULT_TEMPLATE.to_string()),
    })
}

/// The container name for a task: `<controller>-<slug>-<hash>`, lowercase DNS-safe, the
/// same for the same (controller id, scope, task) everywhere, so the engine's name uniqueness
/// refuses a second container for the task in a scope even across racing controllers.
pub fn container_name(controller_id: &str, scope: &str, task: &str) -> String {
    let prefix = dns_slug(controller_id, 40);
    let slug = dns_slug(task, 20);
    let hash = task_hash(controller_id, scope, task);
    if slug.is_empty() {
        format!("{prefix}-{hash}")
    } else {
        format!("{prefix}-{slug}-{hash}")
    }
}

/// The pod name for a task: `<controller>-<slug>-<hash>`, a DNS-1123 label of at most 58
/// characters (the limit is 63), the same for the same (controller id, task) everywhere, so the
/// API server's name uniqueness refuses a second pod for the task across replicas.
pub fn pod_name(controller_id: &str, scope: &str, task: &str) -> String {
    let prefix = dns_slug(controller_id, 20);
    let slug = dns_slug(task, 20);
    let hash = &task_hash(controller_id, scope, task)[..16];
    if slug.is_empty() {
        format!("{prefix}-{hash}")
    } else {
        format!("{prefix}-{slug}-{hash}")
    }
}

/// A task as a Kubernetes label value (at most 63 of `[A-Za-z0-9_.-]`, alphanumeric at both
/// ends): a readable slug and 64 bits of hash of the exact task, which itself goes in the
/// annotation of the same key. Equal tasks give equal values, so the label still selects.
pub fn task_label_value(task: &str) -> String {
    let mut slug = String::new();
    for c in task.chars() {
        if slug.len() >= 46 {
            break;
        }
        if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
            slug.push(c);
        } else if !slug.ends_with('-') {
            slug.push('-');
        }
    }
    let slug = slug.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    let hash = format!("{:016x}", fnv1a64(FNV_OFFSET, task.bytes()));
    if slug.is_empty() {
        hash
    } else {
        format!("{slug}-{hash}")
    }
}

/// Whether `value` can be a Kubernetes label value (a worker id given to stop may not be).
pub fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
        && value
            .bytes()
            .next()
            .is_none_or(|b| b.is_ascii_alphanumeric())
        && value
            .bytes()
            .last()
            .is_none_or(|b| b.is_ascii_alphanumeric())
}

/// 128 bits of hash, hex. In [`ADMIN_SCOPE`], FNV-1a over (controller id, task) in two
/// independent 64-bit lanes: the names from before scopes. In any other scope, SHA-256 over
/// (controller id, scope, task): a caller choosing task names cannot aim at another scope's
/// name (FNV collisions can be made on purpose; SHA-256's cannot).
fn task_hash(controller_id: &str, scope: &str, task: &str) -> String {
    if scope != ADMIN_SCOPE {
        let input = [controller_id, scope, task].join("\0");
        return crate::token::hex(&crate::hash::sha256(input.as_bytes())[..16]);
    }
    let bytes = || controller_id.bytes().chain([0u8]).chain(task.bytes());
    let lane = |seed: u64| fnv1a64(seed, bytes());
    format!(
        "{:016x}{:016x}",
        lane(FNV_OFFSET),
        lane(0x8422_2325_cbf2_9ce4)
    )
}

/// Lowercase `[a-z0-9-]`, runs of anything else folded into one `-`, trimmed, at most `max`.
fn dns_slug(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
        if out.len() >= max {
            break;
        }
    }
    out.trim_matches('-').to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn member_names_are_dns_labels_and_apart_for_templates_alike_at_first() {
        let a = member_name("ctl", "reviewer-frontend-a", "0123456789ab", 3);
        let b = member_name("ctl", "reviewer-frontend-b", "0123456789ab", 3);
        assert_ne!(a, b);
        assert!(
            a.starts_with("ctl-pool-reviewer-fronten-") && a.ends_with("-3"),
            "{a}"
        );
        let long = member_name(&"c".repeat(60), &"t".repeat(32), "0123456789ab", 63);
        assert!(long.len() <= 63, "{long}");
    }

    use super::*;

    #[test]
    fn names_are_deterministic_dns_safe_and_distinct() {
        let a = container_name("a2a-worker-controller", ADMIN_SCOPE, "Fix the login bug!");
        assert_eq!(
            a,
            container_name("a2a-worker-controller", ADMIN_SCOPE, "Fix the login bug!")
        );
        assert!(
            a.starts_with("a2a-worker-controller-fix-the-login-bug-"),
            "{a}"
        );
        assert_ne!(
            a,
            container_name("a2a-worker-controller", ADMIN_SCOPE, "fix the login bug!")
        );
        assert_ne!(
            a,
            container_name("other", ADMIN_SCOPE, "Fix the login bug!")
        );
        let odd = container_name("Ctl_1.x", "team-a", "ünï=c,ö\u{1F600}");
        assert!(
            odd.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-'),
            "{odd}"
        );
        assert!(odd.as_bytes()[0].is_ascii_alphanumeric());
        assert!(container_name("c", ADMIN_SCOPE, &"x".repeat(256)).len() < 100);
        // The admin scope's names are those from before scopes (this one was made then).
        assert_eq!(
            a,
            "a2a-worker-controller-fix-the-login-bug-90b63e1607136459559eb6d8686e77e8"
        );
        // Another scope: another name for the same task, the same each time.
        let scoped = container_name("a2a-worker-controller", "team-a", "Fix the login bug!");
        assert_ne!(a, scoped);
        assert_ne!(
            scoped,
            container_name("a2a-worker-controller", "team-b", "Fix the login bug!")
        );
        assert_eq!(
            scoped,
            container_name("a2a-worker-controller", "team-a", "Fix the login bug!")
        );
        assert_eq!(scoped.len(), a.len());
    }

    fn dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    }

    #[test]
    fn pod_names_are_dns_labels_deterministic_and_distinct() {
        let long_id = "A".repeat(63);
        for (id, task) in [
            ("a2a-worker-controller", "Fix the login bug!"),
            (long_id.as_str(), &"x".repeat(256)),
            ("c", "ünï=c,ö\u{1F600}"),
            ("Ctl_1.x", "---"),
        ] {
            for scope in [ADMIN_SCOPE, "a", &"z".repeat(32)] {
                let name = pod_name(id, scope, task);
                assert!(dns_label(&name), "{name}");
                assert_eq!(name, pod_name(id, scope, task));
            }
        }
        assert_ne!(
            pod_name("c", ADMIN_SCOPE, "a"),
            pod_name("c", ADMIN_SCOPE, "A")
        );
        assert_ne!(
            pod_name("c", ADMIN_SCOPE, "a"),
            pod_name("d", ADMIN_SCOPE, "a")
        );
        assert_ne!(pod_name("c", ADMIN_SCOPE, "a"), pod_name("c", "x", "a"));
    }

    #[test]
    fn task_label_values_are_valid_and_stable() {
        for task in [
            "Fix the login bug!",
            "ünï=c,ö",
            "--x--",
            &"é".repeat(256),
            &"a".repeat(256),
            "_.leading",
        ] {
            let v = task_label_value(task);
            assert!(is_label_value(&v) && !v.is_empty(), "{task:?} -> {v}");
            assert_eq!(v, task_label_value(task));
        }
        assert_ne!(task_label_value("a b"), task_label_value("a-b"));
        assert!(task_label_value("Fix the login bug!").starts_with("Fix-the-login-bug-"));
        assert!(!is_label_value("-x") && !is_label_value(&"a".repeat(64)));
        assert!(is_label_value("") && is_label_value("3f9c2a1b7d4e"));
        assert!(!is_label_value("a=b"));
    }

    #[test]
    fn ownership_needs_the_marker() {
        let read = |l: &BTreeMap<String, String>| -> Option<Ours> {
            Some(serde_json::from_value(serde_json::json!(l)).expect("a label map reads"))
        };
        let mut l = for_worker(
            "me",
            identity("w1", "t".into(), "team-a", "coder", None, ""),
            &Metadata::new(),
        );
        assert_eq!(l.len(), 5, "exactly five labels without a TTL or a token");
        let hashed = for_worker(
            "me",
            identity("w1", "t".into(), "team-a", "coder", None, "ab12"),
            &Metadata::new(),
        );
        assert_eq!(hashed[TOKEN_HASH], "ab12");
        assert_eq!(
            owned(read(&hashed), "me").map(|o| o.token_hash),
            Some("ab12".into())
        );
        assert_eq!(
            owned(read(&l), "me"),
            Some(Owned {
                worker_id: "w1".into(),
                task: "t".into(),
                expires_at: None,
                metadata: Metadata::new(),
                scope: "team-a".into(),
                template: "coder".into(),
                token_hash: String::new(),
                claimed_ms: None,
            })
        );
        let mut before_scopes = l.clone();
        before_scopes.remove(SCOPE);
        before_scopes.remove(TEMPLATE);
        assert_eq!(
            owned(read(&before_scopes), "me").map(|o| (o.scope, o.template)),
            Some((ADMIN_SCOPE.to_string(), DEFAULT_TEMPLATE.to_string())),
            "a worker made before scopes and templates is the admin scope's, from default"
        );
        let expiring = for_worker(
            "me",
            identity(
                "w1",
                "t".into(),
                ADMIN_SCOPE,
                DEFAULT_TEMPLATE,
                Some(1_900_000_000),
                "",
            ),
            &Metadata::new(),
        );
        let tagged = for_worker(
            "me",
            identity("w1", "t".into(), ADMIN_SCOPE, DEFAULT_TEMPLATE, None, ""),
            &[("team".to_string(), "infra \"x\"".to_string())].into(),
        );
        assert_eq!(tagged["a2a-worker-controller.meta/team"], "infra \"x\"");
        assert_eq!(
            owned(read(&tagged), "me").map(|o| o.metadata),
            Some([("team".to_string(), "infra \"x\"".to_string())].into()),
            "metadata reads back from its labels"
        );
        assert_eq!(expiring[EXPIRES_AT], "1900000000");
        assert_eq!(
            owned(read(&expiring), "me").and_then(|o| o.expires_at),
            Some(1_900_000_000)
        );
        assert_eq!(owned(read(&l), "someone-else"), None);
        l.remove(OWNER);
        assert_eq!(owned(read(&l), "me"), None);
        assert_eq!(owned(None, "me"), None);
    }

    #[test]
    fn reads_only_its_own_labels_escaped_or_not() {
        // Other labels of any shape are skipped; an escaped key or value still reads.
        let text = r#"{"com.example/x": "1", "a2a-worker-controller\/owner": "me",
            "a2a-worker-controller/worker-id": "w\u0031", "a2a-worker-controller/task": "fix \"it\"",
            "a2a-worker-controller/expires-at": "soon", "other": "a2a-worker-controller/owner"}"#;
        let ours: Ours = serde_json::from_str(text).expect("labels read");
        assert_eq!(
            owned(Some(ours), "me"),
            Some(Owned {
                worker_id: "w1".into(),
                task: "fix \"it\"".into(),
                expires_at: None,
                metadata: Metadata::new(),
                scope: ADMIN_SCOPE.into(),
                template: DEFAULT_TEMPLATE.into(),
                token_hash: String::new(),
                claimed_ms: None,
            })
        );
        assert!(serde_json::from_str::<Ours>(r#"{"a2a-worker-controller/owner": 7}"#).is_err());
    }
}
