//! # hetgen-spec
//!
//! The `hetgen.toml` contract. A spec goes through three forms:
//!
//! 1. **raw** ([`raw::RawSpec`]): serde types mirroring the TOML, unknown keys rejected. The JSON
//!    Schema ([`schema`]) is generated from them.
//! 2. **checked** ([`check`]): every validation rule runs and every [`Problem`] is collected,
//!    each pointing at the file, line and column of the offending value through the spanned
//!    document ([`spans`]).
//! 3. **resolved** ([`Job`]): defaults applied, invariants proven; what `hetgen render` turns into
//!    files and what the launcher reads back inside every instance.
//!
//! The instance [`Catalog`] (vCPUs, GPUs, prices) lives here too, because validation needs it.

pub mod catalog;
mod check;
mod ctx;
pub mod data_port;
pub mod diagnostic;
pub mod duration;
pub mod framework;
pub mod kube;
pub mod kube_names;
pub mod model;
pub mod raw;
mod rules;
pub mod spans;
pub mod step;
mod suggest;

pub use catalog::{Catalog, Efa, InstanceType, Provenance};
pub use check::{Checked, check, check_bytes, check_file};
pub use diagnostic::{Problem, Report, Severity, SpecSource};
pub use model::Job;
pub use rules::MAX_POD_NAME;
pub use suggest::did_you_mean;

/// The JSON Schema of `hetgen.toml`, generated from [`raw::RawSpec`], pretty-printed with a
/// trailing newline (as committed in `schema/hetgen.schema.json`).
pub fn schema() -> String {
    let schema = schemars::schema_for!(raw::RawSpec);
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema serializes");
    text.push('\n');
    text
}
