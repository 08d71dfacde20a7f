//! The Kubernetes API client against the stand-in API server over real TLS: credentials
//! checked at startup (one line naming the setting), bearer tokens that rotate, client
//! certificates, a CA that is not the cluster's, and `Status` answers mapped by reason.

use std::path::Path;
use std::time::{Duration, Instant};

use a2a_worker_controller::settings::{self, BackendSettings, Command, K8sSettings};
use a2a_worker_controller::testing::{
    K8sApi, K8sApiConfig, K8sApiError, K8sConfigError, K8sMethod, K8sReason,
};
use serde_json::{json, Value};

use crate::k8s_support::{configured, Pki, Standin};

fn k8s_settings(flags: &[String]) -> K8sSettings {
    let mut args = vec![
        "-backend=k8s".to_string(),
        "-a2a-auth-token=0123456789abcdef".into(),
        "-a2a-public-url=http://controller".into(),
        "-worker-image=a2a-echo-worker:dev".into(),
        "-k8s-namespace=a2a".into(),
    ];
    args.extend(flags.iter().cloned());
    let Ok(Command::Run(s)) = settings::parse(args, Vec::new()) else {
        panic!("settings {flags:?}")
    };
    let BackendSettings::K8s { k8s, .. } = s.backend else {
        panic!("k8s")
    };
    k8s
}

fn flag(name: &str, path: &Path) -> String {
    format!("-{name}={}", path.display())
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn load(flags: &[String]) -> Result<K8sApiConfig, K8sConfigError> {
    K8sApiConfig::load(&k8s_settings(flags), &no_env, Path::new("/nonexistent"))
}

fn token_flags(standin: &Standin, pki: &Pki, ca: &str) -> Vec<String> {
    vec![
        format!("-k8s-api-url={}", standin.url),
        flag("k8s-ca-file", &pki.path(ca)),
        flag("k8s-token-file", &pki.path("token")),
    ]
}

fn pod(name: &str, labels: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels},
           "spec": {"containers": [{"name": "worker", "image": "a2a-echo-worker:dev"}]}})
}

fn reason(e: &K8sApiError) -> Option<&K8sReason> {
    match e {
        K8sApiError::Status { reason, .. } => Some(reason),
        _ => None,
    }
}

#[test]
fn credentials_are_checked_at_startup_with_one_line_naming_the_setting() {
    if !configured() {
        return;
    }
    let pki = Pki::new("startup");
    std::fs::write(pki.path("token"), "t0ken\n").unwrap();
    std::fs::write(pki.path("garbage.crt"), "not a certificate\n").unwrap();
    let url = "-k8s-api-url=https://127.0.0.1:1".to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                url.clone(),
                flag("k8s-ca-file", &pki.path("garbage.crt")),
                flag("k8s-token-file", &pki.path("token")),
            ],
            "K8S_CA_FILE",
        ),
        (
            vec![
                url.clone(),
                flag("k8s-ca-file", &pki.path("missing.crt")),
                flag("k8s-token-file", &pki.path("token")),
            ],
            "K8S_CA_FILE",
        ),
        (
            vec![
                url.clone(),
                flag("k8s-ca-file", &pki.path("ca.crt")),
                flag("k8s-token-file", &pki.path("absent")),
            ],
            "K8S_TOKEN_FILE",
        ),
        (
            vec![
                url.clone(),
                flag("k8s-ca-file", &pki.path("ca.crt")),
                flag("k8s-client-cert-file", &pki.path("client.crt")),
                flag("k8s-client-key-file", &pki.path("stray.key")),
            ],
            "K8S_CLIENT_KEY_FILE",
        ),
        (
            vec![
                url.clone(),
                flag("k8s-ca-file", &pki.path("ca.crt")),
                flag("k8s-client-cert-file", &pki.path("stray.key")),
                flag("k8s-client-key-file", &pki.path("client.key")),
            ],
            "K8S_CLIENT_CERT_FILE",
        ),
    ];
    for (flags, setting) in cases {
        let e = load(&flags)
            .err()
            .unwrap_or_else(|| panic!("{flags:?} accepted"));
        let line = e.to_string();
        assert!(
            line.contains(setting) && !line.contains('\n'),
            "{flags:?}: {line}"
        );
    }
    // The matching pair and the token file are accepted.
    assert!(load(&[
        url.clone(),
        flag("k8s-ca-file", &pki.path("ca.crt")),
        flag("k8s-client-cert-file", &pki.path("client.crt")),
        flag("k8s-client-key-file", &pki.path("client.key")),
    ])
    .is_ok());
    // In-cluster: the service account's files and KUBERNETES_SERVICE_HOST (IPv6 bracketed).
    let sa = pki.dir.join("serviceaccount");
    std::fs::create_dir_all(&sa).unwrap();
    std::fs::copy(pki.path("ca.crt"), sa.join("ca.crt")).unwrap();
    std::fs::write(sa.join("token"), "in-cluster-token").unwrap();
    std::fs::write(sa.join("namespace"), "workers\n").unwrap();
    let env = |k: &str| match k {
        "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_string()),
        "KUBERNETES_SERVICE_PORT" => Some("6443".to_string()),
        _ => None,
    };
    let mut in_cluster = k8s_settings(&[]);
    in_cluster.namespace = None;
    let c = K8sApiConfig::load(&in_cluster, &env, &sa).unwrap();
    assert_eq!(
        (c.base.as_str(), c.namespace.as_str()),
        ("https://[fd00::1]:6443", "workers")
    );
    let e = K8sApiConfig::load(&in_cluster, &no_env, &sa).err().unwrap();
    assert!(e.to_string().contains("K8S_API_URL"), "{e}");
}

