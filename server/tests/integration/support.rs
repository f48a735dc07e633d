//! Helpers of the service's tests: the shared kit (servers, HTTP client), and a gateway
//! started in this process on free loopback ports.

pub use tollgate_testkit::*;

/// Settings for `config`, listening and serving admin on free loopback ports.
pub fn loopback_options(config: impl Into<std::path::PathBuf>) -> tollgate_server::Settings {
    let mut options = tollgate_server::Settings::new([config]);
    options.listen = Some("127.0.0.1:0".parse().unwrap());
    options.admin = Some("127.0.0.1:0".parse().unwrap());
    options
}

/// A gateway started by a test, with the directory holding its config file.
pub struct RunningGateway {
    pub gateway: tollgate_server::Gateway,
    _dir: tempfile::TempDir,
}

impl RunningGateway {
    /// The config file it watches.
    pub fn config_file(&self) -> std::path::PathBuf {
        self._dir.path().join("gateway.toml")
    }
}

/// Starts the gateway with `config` written to a temporary file, listening and serving
/// admin on free loopback ports; `configure` adjusts the options first.
pub async fn start_gateway(
    config: &str,
    configure: impl FnOnce(&mut tollgate_server::Settings),
) -> RunningGateway {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, config).unwrap();
    let mut options = loopback_options(file);
    configure(&mut options);
    RunningGateway {
        gateway: tollgate_server::Gateway::start(options).await.unwrap(),
        _dir: dir,
    }
}
