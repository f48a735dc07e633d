//! The image and the Kubernetes manifests, run for real with Debian's podman.
//!
//! This machine has no registry, so the image's base is made here from Debian's packages
//! (`debootstrap --variant=minbase bookworm`, `podman import`), once, and the
//! Containerfile's `prebuilt` stage puts the `tollgate` binary these tests were built with
//! on it: no second compilation. The container runs as operators run it: read-only, as
//! the image's unnamed user, its config from a mounted directory, its settings from
//! `TOLLGATE_*`. Containers start here only with lowered limits (`--ulimit nofile=1024:1024
//! --ulimit nproc=1024:1024`) and runc; `podman kube play` is given the same through a
//! `containers.conf` of its own.
//!
//! Without podman (or debootstrap, when the base is not built yet) the tests say so loudly
//! and skip, unless `CI=true`, where they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{blocking_get, free_port, upstream};

/// The base the image is built on: Debian bookworm, minimal, imported from a folder.
const BASE: &str = "localhost/tollgate-test-base";
/// The image under test (the tag `kube play` refers to).
const IMAGE: &str = "localhost/tollgate:test";
/// Each podman command is bounded (seconds), as is everything a test waits for.
const PODMAN_TIMEOUT: &str = "300";

fn installed(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A loud skip, or a failure under `CI=true`.
fn skip(why: &str) -> Option<String> {
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{why}: required under CI (apt-get install podman runc debootstrap)"
    );
    eprintln!("SKIPPED: {why} (apt-get install podman runc debootstrap)");
    None
}

/// `podman args…` (bounded by `timeout`), with `CONTAINERS_CONF` when given.
fn podman(args: &[&str], conf: Option<&Path>) -> Output {
    let mut command = Command::new("timeout");
    command.arg(PODMAN_TIMEOUT).arg("podman").args(args);
    if let Some(conf) = conf {
        command.env("CONTAINERS_CONF", conf);
    }
    command.output().expect("podman runs")
}

/// `podman args…`, which must succeed; its stdout.
fn podman_ok(args: &[&str], conf: Option<&Path>) -> String {
    let output = podman(args, conf);
    assert!(
        output.status.success(),
        "podman {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// The image's ID, built once per test binary; `None` when podman is missing.
fn image() -> Option<&'static str> {
    static BUILT: OnceLock<Option<String>> = OnceLock::new();
    BUILT.get_or_init(build_image).as_deref()
}

fn build_image() -> Option<String> {
    if !installed("podman") || !installed("runc") {
        return skip("podman and runc are not installed");
    }
    if !podman(&["image", "exists", BASE], None).status.success() {
        if !installed("debootstrap") {
            return skip("debootstrap is not installed, and the test base image is not built");
        }
        import_base();
    }
    let context = tempfile::tempdir().unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::copy(
        manifest.join("Containerfile"),
        context.path().join("Containerfile"),
    )
    .unwrap();
    std::fs::copy(
        env!("CARGO_BIN_EXE_tollgate"),
        context.path().join("tollgate"),
    )
    .unwrap();
    // The image's trust roots, for https:// upstreams and rediss:// (none: an empty bundle).
    let roots = std::fs::read("/etc/ssl/certs/ca-certificates.crt").unwrap_or_default();
    std::fs::write(context.path().join("ca-certificates.crt"), roots).unwrap();
    // The build this one replaces, removed afterwards so runs do not pile up images.
    let previous = podman(&["image", "inspect", "--format", "{{.Id}}", IMAGE], None);
    let id_file = context.path().join("image-id");
    let base = format!("BASE_IMAGE={BASE}");
    let containerfile = context.path().join("Containerfile");
    podman_ok(
        &[
            "build",
            "--runtime",
            "runc",
            "--target",
            "prebuilt",
            "--build-arg",
            &base,
            "--iidfile",
            id_file.to_str().unwrap(),
            "-f",
            containerfile.to_str().unwrap(),
            "-t",
            IMAGE,
            context.path().to_str().unwrap(),
        ],
        None,
    );
    let id = std::fs::read_to_string(id_file).unwrap();
    let id = id.trim().trim_start_matches("sha256:").to_owned();
    let previous = String::from_utf8_lossy(&previous.stdout).trim().to_owned();
    if !previous.is_empty() && previous != id {
        // In use by another run's container: it stays, harmlessly.
        let _ = podman(&["rmi", &previous], None);
    }
    Some(id)
}

/// Debian bookworm, minimal, into a folder, imported as [`BASE`] (about 30 s, once per
/// machine: later runs find it).
fn import_base() {
    let folder = tempfile::tempdir().unwrap();
    let root = folder.path().join("rootfs");
    let status = Command::new("timeout")
        .args(["600", "debootstrap", "--variant=minbase", "bookworm"])
        .arg(&root)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "debootstrap --variant=minbase bookworm");
    let script = format!(
        "tar -C '{}' -c . | timeout {PODMAN_TIMEOUT} podman import - {BASE}",
        root.display()
    );
    let status = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "podman import of the base");
}

