//! Warm pools on the real engine (`A2A_TEST_DOCKER_HOST`): members are started and
//! never listed; before activation a member answers 401 to everything but its card; a create
//! takes one (bound: its own token, its task's container name), a second activation is
//! refused, the slot is refilled; nothing secret is in `docker inspect`; an empty pool falls
//! back to cold creates; a member killed by hand is replaced; a restart adopts the members it
//! finds; two controllers of one id keep N members between them and ten racing creates of one
//! task make one worker; a template change drains the members; a member that never answers
//! its activation is removed; an image without the contract is refused at startup and by
//! `check`. Without an engine: a backend without pools refuses a pooled template.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::docker_support::*;
use crate::support::*;
use crate::templates::{test_dir, write_templates};

/// `docker ps -a` of controller `id`'s containers that carry label `label`, as `format`.
pub fn ps(socket: &Path, id: &str, label: &str, format: &str) -> String {
    docker_cli(
        socket,
        &[
            "ps",
            "-a",
            "--filter",
            &format!("label=a2a-worker-controller/owner={id}"),
            "--filter",
            &format!("label={label}"),
            "--format",
            format,
        ],
        None,
    )
}

/// The unclaimed members of controller `id`: (container id, name), by name.
pub fn members(socket: &Path, id: &str) -> Vec<(String, String)> {
    let out = ps(
        socket,
        id,
        "a2a-worker-controller/pool-member",
        "{{.ID}} {{.Names}} {{.State}}",
    );
    // A member's name: the controller id (at most 20 characters), `-pool-`, ...
    let prefix = format!("{}-pool-", &id[..id.len().min(20)]);
    let mut v: Vec<(String, String)> = out
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let (cid, name, state) = (f.next()?, f.next()?, f.next()?);
            (name.starts_with(&prefix) && state == "running")
                .then(|| (cid.to_string(), name.to_string()))
        })
        .collect();
    v.sort_by(|a, b| a.1.cmp(&b.1));
    v
}

/// How many unclaimed members controller `id` has, in any state.
pub fn member_count(socket: &Path, id: &str) -> usize {
    let prefix = format!("{}-pool-", &id[..id.len().min(20)]);
    ps(
        socket,
        id,
        "a2a-worker-controller/pool-member",
        "{{.Names}}",
    )
    .lines()
    .filter(|l| l.starts_with(&prefix))
    .count()
}

/// Every container of controller id `id` (members, pooled and cold workers).
fn all_containers(socket: &Path, id: &str) -> Vec<String> {
    let out = ps(
        socket,
        id,
        &format!("a2a-worker-controller/owner={id}"),
        "{{.ID}}",
    );
    out.lines().map(str::to_string).collect()
}

/// Waits until `ok` holds (at most 60 s), saying `what` when it never does.
/// Waits until controller `id` has `n` running members of the pool.
pub fn wait_members(socket: &Path, id: &str, n: usize) -> Vec<(String, String)> {
    let mut found = Vec::new();
    wait_until(&format!("{n} pool members"), PATIENCE, || {
        found = members(socket, id);
        found.len() == n
    });
    found
}

/// Waits until controller `p` has seen `n` ready members of template `warm` (its metric).
pub fn wait_ready_here(p: &Proc, n: usize) {
    let line = format!("a2a_pool_members{{template=\"warm\",state=\"ready\"}} {n}\n");
    wait_until(&format!("{n} ready members seen"), PATIENCE, || {
        p.get("/metrics").text().contains(&line)
    });
}

/// The published address (`127.0.0.1:port`) of container `cid`.
fn published(socket: &Path, cid: &str) -> std::net::SocketAddr {
    let out = docker_cli(socket, &["port", cid], None);
    let line = out.lines().next().expect("a published port");
    line.rsplit(" -> ").next().unwrap().parse().unwrap()
}

pub fn create(p: &Proc, task: &str, template: &str) -> Value {
    reply_data(&p.control(json!({"operation": "create", "task": task, "template": template})))
}

pub fn listed(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .clone()
}

/// Whether worker `worker_id`'s container was a pool member (a cold one carries its id).
pub fn was_pooled(socket: &Path, worker_id: &str, id: &str) -> bool {
    let out = ps(
        socket,
        id,
        &format!("a2a-worker-controller/worker-id={worker_id}"),
        "{{.ID}}",
    );
    out.trim().is_empty()
}

