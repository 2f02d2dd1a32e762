//! How hetgen talks: diagnostics and logs to stderr, results to stdout, colour only on a
//! terminal and never with `NO_COLOR`.

use std::io::IsTerminal;

use miette::{Diagnostic, GraphicalReportHandler, GraphicalTheme};

use crate::exit::Failure;

fn handler() -> GraphicalReportHandler {
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let theme = if colour {
        GraphicalTheme::unicode()
    } else {
        GraphicalTheme::unicode_nocolor()
    };
    GraphicalReportHandler::new_themed(theme).with_width(100)
}

/// Renders one diagnostic as hetgen prints it.
pub fn render(diagnostic: &dyn Diagnostic) -> String {
    let mut out = String::new();
    handler()
        .render_report(&mut out, diagnostic)
        .expect("formatting into a String cannot fail");
    out
}

/// The most problems printed for people; `--format json` lists them all.
const MAX_PRINTED: usize = 50;

/// The first [`MAX_PRINTED`] problems of a report, how many more there are, then a one-line
/// summary.
pub fn render_report(report: &hetgen_spec::Report) -> String {
    let mut out = String::new();
    for problem in report.problems.iter().take(MAX_PRINTED) {
        out.push_str(&render(problem));
        out.push('\n');
    }
    if let Some(more) = report
        .problems
        .len()
        .checked_sub(MAX_PRINTED)
        .filter(|&n| n > 0)
    {
        out.push_str(&format!(
            "… and {more} more problem{} (`hetgen validate --format json` lists them all)\n",
            if more == 1 { "" } else { "s" }
        ));
    }
    out.push_str(&summary(report));
    out.push('\n');
    out
}

/// A `--format json` result on stdout, pretty-printed.
pub fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("JSON serializes")
    );
}

pub fn summary(report: &hetgen_spec::Report) -> String {
    let verdict = if report.has_errors() {
        "invalid"
    } else {
        "valid"
    };
    format!("{verdict}: {report}")
}

pub fn print_failure(failure: &Failure) {
    match failure {
        // Its problems were printed where they were found.
        Failure::InvalidSpec(_) => {}
        other => eprint!("{}", render(other)),
    }
}
