//! Integration tests: one binary, real sockets. Modules by surface.

mod cli;
mod control_ops;
mod docker_e2e;
mod docker_support;
mod faults;
mod hostile_http;
mod hostile_input;
mod http_surface;
mod js_sdk;
mod jsonrpc;
mod load;
mod observability;
mod python_sdk;
mod secrets;
mod support;
mod tasks;