#[test]
fn pods_through_a_rotating_token_and_status_reasons() {
    if !configured() {
        return;
    }
    let pki = Pki::new("token");
    let token = pki.path("token");
    std::fs::write(&token, "first-token").unwrap();
    let standin = Standin::start(&pki, &["--token-file", token.to_str().unwrap()]);
    let api = K8sApi::new(&load(&token_flags(&standin, &pki, "ca.crt")).unwrap());
    let pods = "/api/v1/namespaces/a2a/pods";

    let (status, body) = api
        .call(
            K8sMethod::Post,
            pods,
            Some(&pod("w-1", json!({"a2a-worker-controller/owner": "me"}))),
        )
        .unwrap();
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let again = api
        .call(K8sMethod::Post, pods, Some(&pod("w-1", json!({}))))
        .unwrap_err();
    assert_eq!(reason(&again), Some(&K8sReason::AlreadyExists), "{again}");
    let invalid = api
        .call(K8sMethod::Post, pods, Some(&pod("Not_A_Name", json!({}))))
        .unwrap_err();
    assert_eq!(reason(&invalid), Some(&K8sReason::Invalid), "{invalid}");
    api.call(
        K8sMethod::Post,
        pods,
        Some(&pod("w-2", json!({"a2a-worker-controller/owner": "other"}))),
    )
    .unwrap();
    let list = |selector: &str| -> Vec<String> {
        let (_, body) = api
            .call(
                K8sMethod::Get,
                &format!("{pods}?labelSelector={selector}"),
                None,
            )
            .unwrap();
        let v: Value = serde_json::from_slice(&body).unwrap();
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(list("a2a-worker-controller%2Fowner%3Dme"), ["w-1"]);
    assert_eq!(list(""), ["w-1", "w-2"]);

    // The token file changes (as the kubelet rewrites it): the next call uses the new one.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&token, "second-token").unwrap();
    assert_eq!(list("a2a-worker-controller%2Fowner%3Dme"), ["w-1"]);
    // The file changes without its modification time showing it: the stale token gets 401,
    // the client re-reads the file once and the call succeeds.
    let modified = std::fs::metadata(&token).unwrap().modified().unwrap();
    std::fs::write(&token, "third-token").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&token)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(
        std::fs::metadata(&token).unwrap().modified().unwrap(),
        modified
    );
    assert_eq!(list("a2a-worker-controller%2Fowner%3Dme"), ["w-1"]);

    // Only a pod on a node has a grace period: wait for the scheduler to bind it.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = api
            .call(K8sMethod::Get, &format!("{pods}/w-1"), None)
            .unwrap();
        let pod: Value = serde_json::from_slice(&body).unwrap();
        if pod["spec"]["nodeName"].is_string() {
            break;
        }
        assert!(std::time::Instant::now() < until, "never bound: {pod}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Graceful deletion, as the real server does it (delete200.b, get_after_delete.b): 200
    // with the pod still there and deletionTimestamp set; a second DELETE is 200 too; the
    // pod is gone only once the kubelet confirms. Grace 0 removes it at once.
    let (status, body) = api
        .call(
            K8sMethod::Delete,
            &format!("{pods}/w-1?gracePeriodSeconds=10"),
            None,
        )
        .unwrap();
    assert_eq!(status, 200);
    let answered: Value = serde_json::from_slice(&body).unwrap();
    assert!(
        answered["metadata"]["deletionTimestamp"].is_string(),
        "{answered}"
    );
    assert_eq!(answered["metadata"]["deletionGracePeriodSeconds"], 10);
    let (status, body) = api
        .call(K8sMethod::Get, &format!("{pods}/w-1"), None)
        .unwrap();
    assert_eq!(status, 200, "still there in its grace period");
    let still: Value = serde_json::from_slice(&body).unwrap();
    assert!(still["metadata"]["deletionTimestamp"].is_string());
    let (status, _) = api
        .call(
            K8sMethod::Delete,
            &format!("{pods}/w-1?gracePeriodSeconds=0"),
            None,
        )
        .unwrap();
    assert_eq!(status, 200);
    let gone = api
        .call(K8sMethod::Delete, &format!("{pods}/w-1"), None)
        .unwrap_err();
    assert_eq!(reason(&gone), Some(&K8sReason::NotFound), "{gone}");
    let missing = api
        .call(K8sMethod::Get, &format!("{pods}/w-1"), None)
        .unwrap_err();
    assert_eq!(reason(&missing), Some(&K8sReason::NotFound));

    // A token the server does not accept: 401 after the one re-read.
    std::fs::write(pki.path("wrong-token"), "not-the-token").unwrap();
    let mut flags = token_flags(&standin, &pki, "ca.crt");
    flags[2] = flag("k8s-token-file", &pki.path("wrong-token"));
    let wrong = K8sApi::new(&load(&flags).unwrap())
        .call(K8sMethod::Get, pods, None)
        .unwrap_err();
    assert_eq!(reason(&wrong), Some(&K8sReason::Unauthorized), "{wrong}");
}

#[test]
fn a_ca_that_is_not_the_clusters_is_refused() {
    if !configured() {
        return;
    }
    let pki = Pki::new("wrongca");
    std::fs::write(pki.path("token"), "t").unwrap();
    let standin = Standin::start(&pki, &["--token-file", pki.path("token").to_str().unwrap()]);
    let api = K8sApi::new(&load(&token_flags(&standin, &pki, "other-ca.crt")).unwrap());
    let e = api
        .call(K8sMethod::Get, "/api/v1/namespaces/a2a/pods", None)
        .unwrap_err();
    assert!(matches!(e, K8sApiError::Unreachable(_)), "{e}");
}

#[test]
fn client_certificates_rbac_refusals_and_throttling() {
    if !configured() {
        return;
    }
    let pki = Pki::new("cert");
    let standin = Standin::start(&pki, &["--deny", "delete", "--throttle-once"]);
    let api = K8sApi::new(
        &load(&[
            format!("-k8s-api-url={}", standin.url),
            flag("k8s-ca-file", &pki.path("ca.crt")),
            flag("k8s-client-cert-file", &pki.path("client.crt")),
            flag("k8s-client-key-file", &pki.path("client.key")),
        ])
        .unwrap(),
    );
    let pods = "/api/v1/namespaces/a2a/pods";
    // The first call is answered 429 with Retry-After: 1; the client waits once and succeeds.
    let started = Instant::now();
    let (status, _) = api
        .call(K8sMethod::Post, pods, Some(&pod("w-1", json!({}))))
        .unwrap();
    assert_eq!(status, 201);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for Retry-After"
    );
    // RBAC refuses delete: Forbidden, and the message names the verb and resource.
    let e = api
        .call(K8sMethod::Delete, &format!("{pods}/w-1"), None)
        .unwrap_err();
    assert_eq!(reason(&e), Some(&K8sReason::Forbidden), "{e}");
    let text = e.to_string();
    assert!(text.contains("cannot delete resource \"pods\""), "{text}");
}
