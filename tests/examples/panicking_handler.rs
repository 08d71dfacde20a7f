//! A server on the controller's HTTP layer whose handler panics on `/panic` and answers 200
//! everywhere else. `tests/integration/panic_policy.rs` builds it with the release profile, so
//! it runs under exactly the panic setting the shipped daemon has.
//!
//! Prints `panic=<strategy> addr=<bound address>` on one line, then serves until stdin closes.
#![forbid(unsafe_code)]

use std::io::Read;
use std::sync::Arc;

use a2a_worker_controller::http::{Handler, Limits, Request, Response, Server};

struct PanicsOnRequest;

impl Handler for PanicsOnRequest {
    fn handle(&self, request: Request) -> Response {
        if request.path == "/panic" {
            panic!("a bug in one request handler");
        }
        Response::text(200, "still serving")
    }
}

fn main() {
    let server = match Server::bind("127.0.0.1:0".parse().expect("a literal address")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("panicking-handler: {e}");
            std::process::exit(1);
        }
    };
    let addr = server.local_addr();
    let serving = match server.serve(Arc::new(PanicsOnRequest), Limits::default()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("panicking-handler: {e}");
            std::process::exit(1);
        }
    };
    let strategy = if cfg!(panic = "unwind") {
        "unwind"
    } else {
        "abort"
    };
    match addr {
        Some(addr) => println!("panic={strategy} addr={addr}"),
        None => println!("panic={strategy} addr=unknown"),
    }
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    serving.shutdown(std::time::Duration::from_secs(1));
}
