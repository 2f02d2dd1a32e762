//! Parse, validate and resolve a spec: text in, a [`Job`] and a [`Report`] out.

use std::ops::Range;
use std::path::Path;
use std::sync::LazyLock;

use regex::Regex;

use crate::ctx::Ctx;
use crate::diagnostic::{Problem, Report, Severity, SpecSource};
use crate::model::Job;
use crate::raw::{RawChannel, RawInstanceGroup, RawMetric, RawSpec, RawStage};
use crate::rules;
use crate::spans::{KeyPath, Seg, SpanIndex};
use crate::suggest::did_you_mean;

/// Deepest nesting of arrays and inline tables hetgen reads. The TOML parser recurses per
/// level, so an absurdly nested file could exhaust the stack; no real spec nests past 5.
const MAX_NESTING: usize = 64;

/// The outcome of checking one spec.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The resolved job, when the spec has no errors.
    pub job: Option<Job>,
    /// Every error and warning found.
    pub report: Report,
}

/// Parses and validates the spec `text`, read from `name` (used in messages only).
///
/// Files the spec names relative to its folder (a script-mode trainer's script) are not
/// looked for: [`check_file`] does that.
pub fn check(name: &str, text: &str) -> Checked {
    check_in(name, text, None)
}

/// Like [`check_bytes`], for the spec file at `path`: also checks that the files the spec names
/// relative to its folder (a script-mode trainer's `source_dir`, `script` and `requirements`)
/// exist.
pub fn check_file(path: &Path, bytes: &[u8]) -> Checked {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    check_bytes_in(&path.display().to_string(), bytes, Some(dir))
}

fn check_in(name: &str, text: &str, dir: Option<&Path>) -> Checked {
    let source = SpecSource::new(name, text);
    let mut ctx = Ctx {
        source: &source,
        spans: SpanIndex::empty(),
        problems: Vec::new(),
        dir,
    };
    let job = parse(&mut ctx, text).and_then(|raw| rules::resolve(&mut ctx, &raw));
    let mut problems = ctx.problems;
    problems.sort_by_key(|p| p.span.as_ref().map_or(usize::MAX, |s| s.start));
    let report = Report { source, problems };
    Checked {
        job: job.filter(|_| !report.has_errors()),
        report,
    }
}

/// Like [`check`], from the file's bytes: a spec that is not UTF-8 text (UTF-16 included) is an
/// invalid spec, reported at the line and column of the first byte that is not.
pub fn check_bytes(name: &str, bytes: &[u8]) -> Checked {
    check_bytes_in(name, bytes, None)
}

fn check_bytes_in(name: &str, bytes: &[u8], dir: Option<&Path>) -> Checked {
    let utf16 = bytes.starts_with(&[0xFF, 0xFE]) || bytes.starts_with(&[0xFE, 0xFF]);
    let (text, at) = match std::str::from_utf8(bytes) {
        // UTF-16 of ASCII without a byte-order mark is valid UTF-8, with a NUL in every pair.
        Ok(text) => match text.find('\0') {
            None => return check_in(name, text, dir),
            Some(at) => (text.into(), at),
        },
        Err(e) => (String::from_utf8_lossy(bytes), e.valid_up_to()),
    };
    // The text up to the bad byte is the file's own, so its line and column are too; the bad
    // byte itself shows as U+FFFD (or as the NUL).
    let source = SpecSource::new(name, &*text);
    let width = text[at..].chars().next().map_or(0, char::len_utf8);
    let label = if bytes.get(at) == Some(&0) {
        "a NUL byte"
    } else {
        "the first byte that is not UTF-8"
    };
    let message = if utf16 || looks_like_utf16(bytes) {
        "the spec is UTF-16 text, not UTF-8".to_owned()
    } else if bytes.get(at) == Some(&0) {
        // NULs that are not UTF-16's high bytes: a binary file, or one cut off by a crash.
        "the spec is not text: it holds NUL bytes".to_owned()
    } else {
        format!("the spec is not UTF-8 text (byte 0x{:02x})", bytes[at])
    };
    let problem = Problem::new(
        &source,
        "hetgen::spec::encoding",
        Severity::Error,
        message,
        Some(at..at + width),
        label.to_owned(),
        Some("save the file as UTF-8 (editors offer the encoding when saving)".to_owned()),
    );
    Checked {
        job: None,
        report: Report {
            source,
            problems: vec![problem],
        },
    }
}

/// UTF-16 without a byte-order mark, as the text of a spec (mostly ASCII) looks: in its first
/// pairs of bytes one byte is NUL and the other is not, always on the same side.
fn looks_like_utf16(bytes: &[u8]) -> bool {
    let pairs: Vec<&[u8]> = bytes.chunks_exact(2).take(32).collect();
    let side =
        |nul: usize| !pairs.is_empty() && pairs.iter().all(|p| p[nul] == 0 && p[1 - nul] != 0);
    side(0) || side(1)
}

fn parse<'a>(ctx: &mut Ctx<'a>, text: &'a str) -> Option<RawSpec> {
    if let Some(offset) = too_deep(text) {
        ctx.push(
            Severity::Error,
            "hetgen::spec::too-deep",
            Some(offset..offset + 1),
            format!("arrays or tables nested deeper than {MAX_NESTING} levels"),
            "too deep",
            "a hetgen spec never needs this much nesting; check the brackets",
        );
        return None;
    }
    // The nesting guard runs before any parser touches the text; the spanned document then
    // serves both the syntax check and every later span lookup.
    match SpanIndex::parse(text) {
        Ok(spans) => ctx.spans = spans,
        Err(err) => {
            ctx.push(
                Severity::Error,
                "hetgen::spec::syntax",
                err.span(),
                format!("invalid TOML: {}", err.message()),
                "here",
                "fix the TOML syntax; see https://toml.io",
            );
            return None;
        }
    }
    match toml::from_str::<RawSpec>(text) {
        Ok(raw) => Some(raw),
        Err(err) => {
            schema_error(ctx, &err);
            None
        }
    }
}

