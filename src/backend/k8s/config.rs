//! Where the Kubernetes API is and how to reach it: the server, the namespace, the cluster's
//! CA, and the credentials (a bearer token file, or a client certificate and key), from the
//! settings or the in-cluster environment. What is wrong with them is found at startup
//! ([`ApiConfig::load`]), each as one line naming the setting: an unreadable or unparsable
//! CA, a certificate and key that do not belong together (ureq would panic at the first
//! connection), a missing token file.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ureq::tls::{Certificate, ClientCert, PrivateKey};

use crate::settings::K8sSettings;

/// Where a pod finds its service account's credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How the controller authenticates.
#[derive(Clone)]
pub enum Auth {
    /// A bearer token read from this file (and re-read when it changes).
    TokenFile(PathBuf),
    /// A client certificate chain and its key (checked to belong together).
    ClientCert(ClientCert),
}

/// Where the API server is and how to reach it.
#[derive(Clone)]
pub struct ApiConfig {
    /// `https://host:port`, without a trailing slash.
    pub base: String,
    pub namespace: String,
    pub(super) roots: Vec<Certificate<'static>>,
    pub(super) auth: Auth,
}

/// Why the API cannot be configured: one line, naming the setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// Neither `K8S_API_URL` nor an in-cluster environment.
    NotInCluster,
    /// A file a setting names cannot be read.
    Unreadable {
        setting: &'static str,
        path: PathBuf,
        why: String,
    },
    /// A file was read but is not what the setting needs.
    Invalid { setting: &'static str, why: String },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NotInCluster => f.write_str(
                "setting K8S_API_URL is required outside a cluster (KUBERNETES_SERVICE_HOST is not set)",
            ),
            ConfigError::Unreadable { setting, path, why } => write!(
                f,
                "setting {setting} is invalid: cannot read {}: {why}",
                path.display()
            ),
            ConfigError::Invalid { setting, why } => write!(f, "setting {setting} is invalid: {why}"),
        }
    }
}

impl std::error::Error for ConfigError {}

fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, ConfigError> {
    fs::read(path).map_err(|e| ConfigError::Unreadable {
        setting,
        path: path.to_path_buf(),
        why: e.to_string(),
    })
}

/// Every certificate in a PEM bundle (at least one).
fn certificates(
    setting: &'static str,
    pem: &[u8],
) -> Result<Vec<Certificate<'static>>, ConfigError> {
    crate::pem::certificates(pem).map_err(|why| ConfigError::Invalid { setting, why })
}

/// A certificate chain and a key that belong together, checked the way rustls checks them
/// when it builds the connection (where ureq would panic on a mismatch).
fn client_cert(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientCert, ConfigError> {
    let chain = certificates("K8S_CLIENT_CERT_FILE", cert_pem)?;
    let key = PrivateKey::from_pem(key_pem).map_err(|e| ConfigError::Invalid {
        setting: "K8S_CLIENT_KEY_FILE",
        why: format!("not a PEM private key (PKCS#1, PKCS#8 or SEC1): {e}"),
    })?;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let der_chain: Vec<CertificateDer<'static>> = chain
        .iter()
        .map(|c| CertificateDer::from(c.der().to_vec()))
        .collect();
    let der_key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| ConfigError::Invalid {
        setting: "K8S_CLIENT_KEY_FILE",
        why: format!("not a PEM private key: {e}"),
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError::Invalid {
            setting: "K8S_CLIENT_CERT_FILE",
            why: e.to_string(),
        })?
        .with_root_certificates(rustls::RootCertStore::empty());
    builder
        .with_client_auth_cert(der_chain, der_key)
        .map_err(|e| ConfigError::Invalid {
            setting: "K8S_CLIENT_KEY_FILE",
            why: format!("the key does not belong to K8S_CLIENT_CERT_FILE's certificate ({e})"),
        })?;
    Ok(ClientCert::new_with_certs(&chain, key))
}

impl ApiConfig {
    /// From the settings: explicit (`K8S_API_URL` with `K8S_CA_FILE` and a token file or a
    /// client certificate), or in-cluster from `env` (`KUBERNETES_SERVICE_HOST`/`_PORT`) and
    /// the service account's files under `service_account_dir`.
    pub fn load(
        k8s: &K8sSettings,
        env: &dyn Fn(&str) -> Option<String>,
        service_account_dir: &Path,
    ) -> Result<ApiConfig, ConfigError> {
        if let Some(base) = &k8s.api_url {
            let ca_file = k8s.ca_file.as_deref().ok_or(ConfigError::Invalid {
                setting: "K8S_CA_FILE",
                why: "it is required when K8S_API_URL is set".into(),
            })?;
            let roots = certificates("K8S_CA_FILE", &read("K8S_CA_FILE", ca_file)?)?;
            let auth = match (&k8s.token_file, &k8s.client_cert_file, &k8s.client_key_file) {
                (_, Some(cert), Some(key)) => Auth::ClientCert(client_cert(
                    &read("K8S_CLIENT_CERT_FILE", cert)?,
                    &read("K8S_CLIENT_KEY_FILE", key)?,
                )?),
                (Some(token), _, _) => {
                    read_token("K8S_TOKEN_FILE", token)?;
                    Auth::TokenFile(token.clone())
                }
                _ => {
                    return Err(ConfigError::Invalid {
                        setting: "K8S_TOKEN_FILE",
                        why: "K8S_API_URL needs K8S_TOKEN_FILE, or K8S_CLIENT_CERT_FILE with K8S_CLIENT_KEY_FILE".into(),
                    })
                }
            };
            let namespace = match &k8s.namespace {
                Some(ns) => ns.clone(),
                None => "default".into(),
            };
            return Ok(ApiConfig {
                base: base.trim_end_matches('/').to_string(),
                namespace,
                roots,
                auth,
            });
        }
        let host = env("KUBERNETES_SERVICE_HOST").ok_or(ConfigError::NotInCluster)?;
        let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".into());
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host
        };
        let ca = service_account_dir.join("ca.crt");
        let roots = certificates("K8S_CA_FILE", &read("K8S_CA_FILE", &ca)?)?;
        let token = service_account_dir.join("token");
        read_token("K8S_TOKEN_FILE", &token)?;
        let namespace = match &k8s.namespace {
            Some(ns) => ns.clone(),
            None => {
                let file = service_account_dir.join("namespace");
                String::from_utf8_lossy(&read("K8S_NAMESPACE", &file)?)
                    .trim()
                    .to_string()
            }
        };
        Ok(ApiConfig {
            base: format!("https://{host}:{port}"),
            namespace,
            roots,
            auth: Auth::TokenFile(token),
        })
    }
}

pub(super) fn read_token(setting: &'static str, path: &Path) -> Result<String, ConfigError> {
    let token = String::from_utf8_lossy(&read(setting, path)?)
        .trim()
        .to_string();
    if token.is_empty() {
        return Err(ConfigError::Invalid {
            setting,
            why: format!("{} is empty", path.display()),
        });
    }
    Ok(token)
}
