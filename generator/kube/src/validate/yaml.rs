//! A YAML stream read into JSON values that remember where each of their parts was written.
//!
//! The API server sees JSON: `kubectl` turns YAML into JSON before sending it, with the YAML 1.1
//! rules of go-yaml (`yes`, `on` and `off` are booleans there, unlike YAML 1.2). The checks run on
//! that JSON, and look a problem's position up afterwards by field path, as cargo looks a
//! semantic error's span up by key path: the values stay plain `serde_json::Value`s.

use std::borrow::Cow;
use std::collections::HashMap;

use saphyr::{MarkedYaml, Scalar, ScalarStyle, YamlData, YamlLoader};
use saphyr_parser::{Parser, Tag};
use serde_json::{Map, Number, Value};

/// Deeper nesting than this is refused: no Kubernetes object comes near it, and walking an
/// unbounded depth would let a hostile file exhaust the stack.
const MAX_DEPTH: usize = 200;

/// The most nodes anchors may expand to, against "billion laughs" documents.
const ALIAS_LIMIT: usize = 100_000;

/// A 1-based line and column (in characters), as editors count them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn of(marker: &saphyr::Marker) -> Pos {
        Pos {
            line: marker.line(),
            column: marker.col() + 1,
        }
    }
}

/// Where a field was written: its key (for members of a mapping) and its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place {
    pub key: Option<Pos>,
    pub value: Pos,
}

/// One YAML document as JSON, with the place of every node by field path (`""` is the root).
#[derive(Debug)]
pub(crate) struct Document {
    pub value: Value,
    pub places: HashMap<String, Place>,
}

impl Document {
    /// Where to point for a problem at `path`: the value, or the key when `key` is set and the
    /// node has one. A path that names nothing written (a missing field) falls back to its
    /// nearest written ancestor.
    pub fn pos(&self, path: &str, key: bool) -> Pos {
        let mut path = path;
        loop {
            if let Some(place) = self.places.get(path) {
                return match (key, place.key) {
                    (true, Some(k)) => k,
                    _ => place.value,
                };
            }
            match parent(path) {
                Some(p) => path = p,
                None => return Pos { line: 1, column: 1 },
            }
        }
    }
}

/// A YAML syntax error, or a value JSON cannot carry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyntaxError {
    pub pos: Pos,
    pub message: String,
}

/// The path of member `key` of the object at `path`: `a.b` for plain names, `a[x.y/z]` for keys
/// that are not identifiers (label keys), as Kubernetes' field paths write them.
pub(crate) fn child(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (_, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key}]"),
    }
}

/// The path of item `index` of the array at `path`.
pub(crate) fn item(path: &str, index: usize) -> String {
    format!("{path}[{index}]")
}

/// The path of the node holding `path`, or `None` for the root.
fn parent(path: &str) -> Option<&str> {
    if path.is_empty() {
        return None;
    }
    // The last segment starts at the last `.` or `[` outside brackets; label keys in brackets
    // may hold dots themselves.
    let mut depth = 0usize;
    let mut cut = 0;
    for (i, c) in path.char_indices() {
        match c {
            '[' => {
                if depth == 0 {
                    cut = i;
                }
                depth += 1;
            }
            ']' => depth = depth.saturating_sub(1),
            '.' if depth == 0 => cut = i,
            _ => {}
        }
    }
    Some(&path[..cut])
}

/// Reads every document of `text`. Empty documents (a stray `---`) are skipped, as kubectl
/// skips them. With `places` false no positions are kept (for the embedded CRDs, which are
/// never reported against).
pub(crate) fn parse(text: &str, places: bool) -> Result<Vec<Document>, SyntaxError> {
    let mut loader: YamlLoader<MarkedYaml> = YamlLoader::default();
    // Scalars are resolved here, not by the loader, so that their style is known: a quoted
    // `"yes"` is a string, a plain `yes` a YAML 1.1 boolean.
    loader.early_parse(false);
    loader.alias_limit(ALIAS_LIMIT);
    let mut parser = Parser::new_from_str(text);
    let scanned = parser.load(&mut loader, true);
    let error = scanned.err().or_else(|| loader.error().cloned());
    if let Some(e) = error {
        return Err(SyntaxError {
            pos: Pos::of(e.marker()),
            message: format!("invalid YAML: {}", e.info()),
        });
    }
    let mut documents = Vec::new();
    for node in loader.into_documents() {
        if matches!(node.data, YamlData::Value(Scalar::Null))
            || matches!(&node.data, YamlData::Representation(s, ScalarStyle::Plain, None) if s.is_empty())
        {
            continue;
        }
        let mut reader = Reader {
            places: places.then(HashMap::new),
        };
        let value = reader.node(&node, String::new(), None, 0)?;
        documents.push(Document {
            value,
            places: reader.places.unwrap_or_default(),
        });
    }
    Ok(documents)
}

struct Reader {
    places: Option<HashMap<String, Place>>,
}