/// A container started by a test, removed on drop.
struct Container(String);

impl Container {
    fn logs(&self) -> String {
        let output = podman(&["logs", &self.0], None);
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman(&["rm", "--force", "--time", "0", &self.0], None);
    }
}

/// A name no other test run uses at the same time.
fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Polls `GET path` on `address` until `done` says yes (at most 60 s); the last answer.
fn until(
    address: std::net::SocketAddr,
    path: &str,
    done: impl Fn(u16, &str) -> bool,
    context: &dyn Fn() -> String,
) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if std::net::TcpStream::connect(address).is_ok() {
            let (status, body) = blocking_get(address, path);
            if done(status, &body) {
                return (status, body);
            }
        }
        assert!(
            Instant::now() < deadline,
            "GET {path} from {address} never as expected:\n{}",
            context()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// Writes `files` to `folder` the way the kubelet updates a ConfigMap volume: into a new
/// timestamped folder, `..data` pointed at it by an atomic rename, each file a link
/// through `..data` (made once).
fn kubelet_update(folder: &Path, version: &str, files: &[(&str, &str)]) {
    let target = folder.join(format!("..{version}"));
    std::fs::create_dir(&target).unwrap();
    for (name, text) in files {
        std::fs::write(target.join(name), text).unwrap();
    }
    let staged = folder.join("..data_tmp");
    std::os::unix::fs::symlink(format!("..{version}"), &staged).unwrap();
    std::fs::rename(&staged, folder.join("..data")).unwrap();
    for (name, _) in files {
        let link = folder.join(name);
        if !link.is_symlink() {
            let staged = folder.join(format!("{name}.tmp"));
            std::os::unix::fs::symlink(format!("..data/{name}"), &staged).unwrap();
            std::fs::rename(&staged, &link).unwrap();
        }
    }
}

/// Readable by the image's user (65532): what the kubelet or an operator's mount gives.
fn readable_by_all(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const RULES: &str = "[limits]\n\"/\" = \"100/min\"\nlogin = \"1/min\"\n";
const EDITED: &str = "[limits]\n\"/\" = \"100/min\"\nlogin = \"1/min\"\nfresh = \"1/min\"\n";

#[test]
fn the_image_runs_read_only_limits_and_reloads_a_configmap_style_swap() {
    let Some(image) = image() else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = runtime.block_on(upstream::queueing(8, Duration::ZERO));
    let config = tempfile::tempdir().unwrap();
    readable_by_all(config.path());
    kubelet_update(config.path(), "v1", &[("gateway.toml", RULES)]);
    let (proxy, admin, resp) = (free_port(), free_port(), free_port());
    let name = unique("tollgate-test");
    let mount = format!("{}:/etc/tollgate:ro", config.path().display());
    let env = [
        format!("TOLLGATE_LISTEN=127.0.0.1:{proxy}"),
        format!("TOLLGATE_ADMIN=127.0.0.1:{admin}"),
        format!("TOLLGATE_RESP=127.0.0.1:{resp}"),
        format!("TOLLGATE_UPSTREAM=http://{upstream}"),
    ];
    let mut args = vec![
        "run",
        "--detach",
        "--name",
        &name,
        "--runtime",
        "runc",
        "--ulimit",
        "nofile=1024:1024",
        "--ulimit",
        "nproc=1024:1024",
        "--network",
        "host",
        "--read-only",
        "--volume",
        &mount,
    ];
    for variable in &env {
        args.extend(["--env", variable]);
    }
    args.push(image);
    podman_ok(&args, None);
    let container = Container(name);
    let logs = || container.logs();
    assert_eq!(
        podman_ok(
            &["inspect", "--format", "{{.Config.User}}", &container.0],
            None
        ),
        "65532:65532",
        "the image runs as its unnamed user"
    );
    let proxy = std::net::SocketAddr::from(([127, 0, 0, 1], proxy));
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin));

    let (_, ready) = until(admin, "/readyz", |status, _| status == 200, &logs);
    assert_eq!(json(&ready)["status"], "ready", "{ready}");
    // The image logs one JSON object a line, for the container log's readers.
    let log = logs();
    assert!(log.contains("admin page http://"), "{log}");
    for line in log.lines() {
        let event = json(line);
        assert!(
            event["level"].is_string() && event["message"].is_string(),
            "{line}"
        );
    }
    assert_eq!(blocking_get(proxy, "/login").0, 200, "{}", logs());
    assert_eq!(blocking_get(proxy, "/login").0, 429, "{}", logs());

    let replies = runtime.block_on(async {
        let client = redis::Client::open(format!("redis://127.0.0.1:{resp}/")).unwrap();
        let mut connection = client.get_multiplexed_async_connection().await.unwrap();
        let mut replies = Vec::new();
        for _ in 0..3 {
            let reply: i64 = redis::cmd("RL.REDUCE")
                .arg("TwoPerMin")
                .arg(2)
                .arg(60)
                .query_async(&mut connection)
                .await
                .unwrap();
            replies.push(reply);
        }
        replies
    });
    assert_eq!(replies, [2, 1, 0], "RL.REDUCE through the container");

    // The kubelet's swap, in the mounted folder: applied without a restart, and the budget
    // spent before it kept.
    assert_eq!(blocking_get(proxy, "/fresh").0, 200);
    assert_eq!(
        blocking_get(proxy, "/fresh").0,
        200,
        "no rule for fresh yet"
    );
    kubelet_update(config.path(), "v2", &[("gateway.toml", EDITED)]);
    until(
        admin,
        "/config",
        |_, body| json(body)["generation"] == 2,
        &logs,
    );
    assert_eq!(
        blocking_get(proxy, "/fresh").0,
        200,
        "a new rule, a new bucket"
    );
    assert_eq!(blocking_get(proxy, "/fresh").0, 429, "the new rule limits");
    assert_eq!(
        blocking_get(proxy, "/login").0,
        429,
        "the spent budget is kept"
    );
}

