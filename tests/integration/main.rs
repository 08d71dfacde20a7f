//! Integration tests: one binary, real sockets. Modules by surface.

mod architecture;
mod cli;
mod cli_client;
mod conformance;
mod control_ops;
mod docker_e2e;
mod docker_support;
mod faults;
mod hostile_http;
mod hostile_input;
mod http_surface;
mod jsonrpc;
mod k8s_client;
mod k8s_e2e;
mod k8s_manifests;
mod k8s_support;
mod load;
mod local_e2e;
mod local_support;
mod observability;
mod panic_policy;
mod sdk_interop;
mod secrets;
mod support;
mod tasks;
mod token_files;