/// The unbound member at `addr`: its card lists the contract, every A2A call and a wrong
/// activation secret are 401.
pub fn assert_unbound(addr: std::net::SocketAddr) {
    let card = request(addr, "GET", "/.well-known/agent-card.json", &[], b"").json();
    assert_eq!(
        card["capabilities"]["extensions"][0]["uri"],
        "urn:a2a-worker-controller:activation:v1"
    );
    let rpc = crate::docker_e2e::send_to_worker(&format!("http://{addr}"), Some("guess"), "hi");
    assert_eq!(rpc.status, 401);
    let wrong = request(
        addr,
        "POST",
        "/activate",
        &[("Authorization", "Bearer not-the-secret")],
        b"{}",
    );
    assert_eq!(wrong.status, 401, "a wrong activation secret");
}

/// Ten creates of one task racing through two controllers of one id (five through each): one
/// winner, the others told it exists, and one worker listed. The winner's worker id.
pub fn race_for_one_task(p: &Proc, q: &Proc) -> Value {
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..10)
            .map(|i| {
                s.spawn(move || {
                    let c = if i % 2 == 0 { p } else { q };
                    c.control(json!({"operation": "create", "task": "raced", "template": "warm"}))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winner = one_winner(&results);
    let workers = listed(q);
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["worker_id"], winner);
    winner
}

/// `n` creates of template `warm` at once through `p` (tasks `burst <i>`); their replies.
pub fn burst(p: &Proc, n: usize) -> Vec<Value> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| s.spawn(move || create(p, &format!("burst {i}"), "warm")))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn pooled_templates(image: &str, pool: u32, env: &str) -> Value {
    json!({
        "warm": {"image": image, "pool": pool, "env": {"POOL_TEST": env}},
        "cold": {"image": image}
    })
}

#[test]
fn a_warm_pool_on_the_real_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("pool");
    let _cleanup = Cleanup::new(&socket, &id);
    let _volumes = crate::templates::VolumeCleanup(socket.clone(), id.clone());
    let dir = test_dir("pool");
    let file = dir.join("templates.json");
    write_templates(&file, pooled_templates(&worker_image(), 2, "one"));
    let flag = format!("-worker-templates-file={}", file.display());
    let mut p = Proc::start(&socket, &id, &[&flag]);

    // Two members, started and unbound: never listed as workers.
    let first = wait_members(&socket, &id, 2);
    assert!(listed(&p).is_empty());
    wait_ready_here(&p, 2);

    // Before activation: the card (listing the contract), 401 for the rest, and nothing
    // secret in the engine.
    let addr = published(&socket, &first[0].0);
    assert_unbound(addr);
    let inspect = docker_cli(&socket, &["inspect", &first[0].0], None);
    assert!(inspect.contains("A2A_ACTIVATION_SHA256="), "{inspect}");
    for word in ["INTERACTIVE_AUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", TOKEN] {
        assert!(!inspect.contains(word), "{word} in docker inspect");
    }

    // A create takes a member: bound to its task, its token its own, listed like any worker.
    let started = Instant::now();
    let made = create(&p, "pooled task", "warm");
    let took = started.elapsed();
    let (worker, token) = (made["worker"].clone(), made["token"].as_str().unwrap());
    let wid = worker["worker_id"].as_str().unwrap().to_string();
    assert!(
        was_pooled(&socket, &wid, &id),
        "taken from the pool ({took:?})"
    );
    assert_eq!(worker["template"], "warm");
    let url = worker["a2a_url"].as_str().unwrap().to_string();
    let addresses: Vec<String> = first
        .iter()
        .map(|m| format!("http://{}", published(&socket, &m.0)))
        .collect();
    assert!(addresses.contains(&url), "a member's own address: {url}");
    let answer = crate::docker_e2e::send_to_worker(&url, Some(token), "hello pool");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let other = crate::docker_e2e::send_to_worker(&url, Some(TOKEN), "hello pool");
    assert_eq!(other.status, 401, "only the worker's own token opens it");
    // A claimed member is not suspended: its identity lives in its process.
    let refused = p.control(json!({"operation": "suspend", "worker_id": wid}));
    let e = control_error(&refused, "TASK_STATE_REJECTED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("was a warm pool member"),
        "{e}"
    );
    let workers = listed(&p);
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["worker_id"], wid.as_str());
    assert_eq!(workers[0]["task"], "pooled task");
    assert_eq!(workers[0]["template"], "warm");
    assert_eq!(workers[0]["a2a_url"], url.as_str());
    // Its task is its own, as a cold worker's is.
    let again = p.expect_failure(
        json!({"operation": "create", "task": "pooled task", "template": "warm"}),
        "worker_exists",
    );
    assert_eq!(again["worker_id"], wid.as_str());
    let cold_again = p.expect_failure(
        json!({"operation": "create", "task": "pooled task", "template": "cold"}),
        "worker_exists",
    );
    assert_eq!(cold_again["worker_id"], wid.as_str());
    // A second activation, with any secret, is refused.
    let worker_addr: std::net::SocketAddr = url.strip_prefix("http://").unwrap().parse().unwrap();
    let twice = request(
        worker_addr,
        "POST",
        "/activate",
        &[("Authorization", "Bearer anything")],
        b"{}",
    );
    assert_eq!(twice.status, 409);
    // Nothing secret in the engine after the claim either.
    // (Podman's `docker ps` has no `publish` filter: the ports are read instead.)
    let published_at = format!(":{}->", worker_addr.port());
    let cid = ps(
        &socket,
        &id,
        "a2a-worker-controller/pool-member",
        "{{.ID}} {{.Ports}}",
    )
    .lines()
    .find(|l| l.contains(&published_at))
    .and_then(|l| l.split(' ').next())
    .expect("the pooled worker's container")
    .to_string();
    let inspect = docker_cli(&socket, &["inspect", &cid], None);
    assert!(
        !inspect.contains(token),
        "the worker's token in docker inspect"
    );
    // The slot is refilled.
    let refilled = wait_members(&socket, &id, 2);
    assert!(refilled.iter().all(|m| m.0 != cid[..12.min(cid.len())]));

    // Stopped like any worker: its container and its binding go.
    let stopped = reply_data(&p.control(json!({"operation": "stop", "worker_id": wid})));
    assert_eq!(stopped["worker"]["worker_id"], wid.as_str());
    assert!(listed(&p).is_empty());
    let bindings = crate::templates::volumes(&socket, &id);
    assert!(
        bindings.is_empty(),
        "the binding went with the worker: {bindings:?}"
    );

    // A member killed by hand is replaced.
    let before = wait_members(&socket, &id, 2);
    docker_cli(&socket, &["kill", &before[0].0], None);
    wait_until("the killed member replaced", PATIENCE, || {
        let now = members(&socket, &id);
        now.len() == 2 && now.iter().all(|m| m.0 != before[0].0)
    });

    // A restart adopts the members it finds: the same ones, no more.
    let kept = wait_members(&socket, &id, 2);
    p.restart();
    // Its first look after the restart has seen them ready (and would have replaced them).
    wait_ready_here(&p, 2);
    assert_eq!(members(&socket, &id), kept, "adopted, not replaced");

    // Two controllers of one id keep N between them; ten racing creates of one task (five
    // through each) make one worker, and no member is lost.
    let mut q = Proc::start(&socket, &id, &[&flag]);
    // The second one's look has seen the first one's members ready (and filled no more).
    wait_ready_here(&q, 2);
    assert_eq!(members(&socket, &id).len(), 2, "not 2N");
    race_for_one_task(&p, &q);
    wait_members(&socket, &id, 2);
    assert_eq!(
        all_containers(&socket, &id).len(),
        3,
        "two members and one worker: nothing lost or left"
    );
    q.terminate();
    drop(q);
    // This controller has seen the members the other one started, in a look that began
    // after the other one went (an earlier look may still count a member the other one
    // claimed in the race: this one would find it lost at claim and make that create cold).
    wait_ready_here(&p, 2);
    std::thread::sleep(Duration::from_millis(2500));
    wait_ready_here(&p, 2);

    // A burst of 2N against a pool of N: N from the pool, N cold, all succeed; then full.
    let burst = burst(&p, 4);
    let pooled = burst
        .iter()
        .filter(|d| was_pooled(&socket, d["worker"]["worker_id"].as_str().unwrap(), &id))
        .count();
    assert_eq!(pooled, 2, "N of 2N from the pool");
    wait_members(&socket, &id, 2);
    assert_eq!(listed(&p).len(), 5);

    // A template change drains the members: new ones, of the new revision.
    let old = members(&socket, &id);
    write_templates(&file, pooled_templates(&worker_image(), 2, "two"));
    wait_until("the members replaced after the change", PATIENCE, || {
        let now = members(&socket, &id);
        now.len() == 2 && now.iter().all(|m| !old.contains(m))
    });
    wait_ready_here(&p, 2);
    let changed = create(&p, "after the change", "warm");
    let inspect = docker_cli(&socket, &["inspect", &members(&socket, &id)[0].0], None);
    assert!(inspect.contains("POOL_TEST=two"), "{inspect}");
    assert!(was_pooled(
        &socket,
        changed["worker"]["worker_id"].as_str().unwrap(),
        &id
    ));
}