/// The shipped manifests, made to run under `podman kube play` on one machine: one replica
/// with this run's image, its ports published on 127.0.0.1 alone at free ports, names of
/// its own, and an upstream that refuses at once (there is no `backend` here). Nothing else
/// changes: probes, securityContext, the other settings and the ConfigMap volume are the
/// shipped ones.
fn render_manifests(names: &str, ports: &[(u16, u16)]) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let read = |file: &str| std::fs::read_to_string(dir.join(file)).unwrap();
    let mut deployment = read("deployment.yaml");
    let mut configmap = read("configmap.yaml");
    let replace = |text: &mut String, from: &str, to: &str| {
        assert!(text.contains(from), "the manifest has {from:?}");
        *text = text.replace(from, to);
    };
    replace(
        &mut deployment,
        "image: tollgate:0.1.0",
        &format!("image: {IMAGE}"),
    );
    replace(&mut deployment, "replicas: 2", "replicas: 1");
    replace(&mut deployment, "http://backend:8000", "http://127.0.0.1:9");
    replace(
        &mut deployment,
        "\n  name: tollgate\n",
        &format!("\n  name: {names}\n"),
    );
    replace(
        &mut deployment,
        "name: tollgate-config",
        &format!("name: {names}-config"),
    );
    replace(
        &mut configmap,
        "name: tollgate-config",
        &format!("name: {names}-config"),
    );
    for (container, host) in ports {
        replace(
            &mut deployment,
            &format!("containerPort: {container}\n"),
            &format!(
                "containerPort: {container}\n              hostPort: {host}\n              hostIP: 127.0.0.1\n"
            ),
        );
    }
    format!("{configmap}---\n{deployment}")
}

