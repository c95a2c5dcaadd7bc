//! The `copus` binary: parse the command line and hand over to the library.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = copus::cli::Cli::parse();
    match copus::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("copus: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