#[test]
fn a_member_that_never_answers_its_activation_is_removed() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("pool-hang");
    let _cleanup = Cleanup::new(&socket, &id);
    let _volumes = crate::templates::VolumeCleanup(socket.clone(), id.clone());
    let hang = variant_image(&socket, "hang-activation", r#"["--hang-activation"]"#);
    let dir = test_dir("pool-hang");
    let file = dir.join("templates.json");
    write_templates(&file, json!({"warm": {"image": hang, "pool": 1}}));
    let flag = format!("-worker-templates-file={}", file.display());
    let p = Proc::start(&socket, &id, &[&flag, "-pool-activation-timeout=2s"]);
    let member = wait_members(&socket, &id, 1);
    wait_ready_here(&p, 1);
    // The member is removed and the create made cold: it never fails for want of a member.
    let made =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| create(&p, "hung", "warm")))
            .unwrap_or_else(|_| {
                panic!("the create failed; the controller said:\n{}", p.log_text())
            });
    let wid = made["worker"]["worker_id"].as_str().unwrap();
    assert!(!was_pooled(&socket, wid, &id), "made cold");
    let all = all_containers(&socket, &id);
    assert!(
        !all.iter()
            .any(|c| member[0].0.starts_with(c.as_str()) || c.starts_with(&member[0].0)),
        "the hung member is gone: {all:?} (it was {member:?})\n{}",
        p.log_text()
    );
    assert!(p.log_text().contains("could not be bound and was removed"));
}

