//! Finds the bytes of the user's file that a key path points at.
//!
//! Validation works on the plain typed spec and names a problem by its key path
//! (`instance_group[1].count`). Like cargo, hetgen keeps the spanned TOML document beside the
//! typed one and looks the span up by that path when it reports the problem, so the typed structs
//! stay free of span wrappers.

use std::ops::Range;

use toml::Spanned;
use toml::de::{DeArray, DeString, DeTable, DeValue};

/// One step of a key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A table key.
    Key(String),
    /// An array index.
    Index(usize),
}

impl From<&str> for Seg {
    fn from(key: &str) -> Self {
        Seg::Key(key.to_owned())
    }
}

impl From<usize> for Seg {
    fn from(index: usize) -> Self {
        Seg::Index(index)
    }
}

/// A key path into the spec, e.g. `["instance_group", 1, "count"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyPath(pub Vec<Seg>);

impl KeyPath {
    /// The empty path: the document itself.
    pub fn root() -> Self {
        KeyPath(Vec::new())
    }

    /// This path with `seg` appended.
    pub fn at(&self, seg: impl Into<Seg>) -> Self {
        let mut segs = self.0.clone();
        segs.push(seg.into());
        KeyPath(segs)
    }

    /// The entry the path ends at as a message names it: its key in backticks, "`batch_size`"
    /// (the whole path where it ends at an array element).
    pub fn name(&self) -> String {
        match self.0.last() {
            Some(Seg::Key(key)) => format!("`{key}`"),
            _ => format!("`{self}`"),
        }
    }
}

/// Builds a [`KeyPath`] from keys and indices: `path!["instance_group", 1, "count"]`.
#[macro_export]
macro_rules! path {
    ($($seg:expr),* $(,)?) => {
        $crate::spans::KeyPath(vec![$($crate::spans::Seg::from($seg)),*])
    };
}

impl std::fmt::Display for KeyPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// The spanned document of one spec file.
pub struct SpanIndex<'i> {
    root: Option<Spanned<DeTable<'i>>>,
}

impl<'i> SpanIndex<'i> {
    /// Parses `text` into its spanned document; the error is the TOML syntax error.
    pub fn parse(text: &'i str) -> Result<Self, toml::de::Error> {
        DeTable::parse(text).map(|root| SpanIndex { root: Some(root) })
    }

    /// An index without a document: every lookup finds nothing.
    pub fn empty() -> Self {
        SpanIndex { root: None }
    }

    /// The span of the value at `path`, or of the nearest enclosing value that exists (a missing
    /// key is reported at its table).
    pub fn value(&self, path: &KeyPath) -> Option<Range<usize>> {
        self.find(path).map(|(_, value)| value)
    }

    /// The span of the value at `path` when every step of the path exists.
    pub fn exact(&self, path: &KeyPath) -> Option<Range<usize>> {
        self.walk(path)
            .filter(|(steps, _, _)| *steps == path.0.len())
            .map(|(_, _, value)| value)
    }

    /// The span of the key at `path` when it is a table key, else of the value.
    pub fn key(&self, path: &KeyPath) -> Option<Range<usize>> {
        self.find(path).map(|(key, value)| key.unwrap_or(value))
    }

    /// Inside `within`, the span of a key named `name` (used to point at an unknown key that
    /// serde reported with the span of its whole table).
    pub fn key_named_within(&self, name: &str, within: Range<usize>) -> Option<Range<usize>> {
        let root = self.root.as_ref()?;
        let mut found = None;
        visit_table(root.get_ref(), &mut |key: &Spanned<_>| {
            let span = key.span();
            if found.is_none()
                && key.get_ref() == name
                && span.start >= within.start
                && span.end <= within.end
            {
                found = Some(span);
            }
        });
        found
    }

    fn find(&self, path: &KeyPath) -> Option<(Option<Range<usize>>, Range<usize>)> {
        self.walk(path).map(|(_, key, value)| (key, value))
    }

    /// How many steps of `path` exist, and the spans of the key and value the last one reached.
    /// Each step is one lookup, so a lookup costs the path's length, not the document's size.
    fn walk(&self, path: &KeyPath) -> Option<(usize, Option<Range<usize>>, Range<usize>)> {
        let root = self.root.as_ref()?;
        let mut steps = 0;
        let mut best = (None, root.span());
        let mut table: Option<&DeTable<'i>> = Some(root.get_ref());
        let mut array: Option<&DeArray<'i>> = None;
        for seg in &path.0 {
            let next = match seg {
                Seg::Key(name) => table.and_then(|t| {
                    t.get_key_value(name.as_str())
                        .map(|(k, v)| (Some(k.span()), v))
                }),
                Seg::Index(n) => array.and_then(|a| a.get(*n)).map(|v| (None, v)),
            };
            let Some((key_span, value)) = next else { break };
            steps += 1;
            best = (key_span, value.span());
            table = None;
            array = None;
            match value.get_ref() {
                DeValue::Table(t) => table = Some(t),
                DeValue::Array(a) => array = Some(a),
                _ => {}
            }
        }
        Some((steps, best.0, best.1))
    }
}

fn visit_table<'i>(table: &DeTable<'i>, f: &mut impl FnMut(&Spanned<DeString<'i>>)) {
    for (key, value) in table.iter() {
        f(key);
        visit_value(value.get_ref(), f);
    }
}

fn visit_value<'i>(value: &DeValue<'i>, f: &mut impl FnMut(&Spanned<DeString<'i>>)) {
    match value {
        DeValue::Table(t) => visit_table(t, f),
        DeValue::Array(items) => items.iter().for_each(|v| visit_value(v.get_ref(), f)),
        _ => {}
    }
}
