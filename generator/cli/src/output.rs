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

/// Every problem of a report, then a one-line summary.
pub fn render_report(report: &hetgen_spec::Report) -> String {
    let mut out = String::new();
    for problem in &report.problems {
        out.push_str(&render(problem));
        out.push('\n');
    }
    out.push_str(&summary(report));
    out.push('\n');
    out
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
