//! The status page (`/ui`): its files and security headers over HTTP, `UI=false`, and the page
//! itself in a real browser — Debian's chromium driven by playwright-core (`tests/js/ui.mjs`)
//! against a controller with the backend test double: sign in (a wrong token first), the empty
//! state, live updates from the watch stream, create with the token shown once, a worker
//! created elsewhere appearing and exiting live, logs, stop with a confirmation, a hostile task
//! name shown as text, no token in storage, cookies or the URL, no CSP violation; the keyboard
//! alone (sign in, create, stop; the focus ring visible), labelled fields, named column headers,
//! the aria-live connection line, no sideways scroll at 390 px; screenshots at 1280×800 and
//! 390×844 under `target/ui-screenshots/`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use a2a_worker_controller::backend::WorkerState;

use crate::support::*;

#[test]
fn the_page_is_served_with_strict_headers_and_can_be_turned_off() {
    let c = controller();
    let page = request(c.addr, "GET", "/ui", &[], b"");
    assert_eq!(page.status, 200);
    assert_eq!(
        page.header("Content-Type"),
        Some("text/html; charset=utf-8")
    );
    let csp = page.header("Content-Security-Policy").unwrap();
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(csp.contains(part), "{csp}");
    }
    assert_eq!(page.header("X-Content-Type-Options"), Some("nosniff"));
    assert_eq!(page.header("Referrer-Policy"), Some("no-referrer"));
    let html = page.text();
    assert!(
        !html.contains("<script>") && !html.contains("style="),
        "no inline script or style"
    );
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external resource"
    );
    let etag = page.header("ETag").unwrap().to_string();
    let again = request(c.addr, "GET", "/ui", &[("If-None-Match", &etag)], b"");
    assert_eq!(again.status, 304);
    for (path, kind) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
    ] {
        let r = request(c.addr, "GET", path, &[], b"");
        assert_eq!(
            (r.status, r.header("Content-Type")),
            (200, Some(kind)),
            "{path}"
        );
        assert!(r.header("Content-Security-Policy").is_some());
    }
    let js = request(c.addr, "GET", "/ui/app.js", &[], b"").text();
    assert!(
        !js.contains("innerHTML")
            && !js.contains("localStorage.setItem")
            && !js.contains("document.cookie")
    );
    assert_eq!(request(c.addr, "GET", "/ui/nope.js", &[], b"").status, 404);
    assert_eq!(request(c.addr, "POST", "/ui", &[], b"").status, 405);
    let size: usize = ["index.html", "app.js", "app.css"]
        .iter()
        .map(|f| {
            std::fs::metadata(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ui").join(f))
                .unwrap()
                .len() as usize
        })
        .sum();
    eprintln!("UI: the page adds {size} bytes to the binary");
    assert!(size < 64 << 10, "{size}");

    let off = Builder::default().flag("-ui=false").start();
    assert_eq!(request(off.addr, "GET", "/ui", &[], b"").status, 404);
}

/// Runs `tests/js/ui.mjs` against the controller at `url` in Debian's chromium; `on` carries
/// out what the script asks of the test's side (`EXIT <worker_id>`, `STOP`, `START`);
/// `pools` is what the header must say of warm pools (`""`: none).
/// `None` when the browser or the script's packages are not there (skipped, said).
pub fn drive_page(url: &str, pools: &str, mut on: impl FnMut(&str)) -> Option<()> {
    env_or_skip("A2A_TEST_CHROMIUM", "A2A_REQUIRE_UI")?;
    let dir = env_or_skip("A2A_TEST_JS_DIR", "A2A_REQUIRE_JS")?;
    let script = PathBuf::from(&dir).join("ui.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/js/ui.mjs"),
        &script,
    )
    .unwrap();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/ui-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut child = Command::new("node")
        .arg(&script)
        .arg(url)
        .arg(TOKEN)
        .arg(&shots)
        .arg(pools)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut out = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        out.push_str(&line);
        out.push('\n');
        if line.starts_with("EXIT ")
            || line.starts_with("SCOPED ")
            || line == "STOP"
            || line == "START"
        {
            on(&line);
            writeln!(stdin, "ok").unwrap();
        }
    }
    let status = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&status.stderr);
    assert!(status.status.success(), "ui.mjs failed:\n{out}\n{err}");
    assert!(out.contains("ui: ok"), "{out}");
    assert!(shots.join("ui-1280x800.png").exists() && shots.join("ui-390x844.png").exists());
    Some(())
}

#[test]
fn the_page_in_a_real_chromium() {
    // Two templates: the page offers both and creates from the one chosen.
    let dir = crate::templates::test_dir("ui");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        serde_json::json!({"reviewer": {"image": "reviewer:1", "description": "reads pull requests", "pool": 2}}),
    );
    let templates = format!("-worker-templates-file={}", file.display());
    // A backend that keeps pools: the header says the reviewer's pool is full.
    let pooling = std::sync::Arc::new(FakeBackend::default());
    pooling
        .pooling
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let c = Builder::default()
        .backend(pooling)
        .flag(&templates)
        .start_with_public_url_of_listener();
    let port = c.addr.port();
    let backend = std::sync::Arc::clone(&c.backend);
    let restart = || {
        Builder::default()
            .backend(std::sync::Arc::clone(&backend))
            .flag(&templates)
            .flag(&format!("-listen=127.0.0.1:{port}"))
            .flag(&format!("-a2a-public-url=http://127.0.0.1:{port}"))
            .start()
    };
    let url = c.url();
    let mut c = Some(c);
    drive_page(&url, "warm pool: reviewer 2/2 ready", |line| {
        if let Some(id) = line.strip_prefix("EXIT ") {
            backend.set_state(id, WorkerState::Exited, "exited with code 1");
        } else if let Some(task) = line.strip_prefix("SCOPED ") {
            backend.add_by_hand(task, "team-b");
        } else if line == "STOP" {
            drop(c.take());
        } else {
            c = Some(restart());
        }
    });
    for token in backend.tokens.lock().unwrap().iter() {
        crate::secrets::remember(token);
    }
}
