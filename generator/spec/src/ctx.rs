//! The shared state of one check, which the parser and every rule report their problems to.
//!
//! It has a module of its own so that the rules, which the checker runs, need nothing else of
//! the checker.

use std::path::Path;

use crate::diagnostic::{Problem, Severity, SpecSource};
use crate::spans::{KeyPath, SpanIndex};

/// Shared state of one check: where problems are collected and how paths find their spans.
pub(crate) struct Ctx<'a> {
    pub source: &'a SpecSource,
    pub spans: SpanIndex<'a>,
    pub problems: Vec<Problem>,
    /// The spec's folder, when files it names should be looked for.
    pub dir: Option<&'a Path>,
}

impl Ctx<'_> {
    /// Reports an error at the value `path` points to.
    pub fn error(
        &mut self,
        code: &'static str,
        path: &KeyPath,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        let span = self.spans.value(path);
        self.push(Severity::Error, code, span, message, label, help);
    }

    /// Reports an error at the key `path` names (for problems with a key rather than a value).
    pub fn error_at_key(
        &mut self,
        code: &'static str,
        path: &KeyPath,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        let span = self.spans.key(path);
        self.push(Severity::Error, code, span, message, label, help);
    }

    /// Reports a warning at the value `path` points to.
    pub fn warn(
        &mut self,
        code: &'static str,
        path: &KeyPath,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        let span = self.spans.value(path);
        self.push(Severity::Warning, code, span, message, label, help);
    }

    /// Reports a problem at `span` itself, for what is found before any key path can name it
    /// (the parser's and serde's errors).
    pub fn push(
        &mut self,
        severity: Severity,
        code: &'static str,
        span: Option<std::ops::Range<usize>>,
        message: impl Into<String>,
        label: impl Into<String>,
        help: impl Into<String>,
    ) {
        self.problems.push(Problem::new(
            self.source,
            code,
            severity,
            message.into(),
            span,
            label.into(),
            Some(help.into()),
        ));
    }
}
