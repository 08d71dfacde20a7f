//! The binary: parse settings, run, map the outcome to an exit code (2 for a refused setting).
//! A first argument that names a command (`create`, `list`, `stop`, `check`) makes it a client
//! instead; `egress` makes it the egress proxy (same settings).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use a2a_worker_controller::cli;
use a2a_worker_controller::settings::{self, Command};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    if args.first().is_some_and(|a| cli::is_command(a)) {
        let env = env.collect();
        let code = cli::main(&args, &env, &mut std::io::stdout(), &mut std::io::stderr());
        return ExitCode::from(code);
    }
    // `egress`: the egress proxy, from the same settings.
    let proxy = args.first().is_some_and(|a| a == "egress");
    let args = if proxy { args[1..].to_vec() } else { args };
    let settings = match settings::parse(args, env) {
        Ok(Command::Run(s)) => s,
        Ok(Command::Help(text)) => {
            println!("{text}\n{}", cli::help_text());
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version(text)) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("a2a-worker-controller: {e}");
            return ExitCode::from(2);
        }
    };
    // Before logging and before any thread: the exec replaces the process.
    let arenas = a2a_worker_controller::malloc::limit_arenas();
    a2a_worker_controller::init_logging();
    if let Err(e) = arenas {
        log::warn!(
            "could not set {} (running with glibc's default malloc arenas, which take more memory under load): {e}",
            a2a_worker_controller::malloc::VARIABLE
        );
    }
    if proxy {
        return match a2a_worker_controller::egress::run(&settings) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                log::error!("{e}");
                ExitCode::from(2)
            }
        };
    }
    match a2a_worker_controller::run(&settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
