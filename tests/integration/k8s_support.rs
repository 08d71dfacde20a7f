//! A stand-in Kubernetes API server for the tests (`tests/python/k8s_standin.py`, which says
//! which behaviour of the real one it mimics), over TLS with a PKI made here by the `openssl`
//! command: a cluster CA, a server certificate for 127.0.0.1, a client certificate (CN
//! `admin`), and, for refusals, a second CA and a key that belongs to nothing.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::support::env_or_skip;

pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Makes the files in a fresh directory.
    pub fn new(tag: &str) -> Pki {
        let dir = std::env::temp_dir().join(format!("a2a-k8s-pki-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let ssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("openssl runs");
            assert!(
                out.status.success(),
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let ec_key = |name: &str| {
            ssl(&[
                "ecparam",
                "-name",
                "prime256v1",
                "-genkey",
                "-noout",
                "-out",
                name,
            ])
        };
        for ca in ["ca", "other-ca"] {
            ec_key(&format!("{ca}.key"));
            ssl(&[
                "req",
                "-x509",
                "-new",
                "-key",
                &format!("{ca}.key"),
                "-days",
                "2",
                "-subj",
                &format!("/CN={ca}"),
                "-out",
                &format!("{ca}.crt"),
            ]);
        }
        std::fs::write(
            dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
        for (name, subject, ext) in [
            ("server", "/CN=kube-apiserver", "server.ext"),
            ("client", "/O=system:masters/CN=admin", "client.ext"),
        ] {
            ec_key(&format!("{name}.key"));
            ssl(&[
                "req",
                "-new",
                "-key",
                &format!("{name}.key"),
                "-subj",
                subject,
                "-out",
                &format!("{name}.csr"),
            ]);
            ssl(&[
                "x509",
                "-req",
                "-in",
                &format!("{name}.csr"),
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                ext,
                "-out",
                &format!("{name}.crt"),
            ]);
        }
        ec_key("stray.key");
        Pki { dir }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub struct Standin {
    pub url: String,
    child: Child,
    said: BufReader<std::process::ChildStdout>,
}

impl Standin {
    /// Starts the stand-in with `extra` flags; `None` when the suite is not configured.
    pub fn start(pki: &Pki, extra: &[&str]) -> Standin {
        let python = std::env::var_os("A2A_TEST_K8S_PYTHON").expect("checked by python()");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/k8s_standin.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg("--cert")
            .arg(pki.path("server.crt"))
            .arg("--key")
            .arg(pki.path("server.key"))
            .arg("--ca")
            .arg(pki.path("ca.crt"))
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the stand-in starts");
        let mut line = String::new();
        let mut said = BufReader::new(child.stdout.take().unwrap());
        said.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("stand-in said {line:?}"))
            .to_string();
        Standin { url, child, said }
    }

    /// Tells the stand-in's simulated cluster to change (`node-down`, `outage 3`, ...; the
    /// commands are in its header) and waits until it has.
    pub fn send(&mut self, command: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("the stand-in's stdin");
        writeln!(stdin, "{command}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.said.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ok", "the stand-in did not take {command:?}");
    }
}

impl Drop for Standin {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether the Kubernetes suite can run (python and openssl); skips loudly otherwise.
pub fn configured() -> bool {
    env_or_skip("A2A_TEST_K8S_PYTHON", "A2A_REQUIRE_K8S_VALIDATE").is_some()
}

/// Runs `tests/python/k8s_manifests.py` over the deploy files and the pod bodies in `pods`,
/// with the pod verbs the Role must grant: the schema and consistency checks.
pub fn check_manifests(pods: &Path, verbs: &str) -> std::process::Output {
    let python = std::env::var_os("A2A_TEST_K8S_PYTHON").expect("checked by configured()");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    Command::new(python)
        .arg(root.join("tests/python/k8s_manifests.py"))
        .arg(root.join("scripts/k8s"))
        .arg(pods)
        .arg(verbs)
        .output()
        .expect("python runs")
}

/// Asserts the checker passed.
pub fn assert_manifests_ok(out: &std::process::Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("k8s manifests: ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
