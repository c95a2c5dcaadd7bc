//! The `copus` binary: parse the command line and hand over to the library.

use clap::Parser;

/// The system allocator, large blocks backed by huge pages (`copus::malloc_tuning`).
#[global_allocator]
static ALLOCATOR: copus::malloc_tuning::HugePageAlloc = copus::malloc_tuning::HugePageAlloc;

/// Die quietly on a closed pipe (`copus grid … | head`) like other command-line tools, instead
/// of panicking on the failed print: restore the default SIGPIPE action that Rust ignores.
#[cfg(unix)]
fn default_sigpipe() {
    // SAFETY: called once at start-up, before any thread exists; SIG_DFL is a valid action.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> std::process::ExitCode {
    #[cfg(unix)]
    default_sigpipe();
    copus::malloc_tuning::tune_for_large_buffers();
    copus::signals::install_abort_handler();
    let cli = copus::cli::Cli::parse();
    match copus::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("copus: {}", copus::cli::error_message(&e));
            std::process::ExitCode::from(copus::cli::exit_code(&e))
        }
    }
}
