//! Integration tests: one binary, real sockets. Modules by surface.

mod cli;
mod control_ops;
mod docker_e2e;
mod docker_support;
mod hostile_http;
mod http_surface;
mod jsonrpc;
mod python_sdk;
mod support;
mod tasks;
