//! Fenced workers on the real engine: a worker whose template's egress is a list or `"none"`
//! sits on an internal network, reaches nothing directly (an address or a name outside), and
//! reaches through the egress proxy exactly what its template allows; the route's secret
//! reaches the destination and never the worker. The proxy runs in-process on the host, on
//! the internal network's gateway address (as `scripts/run.sh` runs it).

use std::net::{IpAddr, SocketAddr, TcpListener};

use a2a_worker_controller::settings::egress::EgressKey;
use serde_json::{json, Value};

use crate::docker_support::{
    controller_id, docker_cli, docker_socket, worker_image, Cleanup, Proc,
};
use crate::egress::{basic, connect, secret_file, upstream};
use crate::secrets::{assert_none_in, captured_log, remember};
use crate::support::{reply_data, Controls, TOKEN};
use crate::templates::tell;

const ROUTE_SECRET: &str = "docker-route-secret-4f0a9d";
const MODEL_KEY: &str = "docker-model-key-8c21e7";

/// Removes what the test made on the engine, whatever happens.
struct Made {
    socket: std::path::PathBuf,
    containers: Vec<String>,
    networks: Vec<String>,
    dir: std::path::PathBuf,
}

impl Drop for Made {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = std::process::Command::new("docker")
                .env("DOCKER_HOST", format!("unix://{}", self.socket.display()))
                .args(["rm", "-f", c])
                .output();
        }
        for n in &self.networks {
            let _ = std::process::Command::new("docker")
                .env("DOCKER_HOST", format!("unix://{}", self.socket.display()))
                .args(["network", "rm", n])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn inspect(socket: &std::path::Path, what: &str, format: &str) -> String {
    docker_cli(socket, &["inspect", "-f", format, what], None)
}

#[test]
fn a_fenced_worker_reaches_only_what_its_template_allows_on_the_real_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    if crate::docker_support::is_podman(&socket) {
        // Podman's internal networks give the host no address on them (docs/egress.md).
        eprintln!("SKIPPED: on Podman the proxy and the controller must run as containers on the internal network");
        return;
    }
    let id = controller_id("egress");
    let pid = std::process::id();
    let dir = std::env::temp_dir().join(format!("a2a-egress-docker-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let (fence_net, out_net, internet) = (
        format!("a2a-eg-fence-{pid}"),
        format!("a2a-eg-out-{pid}"),
        format!("a2a-eg-internet-{pid}"),
    );
    let mut made = Made {
        socket: socket.clone(),
        containers: vec![internet.clone()],
        networks: vec![fence_net.clone(), out_net.clone()],
        dir: dir.clone(),
    };
    let _cleanup = Cleanup::new(&socket, &id);
    // A fixed address needs a subnet the network was made with (as run.sh makes it).
    let made_fence = (0..20).any(|i| {
        let subnet = format!("10.{}.{}.0/24", 200 + (pid + i) % 50, (pid / 50 + i) % 250);
        std::process::Command::new("docker")
            .env("DOCKER_HOST", format!("unix://{}", socket.display()))
            .args([
                "network",
                "create",
                "--internal",
                "--subnet",
                &subnet,
                &fence_net,
            ])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(made_fence, "no free subnet for the fence network");
    docker_cli(&socket, &["network", "create", &out_net], None);
    // The internet: a server on another network, by address and by name.
    docker_cli(
        &socket,
        &[
            "run",
            "-d",
            "--name",
            &internet,
            "--network",
            &out_net,
            "-e",
            "INTERACTIVE_AUTH_TOKEN=x",
            "-e",
            "A2A_PUBLIC_URL=http://internet:9090",
            &worker_image(),
        ],
        None,
    );
    let internet_ip = inspect(
        &socket,
        &internet,
        &format!("{{{{(index .NetworkSettings.Networks \"{out_net}\").IPAddress}}}}"),
    );
    // The engine gives the subnet's first address to the host's end of the bridge.
    let subnet = docker_cli(
        &socket,
        &[
            "network",
            "inspect",
            "-f",
            "{{(index .IPAM.Config 0).Subnet}}",
            &fence_net,
        ],
        None,
    );
    let net: std::net::Ipv4Addr = subnet.split('/').next().unwrap().parse().unwrap();
    let gateway = IpAddr::from(std::net::Ipv4Addr::from(u32::from(net) + 1));

    // The route's destination: a server of this test's on the host.
    let (up, seen, _go_on) = upstream();
    let secret = secret_file(&dir, "route-secret", ROUTE_SECRET);
    let model_key = secret_file(&dir, "model-key", MODEL_KEY);
    let templates = dir.join("templates.json");
    std::fs::write(
        &templates,
        json!({"templates": {
            "fenced": {
                "egress": [format!("{internet_ip}/32:9090")],
                "egress_routes": {"rec": {"url": format!("http://{up}"), "header": "X-Route-Secret", "file": secret}},
            },
            "closed": {"egress": "none"},
        }})
        .to_string(),
    )
    .unwrap();

    // The proxy, its own process, on the fence network's gateway address.
    let proxy_addr = TcpListener::bind(SocketAddr::new(gateway, 0))
        .and_then(|l| l.local_addr())
        .expect("the gateway address can be bound");
    let p = Proc::start(
        &socket,
        &id,
        &[
            &format!("-worker-templates-file={}", templates.display()),
            &format!("-egress-proxy-url=http://{proxy_addr}"),
            &format!("-egress-network={fence_net}"),
            &format!("-anthropic-auth-token-file={}", model_key.display()),
        ],
    );
    let proxy_log = dir.join("proxy.log");
    let mut proxy = EgressProc::start(proxy_addr, p.addr, &templates, &proxy_log);

    let create = |template: &str, task: &str| -> Value {
        let r = reply_data(
            &p.control(json!({"operation": "create", "task": task, "template": template})),
        );
        remember(r["token"].as_str().unwrap());
        r
    };
    let a = create("fenced", "fenced task");
    let (a_url, a_token, a_id) = (
        a["worker"]["a2a_url"].as_str().unwrap().to_string(),
        a["token"].as_str().unwrap().to_string(),
        a["worker"]["worker_id"].as_str().unwrap().to_string(),
    );
    remember(EgressKey::derived_from(TOKEN).placeholder(&a_id).expose());
    // Reached at its own address on the fence network (an internal network publishes no port).
    let a_ip: IpAddr = a_url
        .trim_start_matches("http://")
        .rsplit_once(':')
        .unwrap()
        .0
        .parse()
        .unwrap();
    assert_ne!(a_ip, IpAddr::from([127, 0, 0, 1]), "{a_url}");

    // `check` says how each template is fenced; without the internal network it refuses.
    let mut args = vec![
        format!("-docker-host=unix://{}", socket.display()),
        format!("-worker-image={}", worker_image()),
        format!("-worker-templates-file={}", templates.display()),
        format!("-egress-proxy-url=http://{proxy_addr}"),
        format!("-egress-network={fence_net}"),
    ];
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(&format!(
            "egress {internet_ip}/32:9090 through the proxy on internal network {fence_net}"
        )),
        "{out}"
    );
    args.push(format!("-egress-network={out_net}"));
    let (code, _, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_ne!(code, Some(0));
    assert!(
        err.contains(&format!("the Docker network {out_net} is not internal")),
        "{err}"
    );
    // Nothing directly: neither the internet's address nor its name.
    let direct = tell(&a_url, &a_token, &format!("net connect {internet_ip}:9090"));
    assert!(direct.starts_with("failed"), "{direct}");
    let by_name = tell(&a_url, &a_token, &format!("net connect {internet}:9090"));
    assert!(by_name.starts_with("failed"), "{by_name}");
    // Through the proxy: the allowed destination, and a 403 naming the rule for another.
    let through = tell(
        &a_url,
        &a_token,
        &format!("net tunnel {internet_ip}:9090 /.well-known/agent-card.json"),
    );
    assert_eq!(through, "tunnel: HTTP/1.1 200 OK");
    // The proxy restarted mid-run keeps nothing that mattered: the next tunnel works.
    proxy.restart();
    let again = tell(
        &a_url,
        &a_token,
        &format!("net tunnel {internet_ip}:9090 /.well-known/agent-card.json"),
    );
    assert_eq!(again, "tunnel: HTTP/1.1 200 OK");
    let denied = tell(&a_url, &a_token, "net tunnel 192.0.2.1:443 /");
    assert_eq!(
        denied,
        format!("refused: HTTP/1.1 403 Forbidden: egress to 192.0.2.1:443 is not allowed: template fenced allows {internet_ip}/32:9090")
    );
    // The route: its secret reaches the destination, the placeholder goes no further.
    let routed = tell(&a_url, &a_token, "net route rec /hello");
    assert_eq!(routed, "HTTP/1.1 200 OK | upstream");
    let got = seen.recv().unwrap();
    assert!(
        got.to_ascii_lowercase()
            .contains(&format!("x-route-secret: {ROUTE_SECRET}")),
        "{got}"
    );

    // The worker holds neither the route's secret nor the model key: not in what the engine
    // records, not in its process's environment.
    let env = inspect(
        &socket,
        &a_id_container(&socket, &id, &a_id),
        "{{json .Config.Env}}",
    );
    for secret in [ROUTE_SECRET, MODEL_KEY] {
        assert!(!env.contains(secret), "a secret in the worker's Env: {env}");
    }
    assert!(env.contains("ANTHROPIC_BASE_URL=http://"), "{env}");
    let pid1 = inspect(
        &socket,
        &a_id_container(&socket, &id, &a_id),
        "{{.State.Pid}}",
    );
    if let Ok(environ) = std::fs::read(format!("/proc/{pid1}/environ")) {
        let environ = String::from_utf8_lossy(&environ);
        assert!(!environ.contains(ROUTE_SECRET) && !environ.contains(MODEL_KEY));
        assert!(environ.contains("A2A_EGRESS_TOKEN=a2a-egress-v1."));
    }

    let logs = reply_data(&p.control(json!({"operation": "logs", "worker_id": a_id})));
    assert_none_in(&logs.to_string(), "the fenced worker's logs");
    // A worker with egress "none" reaches no destination, not even the allowed one of another.
    let b = create("closed", "closed task");
    let (b_url, b_token) = (
        b["worker"]["a2a_url"].as_str().unwrap(),
        b["token"].as_str().unwrap(),
    );
    let none = tell(b_url, b_token, &format!("net tunnel {internet_ip}:9090 /"));
    assert!(
        none.starts_with("refused: HTTP/1.1 403") && none.contains("egress \"none\""),
        "{none}"
    );

    // A's placeholder from the host (not A's address) is refused; once A is stopped, it is
    // refused for that.
    let a_auth = basic(
        &a_id,
        EgressKey::derived_from(TOKEN).placeholder(&a_id).expose(),
    );
    let (status, line, _) = connect(proxy_addr, &format!("{internet_ip}:9090"), Some(&a_auth));
    assert_eq!(status, 403);
    assert!(line.contains("not from the worker"), "{line}");
    reply_data(&p.control(json!({"operation": "stop", "worker_id": a_id})));
    crate::support::wait_until(
        "the stopped worker's placeholder is refused",
        std::time::Duration::from_secs(10),
        || {
            let (status, line, _) =
                connect(proxy_addr, &format!("{internet_ip}:9090"), Some(&a_auth));
            status == 403 && line.contains("is not running")
        },
    );

    // An open worker is as it was: published on the host, given the model key itself, no
    // proxy and no placeholder.
    let open = create("default", "open task");
    let open_url = open["worker"]["a2a_url"].as_str().unwrap();
    assert!(open_url.starts_with("http://127.0.0.1:"), "{open_url}");
    let open_id = open["worker"]["worker_id"].as_str().unwrap();
    let open_env = inspect(
        &socket,
        &a_id_container(&socket, &id, open_id),
        "{{json .Config.Env}}",
    );
    assert!(
        open_env.contains(&format!("ANTHROPIC_AUTH_TOKEN={MODEL_KEY}")),
        "an open worker lost its model key"
    );
    assert!(!open_env.contains("A2A_EGRESS") && !open_env.contains("HTTPS_PROXY"));

    assert_none_in(&p.log_text(), "the controller's log");
    drop(proxy);
    let proxy_text = std::fs::read_to_string(&proxy_log).unwrap_or_default();
    assert!(
        proxy_text.contains("egress: tunnel for worker"),
        "{proxy_text}"
    );
    assert_none_in(&proxy_text, "the proxy's log");
    assert_none_in(&captured_log(), "the test's log");
    made.containers.clear();
    made.containers.push(internet);
}

/// The egress proxy as its own process (`a2a-worker-controller egress`), logging to a file.
struct EgressProc {
    child: std::process::Child,
    args: (
        SocketAddr,
        SocketAddr,
        std::path::PathBuf,
        std::path::PathBuf,
    ),
}

impl EgressProc {
    fn start(
        listen: SocketAddr,
        controller: SocketAddr,
        templates: &std::path::Path,
        log: &std::path::Path,
    ) -> EgressProc {
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
            .arg("egress")
            .env_clear()
            .env("A2A_AUTH_TOKEN", TOKEN)
            .env("A2A_PUBLIC_URL", "http://x")
            .env("WORKER_IMAGE", worker_image())
            .env("WORKER_TEMPLATES_FILE", templates)
            .env("EGRESS_LISTEN", listen.to_string())
            .env("EGRESS_CONTROLLER_URL", format!("http://{controller}"))
            .env("EGRESS_RECHECK", "500ms")
            .env("RUST_LOG", "debug")
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("the proxy runs");
        crate::support::wait_until(
            "the proxy listens",
            std::time::Duration::from_secs(10),
            || std::net::TcpStream::connect(listen).is_ok(),
        );
        EgressProc {
            child,
            args: (
                listen,
                controller,
                templates.to_path_buf(),
                log.to_path_buf(),
            ),
        }
    }

    fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (listen, controller, templates, log) = self.args.clone();
        *self = EgressProc::start(listen, controller, &templates, &log);
    }
}

impl Drop for EgressProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The container of worker `worker_id`.
fn a_id_container(socket: &std::path::Path, id: &str, worker_id: &str) -> String {
    docker_cli(
        socket,
        &[
            "ps",
            "-aq",
            "--filter",
            &format!("label=a2a-worker-controller/worker-id={worker_id}"),
            "--filter",
            &format!("label=a2a-worker-controller/owner={id}"),
        ],
        None,
    )
}

#[test]
fn a_template_runs_on_the_runtime_it_names_and_one_the_engine_lacks_is_refused() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("runtime");
    let dir = std::env::temp_dir().join(format!("a2a-runtime-docker-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _made = Made {
        socket: socket.clone(),
        containers: Vec::new(),
        networks: Vec::new(),
        dir: dir.clone(),
    };
    let _cleanup = Cleanup::new(&socket, &id);
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"templates": {"sandboxed": {"runtime": "no-such-runtime"}}}"#,
    )
    .unwrap();
    let refused = Proc::prepare(
        &id,
        vec![
            format!("-docker-host=unix://{}", socket.display()),
            format!("-worker-image={}", worker_image()),
            format!("-worker-templates-file={}", bad.display()),
        ],
        Vec::new(),
    );
    let (code, log) = refused.run_to_exit();
    assert_ne!(code, Some(0), "{log}");
    assert!(
        log.contains(r#"template "sandboxed": runtime: the engine offers no runtime "no-such-runtime" (it offers: "#)
            && log.contains("runc"),
        "{log}"
    );

    // The test engine registers runc a second time as runc-alt (scripts/dockerd.sh).
    let runtimes = docker_cli(&socket, &["info", "-f", "{{json .Runtimes}}"], None);
    if !runtimes.contains("\"runc-alt\"") {
        eprintln!("SKIPPED: the engine has no runc-alt runtime (scripts/dockerd.sh registers one)");
        return;
    }
    let good = dir.join("good.json");
    std::fs::write(
        &good,
        r#"{"templates": {"sandboxed": {"runtime": "runc-alt"}}}"#,
    )
    .unwrap();
    let p = Proc::start(
        &socket,
        &id,
        &[&format!("-worker-templates-file={}", good.display())],
    );
    let w = reply_data(
        &p.control(json!({"operation": "create", "task": "on runc-alt", "template": "sandboxed"})),
    );
    remember(w["token"].as_str().unwrap());
    let worker_id = w["worker"]["worker_id"].as_str().unwrap();
    let container = a_id_container(&socket, &id, worker_id);
    assert_eq!(
        inspect(&socket, &container, "{{.HostConfig.Runtime}}"),
        "runc-alt"
    );
    let url = w["worker"]["a2a_url"].as_str().unwrap();
    assert_eq!(tell(url, w["token"].as_str().unwrap(), "hello"), "hello");
    let args = vec![
        format!("-docker-host=unix://{}", socket.display()),
        format!("-worker-image={}", worker_image()),
        format!("-worker-templates-file={}", good.display()),
    ];
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("runtime runc-alt"), "{out}");
}
