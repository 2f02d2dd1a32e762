//! libtorch is a shared library inside the PyTorch venv, not on the loader's path. torch-sys
//! (`links = "tch"`) tells direct dependents where it is (`DEP_TCH_LIBTORCH_LIB`); this script
//! turns that into:
//!
//! - an rpath for this crate's own tests and examples, so `cargo test` needs no
//!   `LD_LIBRARY_PATH`;
//! - `--no-as-needed -ltorch_cuda`, because nothing references libtorch_cuda's symbols directly
//!   and `--as-needed` would drop it, leaving `tch::Cuda::is_available()` false on a GPU machine;
//! - `lib_dir` / `torch_cuda` metadata (this crate has `links = "hetgen_torch"`), because cargo
//!   never passes `rustc-link-arg` on to dependents: a binary crate that depends on this one
//!   reads `DEP_HETGEN_TORCH_LIB_DIR` and `DEP_HETGEN_TORCH_TORCH_CUDA` in its own build script
//!   and emits the same two link arguments (see `runtime/trainer/README.md`);
//! - `$OUT_DIR/libtorch_lib_dir.txt`, behind `hetgen_trainer::LIBTORCH_LIB_DIR`, for diagnostics.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let dir = std::env::var("DEP_TCH_LIBTORCH_LIB").unwrap_or_default();
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR for build scripts");
    std::fs::write(Path::new(&out).join("libtorch_lib_dir.txt"), &dir)
        .expect("OUT_DIR is writable");
    if dir.is_empty() {
        // torch-sys found libtorch some other way (e.g. a system install on the loader path).
        return;
    }
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:lib_dir={dir}");
    let cuda = Path::new(&dir).join("libtorch_cuda.so").exists();
    if cuda {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
    println!("cargo:torch_cuda={}", u8::from(cuda));
}
