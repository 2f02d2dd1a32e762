//! libtorch is a shared library in the PyTorch venv: give this crate's binaries an rpath to it,
//! and pass the folder on (links metadata, `DEP_HETGEN_RUNTIME_LIBTORCH_LIB` and
//! `DEP_HETGEN_RUNTIME_TORCH_CUDA`) so the job's launcher crate can do the same: cargo never
//! passes link arguments on to dependents.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_HETGEN_TORCH_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_HETGEN_TORCH_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        println!("cargo:libtorch_lib={dir}");
        let cuda = std::env::var("DEP_HETGEN_TORCH_TORCH_CUDA").unwrap_or_default();
        if cuda == "1" {
            println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
        }
        println!("cargo:torch_cuda={cuda}");
    }
}
