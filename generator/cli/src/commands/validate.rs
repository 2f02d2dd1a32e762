//! `hetgen validate [SPEC] [--format json]`

use std::process::ExitCode;

use crate::cli::{Format, ValidateArgs};
use crate::exit::{Failure, code};
use crate::output;

pub fn run(args: &ValidateArgs) -> Result<ExitCode, Failure> {
    let checked = super::check(&args.spec)?;
    let report = &checked.report;
    match args.format {
        Format::Json => output::print_json(&report.to_json()),
        Format::Human => eprint!("{}", output::render_report(report)),
    }
    Ok(if report.has_errors() {
        ExitCode::from(code::INVALID_SPEC)
    } else {
        ExitCode::SUCCESS
    })
}
