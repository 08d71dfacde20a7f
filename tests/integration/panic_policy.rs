//! One panic policy, true everywhere: a request handler that panics is answered 500 and the
//! next request is served, under the release profile's own panic setting. Tests always unwind,
//! so this builds a small program (`tests/examples/panicking_handler.rs`) with
//! `cargo build --release` and talks to it over a real socket.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

use crate::support::request;

#[test]
fn a_panicking_handler_is_answered_500_and_the_server_serves_on_in_release() {
    let program = crate::support::build_example("panicking-handler", true);
    let mut child = Command::new(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("panic=unwind "),
        "the release profile unwinds: {line}"
    );
    let addr: SocketAddr = line.trim().rsplit_once("addr=").unwrap().1.parse().unwrap();

    let first = request(addr, "GET", "/panic", &[], b"");
    assert_eq!(first.status, 500, "{}", first.text());
    for _ in 0..3 {
        assert_eq!(request(addr, "GET", "/panic", &[], b"").status, 500);
    }
    let next = request(addr, "GET", "/ok", &[], b"");
    assert_eq!((next.status, next.text().trim()), (200, "still serving"));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the process is still running"
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}