/// A `kube play`ed manifest, taken down (and its ConfigMap volume removed) on drop.
struct Played {
    file: PathBuf,
    volume: String,
    conf: PathBuf,
}

impl Drop for Played {
    fn drop(&mut self) {
        let _ = podman(
            &["kube", "down", self.file.to_str().unwrap()],
            Some(&self.conf),
        );
        let _ = podman(&["volume", "rm", "--force", &self.volume], None);
    }
}

#[test]
fn the_manifests_run_under_podman_kube_play_answer_probes_and_apply_an_edited_configmap() {
    if image().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("containers.conf");
    std::fs::write(
        &conf,
        "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\n\
         [engine]\nruntime = \"runc\"\n",
    )
    .unwrap();
    let names = unique("tollgate-kube");
    let file = dir.path().join("tollgate.yaml");
    // A free port can be taken by another test between our look and podman's bind: then
    // the half-started pod is taken down and the manifests played again on other ports.
    let mut attempts = 0;
    let (played, proxy, admin) = loop {
        let (proxy, admin) = (free_port(), free_port());
        let ports = [
            (8080, proxy),
            (9090, admin),
            (9049, free_port()),
            (8081, free_port()),
        ];
        std::fs::write(&file, render_manifests(&names, &ports)).unwrap();
        let played = Played {
            file: file.clone(),
            volume: format!("{names}-config"),
            conf: conf.clone(),
        };
        let output = podman(&["kube", "play", file.to_str().unwrap()], Some(&conf));
        if output.status.success() {
            break (played, proxy, admin);
        }
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        attempts += 1;
        assert!(
            attempts < 3 && stderr.contains("address already in use"),
            "podman kube play: {}{stderr}",
            String::from_utf8_lossy(&output.stdout)
        );
        drop(played);
    };
    let container = format!("{names}-pod-0-tollgate");
    let logs = || {
        let output = podman(&["logs", &container], None);
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let proxy = std::net::SocketAddr::from(([127, 0, 0, 1], proxy));
    let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin));

    // The probes the Deployment declares, as the kubelet would ask them.
    let deployment = std::fs::read_to_string(&file).unwrap();
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        let declared = deployment.split(&format!("{probe}:")).nth(1).unwrap();
        assert!(
            declared
                .lines()
                .take(4)
                .any(|l| l.trim() == format!("path: {path}")),
            "{probe} asks {path}"
        );
        let (_, body) = until(admin, path, |status, _| status == 200, &logs);
        let status = &json(&body)["status"];
        assert!(status == "alive" || status == "ready", "{path}: {body}");
    }
    // The ConfigMap's rules: login is 5/min, strict.
    for _ in 0..5 {
        assert_ne!(blocking_get(proxy, "/login").0, 429, "{}", logs());
    }
    assert_eq!(blocking_get(proxy, "/login").0, 429, "{}", logs());

    // An edited ConfigMap, as the kubelet applies it to the pod's volume: the running pod
    // takes it within a second, without a restart (generation 2, not a new generation 1).
    let volume = podman_ok(
        &[
            "volume",
            "inspect",
            "--format",
            "{{.Mountpoint}}",
            &played.volume,
        ],
        None,
    );
    let shipped = std::fs::read_to_string(Path::new(&volume).join("gateway.toml")).unwrap();
    assert!(
        shipped.contains("login"),
        "the volume holds the ConfigMap: {shipped}"
    );
    let edited = format!("{shipped}\"fresh\" = \"1/min\"\n");
    kubelet_update(
        Path::new(&volume),
        "2026_11_25_v2",
        &[("gateway.toml", &edited)],
    );
    let (_, config) = until(
        admin,
        "/config",
        |_, body| json(body)["generation"] == 2,
        &logs,
    );
    assert!(config.contains("\"rule\":\"fresh\""), "{config}");
    assert_ne!(blocking_get(proxy, "/fresh").0, 429, "{}", logs());
    assert_eq!(
        blocking_get(proxy, "/fresh").0,
        429,
        "the edited ConfigMap limits"
    );
    assert_eq!(blocking_get(proxy, "/login").0, 429, "no budget was reset");
    drop(played);
}
