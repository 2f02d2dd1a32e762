//! A problem found in a rendered Kubernetes file, pointing at its line and column.
//!
//! The same shape as the spec's problems (`hetgen_spec::Problem`): a stable code, a lowercase
//! message with literals in backticks, a help line, and the file's text so that miette can show
//! the line. The library never prints; the binary renders these.

use std::fmt;
use std::path::PathBuf;

use hetgen_spec::SpecSource;
use miette::{LabeledSpan, SourceCode};

/// The longest message or hint kept, in characters: a value quoted in a message must not flood
/// the terminal.
const MAX_TEXT: usize = 240;

/// One problem in one file.
#[derive(Debug, Clone)]
pub struct Diagnostic {
    /// Stable identifier, e.g. `hetgen::kube::unknown-field`.
    pub code: &'static str,
    /// The file as the caller named it.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// The field the problem is about (`spec.template.spec.replicatedJobs[1].name`), empty for
    /// a whole document or a syntax error.
    pub path: String,
    /// What is wrong, lowercase, literals in backticks.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
    source: SpecSource,
}

impl Diagnostic {
    pub(crate) fn new(
        source: &SpecSource,
        file: PathBuf,
        code: &'static str,
        (line, column): (usize, usize),
        path: String,
        message: String,
        hint: Option<String>,
    ) -> Self {
        Diagnostic {
            code,
            file,
            line,
            column,
            path,
            message: capped(message),
            hint: hint.map(capped),
            source: source.clone(),
        }
    }

    /// `file:line:column`, as compilers print a location.
    pub fn location(&self) -> String {
        format!("{}:{}:{}", self.file.display(), self.line, self.column)
    }

    /// The byte offset of the line and column in the file's text.
    fn offset(&self) -> usize {
        let text = self.source.text();
        let line_start = text
            .split_inclusive('\n')
            .take(self.line.saturating_sub(1))
            .map(str::len)
            .sum::<usize>();
        let rest = &text[line_start.min(text.len())..];
        line_start
            + rest
                .char_indices()
                .nth(self.column.saturating_sub(1))
                .map_or(rest.len(), |(i, _)| i)
    }

    /// The problem as a machine-readable object, as the spec's problems write it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "file": self.file.display().to_string(),
            "line": self.line,
            "column": self.column,
            "severity": "error",
            "code": self.code,
            "path": self.path,
            "message": self.message,
            "help": self.hint,
        })
    }
}

fn capped(text: String) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// The message alone, as miette shows it above the file's line; [`Diagnostic::location`] gives
/// the `file:line:column` for one-line forms.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

impl miette::Diagnostic for Diagnostic {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new(self.code))
    }

    fn severity(&self) -> Option<miette::Severity> {
        Some(miette::Severity::Error)
    }

    fn help<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        self.hint
            .as_ref()
            .map(|h| Box::new(h) as Box<dyn fmt::Display>)
    }

    fn source_code(&self) -> Option<&dyn SourceCode> {
        Some(&self.source)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        let at = self.offset();
        // One character under the caret: the position is what is known, not the extent.
        let len = self.source.text()[at..]
            .chars()
            .next()
            .map_or(0, char::len_utf8);
        let label = if self.path.is_empty() {
            LabeledSpan::new_with_span(Some("here".into()), at..at + len)
        } else {
            LabeledSpan::new_with_span(Some(format!("`{}`", self.path)), at..at + len)
        };
        Some(Box::new(std::iter::once(label)))
    }
}
