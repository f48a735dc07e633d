//! The gRPC code checked in under `src/grpc/generated/` is what `proto/` generates
//! today — regenerated here with `protox` (a protobuf compiler in Rust) and
//! `tonic-prost-build`, so neither the build nor this test needs `protoc`.
//!
//! After editing `proto/`: `TOLLGATE_WRITE_PROTOS=1 cargo test grpc_protos` rewrites it.

use std::path::Path;

const PROTOS: [&str; 2] = [
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
];

#[test]
fn the_checked_in_grpc_code_is_what_the_protos_generate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let checked_in = root.join("src/grpc/generated");
    let fresh = tempfile::tempdir().unwrap();
    let descriptors = protox::compile(PROTOS, [root.join("proto")]).unwrap();
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .build_transport(false)
        .out_dir(fresh.path())
        .compile_fds(descriptors)
        .unwrap();
    let write = std::env::var("TOLLGATE_WRITE_PROTOS").is_ok_and(|v| v == "1");
    let mut generated: Vec<_> = std::fs::read_dir(fresh.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    generated.sort();
    assert!(!generated.is_empty());
    for file in generated {
        let name = file.file_name().unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let ours = checked_in.join(name);
        if write {
            std::fs::write(&ours, &text).unwrap();
            continue;
        }
        let current = std::fs::read_to_string(&ours).unwrap_or_default();
        assert!(
            current == text,
            "{} is not what proto/ generates: run TOLLGATE_WRITE_PROTOS=1 cargo test grpc_protos",
            ours.display()
        );
    }
}