#[test]
fn an_image_without_the_contract_is_refused_for_a_pool() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("pool-refuse");
    let _cleanup = Cleanup::new(&socket, &id);
    let plain = "a2a-echo-worker:no-contract";
    docker_cli(
        &socket,
        &["build", "-q", "-t", plain, "-"],
        Some(&format!(
            "FROM {}\nLABEL a2a-worker-controller.activation=\"\"\n",
            worker_image()
        )),
    );
    let dir = test_dir("pool-refuse");
    let file = dir.join("templates.json");
    write_templates(&file, json!({"warm": {"image": plain, "pool": 1}}));
    let flag = format!("-worker-templates-file={}", file.display());
    let args = crate::templates::engine_args(&socket, &flag);
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("template warm: FAILED: pool: image a2a-echo-worker:no-contract does not say it speaks the activation contract"),
        "{err}"
    );
    let (code, log) = Proc::prepare(&id, args, Vec::new()).run_to_exit();
    assert_ne!(code, Some(0));
    assert!(
        log.contains("does not say it speaks the activation contract"),
        "{log}"
    );
}

#[test]
fn a_backend_without_pools_refuses_a_pooled_template() {
    let dir = test_dir("pool-fake");
    let file = dir.join("templates.json");
    write_templates(&file, json!({"warm": {"image": "x:1", "pool": 2}}));
    let settings = settings(&[&format!("-worker-templates-file={}", file.display())]);
    let backend: std::sync::Arc<dyn a2a_worker_controller::backend::Backend> =
        std::sync::Arc::new(FakeBackend::default());
    let refused = a2a_worker_controller::open_templates(&settings, &backend)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("template \"warm\"") && refused.contains("pool: the"),
        "{refused}"
    );
    assert!(refused.contains("keeps no warm pools"), "{refused}");
}

