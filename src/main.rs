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

/// A text command's `println!` that cannot write (a full disk, `> /dev/full`, an I/O error)
/// panics inside the standard library; say so as every other failure is said, with exit
/// status 1, instead of a panic message and status 101. Any other panic goes to the hook
/// that was in place (the explorer adds its terminal restore in front of it).
fn stdout_failure_is_an_error() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let message = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied());
        if let Some(why) = message.and_then(|m| m.strip_prefix("failed printing to stdout: ")) {
            eprintln!("copus: cannot write to standard output: {why}");
            std::process::exit(1);
        }
        previous(info);
    }));
}

/// The first `--flag -N` of `args` (a negative number where copus takes none) whose flag is
/// one of the subcommand's that takes a value, said as the error it is; `None` when there is
/// none (an unknown flag, or one that takes no value, is clap's error: `--bogus -1` read as
/// "a negative number, which --bogus does not take").
fn negative_value(args: impl Iterator<Item = String>, cli: &clap::Command) -> Option<String> {
    let args: Vec<String> = args.collect();
    let sub = args
        .iter()
        .skip(1)
        .find_map(|a| cli.find_subcommand(a.as_str()))
        .unwrap_or(cli);
    let takes_value = |flag: &str| {
        let name = flag.trim_start_matches("--");
        sub.get_arguments()
            .chain(cli.get_arguments())
            .any(|a| a.get_long() == Some(name) && a.get_action().takes_values())
    };
    args.windows(2).find_map(|w| {
        let (flag, value) = (&w[0], &w[1]);
        let negative = value.len() > 1
            && value.starts_with('-')
            && value[1..]
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == 'e');
        (flag.starts_with("--") && flag.len() > 2 && negative && takes_value(flag)).then(|| {
            format!("{flag} {value}: a negative number, which {flag} does not take (see --help)")
        })
    })
}

fn main() -> std::process::ExitCode {
    #[cfg(unix)]
    default_sigpipe();
    stdout_failure_is_an_error();
    copus::malloc_tuning::tune_for_large_buffers();
    copus::signals::install_abort_handler();
    let cli = match copus::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--batch -512` reads to clap as the flags -5, -1, -2: name the value instead.
            if e.kind() == clap::error::ErrorKind::UnknownArgument
                && let Some(said) = negative_value(
                    std::env::args(),
                    &<copus::cli::Cli as clap::CommandFactory>::command(),
                )
            {
                eprintln!("copus: {said}");
                return std::process::ExitCode::from(2);
            }
            e.exit()
        }
    };
    match copus::cli::run(cli) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("copus: {}", copus::cli::error_message(&e));
            std::process::ExitCode::from(copus::cli::exit_code(&e))
        }
    }
}
