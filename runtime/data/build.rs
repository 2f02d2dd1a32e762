//! Compiles the data service contract. protoc comes from the protoc-bin-vendored crate, so no
//! system protobuf compiler is needed; `bytes` fields become `bytes::Bytes` so batches are not
//! copied on their way into and out of HTTP/2 frames.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "../proto/hetgen/data/v1/data.proto";
    println!("cargo:rerun-if-changed={proto}");
    // SAFETY: build scripts are single-threaded; nothing else reads the environment yet.
    unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    tonic_prost_build::configure()
        .bytes(".")
        .compile_protos(&[proto], &["../proto"])?;
    Ok(())
}
