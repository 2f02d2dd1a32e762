//! Problems found in a spec, pointing at the user's bytes.
//!
//! Validation collects every [`Problem`] rather than stopping at the first, like cargo counts
//! errors. Each carries a stable code (`hetgen::spec::unknown-group`), the span of the offending
//! value, a label for the caret and a help line naming the fix. The library never prints: the
//! binary renders problems with miette, or as JSON with [`Problem::to_json`].

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use miette::{Diagnostic, LabeledSpan, SourceCode};
use serde::Serialize;

/// How bad a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The spec cannot be used.
    Error,
    /// The spec works but is probably not what was meant.
    Warning,
}

/// The spec file a problem is in: its name as the user gave it, and its text.
#[derive(Debug, Clone)]
pub struct SpecSource {
    name: Arc<str>,
    text: Arc<str>,
}

impl SpecSource {
    /// A source named `name` (usually the path the user gave) holding `text`.
    pub fn new(name: impl Into<Arc<str>>, text: impl Into<Arc<str>>) -> Self {
        SpecSource {
            name: name.into(),
            text: text.into(),
        }
    }

    /// The file's name as the user gave it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// 1-based line and column (in characters) of byte `offset`.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = floor_char_boundary(&self.text, offset.min(self.text.len()));
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        (line, column)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

/// One problem in a spec.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Stable identifier, e.g. `hetgen::spec::unknown-group`.
    pub code: &'static str,
    /// Error or warning.
    pub severity: Severity,
    /// What is wrong, lowercase, literals in backticks.
    pub message: String,
    /// The offending bytes, when hetgen knows them.
    pub span: Option<Range<usize>>,
    /// Text under the caret.
    pub label: String,
    /// How to fix it.
    pub help: Option<String>,
    source: SpecSource,
}

impl Problem {
    pub(crate) fn new(
        source: &SpecSource,
        code: &'static str,
        severity: Severity,
        message: String,
        span: Option<Range<usize>>,
        label: String,
        help: Option<String>,
    ) -> Self {
        Problem {
            code,
            severity,
            message,
            span,
            label,
            help,
            source: source.clone(),
        }
    }

    /// The file the problem is in.
    pub fn source(&self) -> &SpecSource {
        &self.source
    }

    /// 1-based line and column of the problem's first byte, when it has a span.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        self.span.as_ref().map(|s| self.source.line_col(s.start))
    }

    /// The problem as a machine-readable object (`hetgen validate --format json`).
    pub fn to_json(&self) -> serde_json::Value {
        let (line, column) = self.line_col().unzip();
        serde_json::json!({
            "file": self.source.name(),
            "line": line,
            "column": column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "label": self.label,
            "help": self.help,
        })
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Problem {}

impl Diagnostic for Problem {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(match self.severity {
            Severity::Error => miette::Severity::Error,
            Severity::Warning => miette::Severity::Warning,
        })
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.help
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let span = self.span.clone()?;
        let label = LabeledSpan::new_with_span(Some(self.label.clone()), span);
        Some(Box::new(std::iter::once(label)))
    }
}

impl SourceCode for SpecSource {
    fn read_span<'a>(
        &'a self,
        span: &miette::SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        let text: &'a str = &self.text;
        let contents = text.read_span(span, context_lines_before, context_lines_after)?;
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name().to_owned(),
            contents.data(),
            *contents.span(),
            contents.line(),
            contents.column(),
            contents.line_count(),
        )))
    }
}

/// Every problem of one spec, errors and warnings together, in file order.
#[derive(Debug, Clone)]
pub struct Report {
    /// The file checked.
    pub source: SpecSource,
    /// What was found.
    pub problems: Vec<Problem>,
}

impl Report {
    /// Whether any problem is an error.
    pub fn has_errors(&self) -> bool {
        self.errors() > 0
    }

    /// Number of errors.
    pub fn errors(&self) -> usize {
        self.count(Severity::Error)
    }

    /// Number of warnings.
    pub fn warnings(&self) -> usize {
        self.count(Severity::Warning)
    }

    fn count(&self, severity: Severity) -> usize {
        self.problems
            .iter()
            .filter(|p| p.severity == severity)
            .count()
    }

    /// The whole report as JSON: `{ "file", "valid", "errors", "warnings", "problems": [...] }`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "file": self.source.name(),
            "valid": !self.has_errors(),
            "errors": self.errors(),
            "warnings": self.warnings(),
            "problems": self.problems.iter().map(Problem::to_json).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (errors, warnings) = (self.errors(), self.warnings());
        write!(
            f,
            "`{}`: {errors} error{}, {warnings} warning{}",
            self.source.name(),
            plural(errors),
            plural(warnings)
        )
    }
}

impl std::error::Error for Report {}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
