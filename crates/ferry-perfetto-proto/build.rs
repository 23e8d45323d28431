//! Generates the decode types from `proto/perfetto_trace.proto` with the vendored `protoc`.

fn main() -> std::io::Result<()> {
    let proto = "proto/perfetto_trace.proto";
    println!("cargo:rerun-if-changed={proto}");
    let protoc = protoc_bin_vendored::protoc_bin_path().map_err(std::io::Error::other)?;
    let mut cfg = prost_build::Config::new();
    cfg.protoc_executable(protoc);
    cfg.compile_protos(&[proto], &["proto"])
}