static UNKNOWN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^unknown (field|variant) `([^`]*)`, (?:expected|there are no) (.*)$").unwrap()
});
static MISSING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^missing field `([^`]*)`").unwrap());
static TICKED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"`([^`]*)`").unwrap());

/// Turns serde's first type error into a problem with a hint: "did you mean" for unknown keys
/// and values, "add the key" for missing ones.
fn schema_error(ctx: &mut Ctx<'_>, err: &toml::de::Error) {
    // serde names Rust types; say what they are in TOML.
    let message = err
        .message()
        .trim()
        .replace("expected i64", "expected an integer")
        .replace("expected f64", "expected a number")
        .replace("expected u64", "expected an integer");
    let mut span = err.span();
    if let Some(whole) = &span
        && let Some(element) = failing_element(ctx, whole)
    {
        span = Some(element);
    }
    let (code, label, help) = if let Some(caps) = UNKNOWN.captures(&message) {
        let (kind, given) = (&caps[1], caps[2].to_owned());
        let expected: Vec<String> = TICKED
            .captures_iter(&caps[3])
            .map(|c| c[1].to_owned())
            .collect();
        let suggestion = did_you_mean(&given, expected.iter().map(String::as_str));
        let list = expected
            .iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ");
        if kind == "field" {
            // serde reports an unknown key inside an internally tagged table with the span of
            // the whole table; narrow it to the key itself.
            if let Some(within) = span.clone() {
                span = ctx.spans.key_named_within(&given, within).or(span);
            }
            let help = match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None if expected.is_empty() => "remove this key".to_owned(),
                None => format!("remove it, or use one of {list}"),
            };
            ("hetgen::spec::unknown-key", "unknown key", help)
        } else {
            let help = match suggestion {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!("use one of {list}"),
            };
            ("hetgen::spec::unknown-value", "not a known value", help)
        }
    } else if let Some(caps) = MISSING.captures(&message) {
        let help = format!("add `{} = …` here", &caps[1]);
        ("hetgen::spec::missing-key", "in this table", help)
    } else {
        (
            "hetgen::spec::wrong-type",
            "here",
            "see the spec reference in docs/spec.md, or the JSON Schema in schema/".to_owned(),
        )
    };
    ctx.push(Severity::Error, code, span, message, label, help);
}

/// An array of tables of the spec, and whether one of its elements deserializes on its own.
type ArrayOfTables = (&'static [&'static str], fn(toml::Value) -> bool);

/// Every array of tables in [`RawSpec`].
const ARRAYS_OF_TABLES: [ArrayOfTables; 4] = [
    (&["instance_group"], |v| {
        v.try_into::<RawInstanceGroup>().is_ok()
    }),
    (&["channel"], |v| v.try_into::<RawChannel>().is_ok()),
    (&["pipeline", "stage"], |v| v.try_into::<RawStage>().is_ok()),
    (&["sagemaker", "metric"], |v| {
        v.try_into::<RawMetric>().is_ok()
    }),
];

/// When `span` is a whole array of tables, the span of its first element that fails alone.
///
/// serde reports some errors inside an element (a missing key in an internally tagged
/// `[[pipeline.stage]]`) with no span of their own, and the TOML deserializer then gives them
/// the array's span: the first `[[pipeline.stage]]` of the file, whichever stage lacks the key.
fn failing_element(ctx: &Ctx<'_>, span: &Range<usize>) -> Option<Range<usize>> {
    let (keys, fits) = ARRAYS_OF_TABLES
        .iter()
        .find(|(keys, _)| ctx.spans.exact(&key_path(keys)).as_ref() == Some(span))?;
    let doc: toml::Table = toml::from_str(ctx.source.text()).ok()?;
    let mut value = doc.get(keys[0])?;
    for key in &keys[1..] {
        value = value.get(key)?;
    }
    let index = value.as_array()?.iter().position(|v| !fits(v.clone()))?;
    ctx.spans.exact(&key_path(keys).at(index))
}

fn key_path(keys: &[&str]) -> KeyPath {
    KeyPath(keys.iter().map(|&k| Seg::from(k)).collect())
}

/// The offset of the first bracket that nests deeper than [`MAX_NESTING`], outside strings
/// and comments. Table headers (`[a]`, `[[a]]`) open and close on one line, so they never count.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'#' => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            quote @ (b'"' | b'\'') => {
                let triple = bytes[i..].starts_with(&[quote; 3]);
                let close: &[u8] = if triple { &[quote; 3] } else { &[quote] };
                i += close.len();
                while i < bytes.len() && !bytes[i..].starts_with(close) {
                    if !triple && bytes[i] == b'\n' {
                        break;
                    }
                    // A basic string's backslash escapes the next byte, quotes included.
                    i += if quote == b'"' && bytes[i] == b'\\' {
                        2
                    } else {
                        1
                    };
                }
                // Leave `i` on the last byte of the closing quote; the loop steps past it.
                i += close.len() - 1;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Some(i);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nesting_is_measured_outside_strings() {
        let deep = format!("a = {}{}", "[".repeat(65), "]".repeat(65));
        assert_eq!(too_deep(&deep), Some(4 + 64));
        let quoted = format!("a = \"{}\"", "[".repeat(100));
        assert_eq!(too_deep(&quoted), None);
        let commented = format!("# {}\na = 1", "{".repeat(100));
        assert_eq!(too_deep(&commented), None);
        assert_eq!(too_deep("a = '''\n[[[\n'''"), None);
    }
}
