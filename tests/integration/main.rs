//! Integration tests: one binary, real sockets. Modules by surface.

mod cli;
mod control_ops;
mod http_surface;
mod jsonrpc;
mod python_sdk;
mod support;
mod tasks;
