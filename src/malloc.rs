//! glibc's malloc gives a thread that finds every arena busy a new one, up to eight per core,
//! and an arena keeps the pages it once used while anything in it lives. With a thread per
//! connection that was most of the controller's memory under load (64 keep-alive clients
//! listing 30 workers on 2 cores: 15 arenas of ~1.1 MiB each, peak 24 MiB; with two arenas
//! 16.5 MiB, and more lists per second). The limit can only be set before the first
//! allocation, from the environment (`MALLOC_ARENA_MAX`), and this crate has no unsafe code to
//! call `mallopt` with; so on Linux with glibc the server executes itself once more with the
//! variable set (same process id, arguments and environment), unless it is already set, which
//! leaves the operator's own value alone. Elsewhere (macOS, musl) this does nothing.
//!
//! With it goes a fixed trim threshold (`MALLOC_TRIM_THRESHOLD_`, glibc's own default of 128
//! KiB): set, it stops glibc raising the threshold each time a large block is freed, which
//! otherwise keeps what a burst used. 64 watchers joining over 1,000 workers: 59 MiB resident
//! with them and 56 MiB after they left without it, 39 and 36 MiB with it.

/// The environment variable glibc reads, and the value the server runs with.
pub const VARIABLE: &str = "MALLOC_ARENA_MAX";
pub const ARENAS: &str = "2";
/// The trim threshold set with it (unless the operator set one).
pub const TRIM_VARIABLE: &str = "MALLOC_TRIM_THRESHOLD_";
pub const TRIM: &str = "131072";

/// Replaces this process with itself under [`ARENAS`] arenas. Returns only when it did not:
/// `Ok` when there is nothing to do, the error when the exec failed (the server then runs on
/// with glibc's default).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn limit_arenas() -> std::io::Result<()> {
    use std::os::unix::process::CommandExt;
    if std::env::var_os(VARIABLE).is_some() {
        return Ok(());
    }
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_default();
    // The running program's own file, even if the path it was started from now names a newer
    // binary (an install replaces it by rename).
    let mut command = std::process::Command::new("/proc/self/exe");
    command.arg0(arg0).args(args).env(VARIABLE, ARENAS);
    if std::env::var_os(TRIM_VARIABLE).is_none() {
        command.env(TRIM_VARIABLE, TRIM);
    }
    Err(command.exec())
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn limit_arenas() -> std::io::Result<()> {
    Ok(())
}
