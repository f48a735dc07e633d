//! The service as `cargo run --release --example gateway` runs it from the repository
//! root: the `tollgate` binary under its historical name, with the same flags.
//!
//! ```sh
//! cargo run --release --example gateway            # demo upstream, config/gateway.toml
//! cargo run --release --example gateway -- --upstream http://127.0.0.1:8000 --listen 0.0.0.0:8080
//! cargo run --release --example gateway -- --check # validate the config and print the rules
//! ```

fn main() -> std::process::ExitCode {
    tollgate_server::cli::main()
}