/// The `q`-quantile (0..=1) of `samples`, nearest rank.
fn quantile(mut samples: Vec<Duration>, q: f64) -> Duration {
    samples.sort();
    let rank = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len());
    samples[rank - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// scripts/bench.sh: creates from a pool of 4 (refilled between) against cold creates of the
/// same image in the same run, a burst of 2N against N, and two replicas racing for one task.
#[test]
#[ignore]
fn docker_bench_pool() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let rounds = rounds("BENCH_CREATE_ROUNDS", 20).max(1);
    let id = controller_id("pool-bench");
    let _cleanup = Cleanup::new(&socket, &id);
    let _volumes = crate::templates::VolumeCleanup(socket.clone(), id.clone());
    let dir = test_dir("pool-bench");
    let file = dir.join("templates.json");
    write_templates(&file, pooled_templates(&worker_image(), 4, "bench"));
    let flag = format!("-worker-templates-file={}", file.display());
    let p = Proc::start(&socket, &id, &[&flag]);
    let (mut pooled, mut cold) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        wait_members(&socket, &id, 4);
        wait_ready_here(&p, 4);
        for (template, times) in [("warm", &mut pooled), ("cold", &mut cold)] {
            let started = Instant::now();
            let made = create(&p, &format!("bench {template} {i}"), template);
            times.push(started.elapsed());
            let wid = made["worker"]["worker_id"].as_str().unwrap().to_string();
            if template == "warm" {
                assert!(was_pooled(&socket, &wid, &id), "round {i} from the pool");
            }
            reply_data(&p.control(json!({"operation": "stop", "worker_id": wid})));
        }
    }
    let (p50, p99, cold50) = (
        quantile(pooled.clone(), 0.5),
        quantile(pooled, 0.99),
        quantile(cold, 0.5),
    );
    println!("BENCH pool: create from the pool p50 {p50:?} p99 {p99:?}, cold p50 {cold50:?} ({rounds} each)");
    println!(
        "ROW|Docker: create from the pool, p50 / p99 ({rounds} creates, pool 4, refilled between)|{:.1} / {:.1} ms, ×{:.3} of a cold create ({:.1} ms)|≤ 30 / ≤ 60 ms, ≤ ×0.15",
        ms(p50),
        ms(p99),
        p50.as_secs_f64() / cold50.as_secs_f64(),
        ms(cold50)
    );

    // A burst of 2N against N.
    wait_members(&socket, &id, 4);
    wait_ready_here(&p, 4);
    let started = Instant::now();
    let burst: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let p = &p;
                s.spawn(move || create(p, &format!("burst {i}"), "warm"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let took = started.elapsed();
    let from_pool = burst
        .iter()
        .filter(|d| was_pooled(&socket, d["worker"]["worker_id"].as_str().unwrap(), &id))
        .count();
    let refill = Instant::now();
    wait_members(&socket, &id, 4);
    println!(
        "ROW|a burst of 2N creates against a pool of N (N = 4)|{} succeeded in {:.0} ms: {from_pool} from the pool, {} cold; the pool full again {:.1} s later|N from the pool, N cold, all succeed, then full",
        burst.len(),
        ms(took),
        burst.len() - from_pool,
        refill.elapsed().as_secs_f64()
    );
    for d in &burst {
        let stopped =
            p.control(json!({"operation": "stop", "worker_id": d["worker"]["worker_id"]}));
        assert_eq!(
            stopped["status"]["state"],
            "TASK_STATE_COMPLETED",
            "{stopped}\n{d}\n{}",
            p.log_text()
        );
    }

    // Two replicas × 10 racing creates of one task.
    let q = Proc::start(&socket, &id, &[&flag]);
    wait_members(&socket, &id, 4);
    wait_ready_here(&p, 4);
    wait_ready_here(&q, 4);
    let before = members(&socket, &id);
    let results: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let (p, q) = (&p, &q);
                s.spawn(move || {
                    let c = if i % 2 == 0 { p } else { q };
                    c.control(
                        json!({"operation": "create", "task": "one task", "template": "warm"}),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let winner = std::panic::catch_unwind(|| one_winner(&results)).unwrap_or_else(|_| {
        panic!(
            "the race went wrong; the controllers said:\n{}\n---\n{}",
            p.log_text(),
            q.log_text()
        )
    });
    let tokens = results
        .iter()
        .filter(|t| t["status"]["state"] == "TASK_STATE_COMPLETED")
        .count();
    wait_members(&socket, &id, 4);
    let after = all_containers(&socket, &id).len();
    let taken = before
        .iter()
        .filter(|m| !members(&socket, &id).contains(m))
        .count();
    println!(
        "ROW|two replicas × 10 racing creates for one task|{} worker ({winner}), {tokens} token handed out; {taken} member taken and replaced, {after} containers (4 members + 1 worker)|exactly one worker and one token; no member lost",
        listed(&q).len()
    );
    assert_eq!(after, 5);
}
