//! Problems found in a file hetgen reads, pointing at the user's bytes.
//!
//! Validation collects every [`Problem`] rather than stopping at the first, like cargo counts
//! errors. Each carries a stable code (`hetgen::spec::unknown-group`), the span of the offending
//! value, a label for the caret and a help line naming the fix. The library never prints: the
//! binary renders problems with miette, or as JSON with [`Problem::to_json`].
//!
//! This is hetgen's one problem type: the spec's checks make them from spans, and the rendered
//! Kubernetes files' checks (`hetgen-kube`) from a line, a column and a field path, with
//! [`Problem::at_position`].

use std::fmt;
use std::ops::Range;
use std::sync::Arc;

use miette::{Diagnostic, LabeledSpan, SourceCode, SourceSpan};
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

/// The longest message, label or help a problem keeps, in characters: a 10 MB job name quoted
/// in a message must not become 10 MB of terminal output.
const MAX_TEXT: usize = 240;
/// The most bytes of one line shown around a problem; longer lines are cut to a window.
const MAX_SNIPPET: usize = 400;
/// The longest span a label underlines, in bytes.
const MAX_LABEL: usize = 80;

/// The spec file a problem is in: its name as the user gave it, and its text.
#[derive(Debug, Clone)]
pub struct SpecSource {
    name: Arc<str>,
    text: Arc<str>,
    /// The byte offset of every line's start, so that finding a line is a binary search and
    /// reporting `n` problems costs `n log(lines)`, not `n × file size`.
    line_starts: Arc<[usize]>,
}

impl SpecSource {
    /// A source named `name` (usually the path the user gave) holding `text`.
    pub fn new(name: impl Into<Arc<str>>, text: impl Into<Arc<str>>) -> Self {
        let text: Arc<str> = text.into();
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        SpecSource {
            name: name.into(),
            text,
            line_starts,
        }
    }

    /// The 0-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= offset) - 1
    }

    /// The file's name as the user gave it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The byte offset of 1-based `line` and `column` (in characters), clamped to the text.
    pub fn offset(&self, line: usize, column: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return self.text.len();
        };
        let rest = &self.text[start..];
        start
            + rest
                .char_indices()
                .nth(column.saturating_sub(1))
                .map_or(rest.len(), |(i, _)| i)
    }

    /// 1-based line and column (in characters) of byte `offset`.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = floor_char_boundary(&self.text, offset.min(self.text.len()));
        let line = self.line_of(offset);
        let column = self.text[self.line_starts[line]..offset].chars().count() + 1;
        (line + 1, column)
    }
}

fn floor_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    offset
}

fn ceil_char_boundary(text: &str, mut offset: usize) -> usize {
    while !text.is_char_boundary(offset) {
        offset += 1;
    }
    offset
}

/// `text` cut to at most [`MAX_TEXT`] characters, with an ellipsis where it was cut.
fn capped(text: String) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
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
    /// The field the problem is about, in the file's own terms
    /// (`spec.template.spec.replicatedJobs[1].name`); empty when the problem is not about one
    /// field or its place is given by the span alone.
    pub path: String,
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
            message: capped(message),
            span,
            label: capped(label),
            help: help.map(capped),
            path: String::new(),
            source: source.clone(),
        }
    }

    /// An error at 1-based `line` and `column` of `source`, about the field at `path` (empty for
    /// a whole document or a syntax error): how checks that find a position rather than a span
    /// (a YAML parser, a field path looked up in a document) report. The caret marks one
    /// character, since the position is what is known, not the extent.
    pub fn at_position(
        source: &SpecSource,
        code: &'static str,
        (line, column): (usize, usize),
        path: String,
        message: String,
        help: Option<String>,
    ) -> Self {
        let at = source.offset(line, column);
        let len = source.text()[at..].chars().next().map_or(0, char::len_utf8);
        let label = if path.is_empty() {
            "here".to_owned()
        } else {
            format!("`{path}`")
        };
        let mut problem = Problem::new(
            source,
            code,
            Severity::Error,
            message,
            Some(at..at + len),
            label,
            help,
        );
        problem.path = path;
        problem
    }

    /// The file the problem is in.
    pub fn source(&self) -> &SpecSource {
        &self.source
    }

    /// 1-based line and column of the problem's first byte, when it has a span.
    pub fn line_col(&self) -> Option<(usize, usize)> {
        self.span.as_ref().map(|s| self.source.line_col(s.start))
    }

    /// `file:line:column`, as compilers print a location; the file alone without a span.
    pub fn location(&self) -> String {
        match self.line_col() {
            Some((line, column)) => format!("{}:{line}:{column}", self.source.name()),
            None => self.source.name().to_owned(),
        }
    }

    /// The problem as a machine-readable object (`hetgen validate --format json`).
    pub fn to_json(&self) -> serde_json::Value {
        let (line, column) = self.line_col().unzip();
        let mut json = serde_json::json!({
            "file": self.source.name(),
            "line": line,
            "column": column,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "label": self.label,
            "help": self.help,
        });
        if !self.path.is_empty() {
            json["path"] = self.path.clone().into();
        }
        json
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
        // Underline the start of a long value, not all of it.
        let text = self.source.text();
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let end = span.end.clamp(start, text.len());
        let end = if end - start > MAX_LABEL {
            ceil_char_boundary(text, start + MAX_LABEL)
        } else {
            end
        };
        let label = LabeledSpan::new_with_span(Some(self.label.clone()), start..end);
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
        // miette's own lookup scans the text from its start for every span; look the lines up
        // in the index instead and hand miette only the window of lines it shows.
        let text: &'a str = &self.text;
        let (start, end) = (span.offset(), span.offset() + span.len());
        if end > text.len() {
            return Err(miette::MietteError::OutOfBounds);
        }
        let first = self.line_of(start).saturating_sub(context_lines_before);
        let last = (self.line_of(end.saturating_sub(1).max(start)) + context_lines_after)
            .min(self.line_starts.len() - 1);
        // Through the last line's break, as miette's own lookup reads it.
        let through = self
            .line_starts
            .get(last + 1)
            .copied()
            .unwrap_or(text.len());
        let mut window = self.line_starts[first]..through;
        // A very long line is shown as a window around the span.
        if window.len() > MAX_SNIPPET {
            let from = start.saturating_sub(MAX_SNIPPET / 4).max(window.start);
            let to = (start + MAX_SNIPPET)
                .min(window.end)
                .max(end.min(window.end));
            window = floor_char_boundary(text, from)..ceil_char_boundary(text, to);
        }
        let inner = SourceSpan::new((start - window.start).into(), span.len());
        let part = &text[window.clone()];
        let contents = part.read_span(&inner, context_lines_before, context_lines_after)?;
        let (_, column) = self.line_col(start);
        let shift = contents.span().offset() + window.start;
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.name().to_owned(),
            contents.data(),
            SourceSpan::new(shift.into(), contents.span().len()),
            contents.line() + self.line_of(window.start),
            if contents.column() == 0 {
                0
            } else {
                column - 1
            },
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
