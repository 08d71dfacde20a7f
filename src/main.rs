//! The binary: parse settings, run, map the outcome to an exit code (2 for a refused setting).
#![forbid(unsafe_code)]

use std::process::ExitCode;

use a2a_worker_controller::settings::{self, Command};

fn main() -> ExitCode {
    let args = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned());
    let env = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let settings = match settings::parse(args, env) {
        Ok(Command::Run(s)) => s,
        Ok(Command::Help(text)) | Ok(Command::Version(text)) => {
            println!("{text}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("a2a-worker-controller: {e}");
            return ExitCode::from(2);
        }
    };
    a2a_worker_controller::init_logging();
    match a2a_worker_controller::run(&settings) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
