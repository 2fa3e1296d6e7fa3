//! The `augscope` binary: the command line of the library (`augscope::cli`).

fn main() -> std::process::ExitCode {
    augscope::cli::main()
}