impl Reader {
    fn node(
        &mut self,
        node: &MarkedYaml,
        path: String,
        key: Option<Pos>,
        depth: usize,
    ) -> Result<Value, SyntaxError> {
        let pos = Pos::of(&node.span.start);
        if depth > MAX_DEPTH {
            return Err(SyntaxError {
                pos,
                message: format!("YAML nested deeper than {MAX_DEPTH} levels"),
            });
        }
        let value = match &node.data {
            YamlData::Representation(text, style, tag) => {
                scalar(text, *style, tag.as_deref(), pos)?
            }
            YamlData::Value(s) => scalar_value(s, pos)?,
            YamlData::Sequence(items) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    out.push(self.node(it, item(&path, i), None, depth + 1)?);
                }
                Value::Array(out)
            }
            YamlData::Mapping(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    let name = key_text(k)?;
                    let at = Pos::of(&k.span.start);
                    if out.contains_key(&name) {
                        // `1` and `"1"` are different YAML keys but the same JSON member.
                        return Err(SyntaxError {
                            pos: at,
                            message: format!("duplicate key `{name}`"),
                        });
                    }
                    let child_path = child(&path, &name);
                    let value = self.node(v, child_path, Some(at), depth + 1)?;
                    out.insert(name, value);
                }
                Value::Object(out)
            }
            YamlData::Tagged(_, inner) => return self.node(inner, path, key, depth),
            YamlData::Alias(_) | YamlData::BadValue => {
                return Err(SyntaxError {
                    pos,
                    message: "YAML node that cannot be read (an unresolved alias?)".into(),
                });
            }
        };
        if let Some(places) = &mut self.places {
            places.insert(path, Place { key, value: pos });
        }
        Ok(value)
    }
}

/// A mapping key as a JSON member name: its text as written. Kubernetes' field names are
/// plain strings, and reading a key `y` or `on` as the YAML 1.1 boolean `true` would only turn
/// a typo into a confusing message.
fn key_text(key: &MarkedYaml) -> Result<String, SyntaxError> {
    match &key.data {
        YamlData::Representation(text, _, _) => Ok(text.to_string()),
        YamlData::Value(s) => Ok(match scalar_value(s, Pos::of(&key.span.start))? {
            Value::String(s) => s,
            other => other.to_string(),
        }),
        YamlData::Tagged(_, inner) => key_text(inner),
        _ => Err(SyntaxError {
            pos: Pos::of(&key.span.start),
            message: "a mapping key must be a scalar".into(),
        }),
    }
}

/// Resolves a scalar as go-yaml (YAML 1.1) does for the plain ones; quoted and block scalars
/// are strings.
fn scalar(
    text: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
    pos: Pos,
) -> Result<Value, SyntaxError> {
    if let Some(tag) = tag {
        // `!!str 3` is a string; other tags take the core schema's reading of the text.
        if tag.is_yaml_core_schema() && tag.suffix == "str" {
            return Ok(Value::String(text.to_string()));
        }
        let s = Scalar::parse_from_cow_and_metadata(
            Cow::Borrowed(text),
            style,
            Some(&Cow::Borrowed(tag)),
        );
        return match s {
            Some(s) => scalar_value(&s, pos),
            None => Err(SyntaxError {
                pos,
                message: format!("`{text}` is not a valid `{}{}`", tag.handle, tag.suffix),
            }),
        };
    }
    if style != ScalarStyle::Plain {
        return Ok(Value::String(text.to_string()));
    }
    match text {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => return Ok(Value::Bool(true)),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => return Ok(Value::Bool(false)),
        _ => {}
    }
    scalar_value(&Scalar::parse_from_cow(Cow::Borrowed(text)), pos)
}

fn scalar_value(s: &Scalar, pos: Pos) -> Result<Value, SyntaxError> {
    Ok(match s {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Number((*i).into()),
        Scalar::FloatingPoint(f) => match Number::from_f64(f.into_inner()) {
            Some(n) => Value::Number(n),
            None => {
                return Err(SyntaxError {
                    pos,
                    message: format!(
                        "`{}` cannot be sent as JSON, which has no NaN or infinity",
                        f.into_inner()
                    ),
                });
            }
        },
        Scalar::String(s) => Value::String(s.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_one_based_and_point_at_keys_and_values() {
        let docs = parse("a:\n  b:\n  - x: 1\n    y: 'yes'\n---\nz: on\n", true).unwrap();
        assert_eq!(docs.len(), 2);
        let d = &docs[0];
        assert_eq!(d.pos("a.b[0].y", true), Pos { line: 4, column: 5 });
        assert_eq!(d.pos("a.b[0].y", false), Pos { line: 4, column: 8 });
        assert_eq!(d.value["a"]["b"][0]["y"], Value::String("yes".into()));
        assert_eq!(d.value["a"]["b"][0]["x"], Value::from(1));
        // a missing field points at its nearest ancestor
        assert_eq!(d.pos("a.b[0].nope", true), Pos { line: 3, column: 5 });
        assert_eq!(docs[1].value["z"], Value::Bool(true));
    }

    #[test]
    fn label_keys_with_dots_have_bracketed_paths() {
        let docs = parse("labels:\n  a.b/c: d\n", true).unwrap();
        assert_eq!(child("labels", "a.b/c"), "labels[a.b/c]");
        assert_eq!(
            docs[0].pos("labels[a.b/c]", true),
            Pos { line: 2, column: 3 }
        );
        assert_eq!(parent("labels[a.b/c]"), Some("labels"));
        assert_eq!(parent("x.y[0].z"), Some("x.y[0]"));
    }

    #[test]
    fn syntax_errors_and_duplicates_have_positions() {
        let e = parse("a: 1\na: 2\n", true).unwrap_err();
        assert_eq!(e.pos.line, 2, "{e:?}");
        let e = parse("a: [1, 2\nb: 3\n", true).unwrap_err();
        assert!(e.message.starts_with("invalid YAML"), "{e:?}");
        assert!(parse("---\n---\n", true).unwrap().is_empty());
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(5000) + &"]".repeat(5000);
        assert!(parse(&deep, true).is_err());
    }
}
