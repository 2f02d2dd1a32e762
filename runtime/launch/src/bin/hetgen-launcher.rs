//! The generic launcher: every built-in stage, no custom ones. A job without custom stages can
//! use it instead of building its rendered launcher crate; tests run it as every simulated host.

fn main() -> std::process::ExitCode {
    hetgen_runtime::launch(hetgen_runtime::StageRegistry::builtin())
}
