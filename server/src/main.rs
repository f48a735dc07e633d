//! `tollgate`: the rate-limit service. See the crate's README, or `tollgate --help`.

fn main() -> std::process::ExitCode {
    tollgate_server::cli::main()
}
