//! `hetgen schema`: the JSON Schema of hetgen.toml, for editors (Taplo, Even Better TOML).

use std::process::ExitCode;

use crate::exit::Failure;

pub fn run() -> Result<ExitCode, Failure> {
    print!("{}", hetgen_spec::schema());
    Ok(ExitCode::SUCCESS)
}
