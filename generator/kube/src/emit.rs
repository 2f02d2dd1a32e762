//! JSON values as block-style YAML, the way `kubectl get -o yaml` writes objects: keys sorted,
//! lists of maps as `- key: value` items, every string that YAML could read as something else
//! quoted. The output is deterministic, so rendered files diff cleanly and snapshot well.

use serde_json::Value;

/// `value` as one YAML document, ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Object(map) if !map.is_empty() => mapping(&mut out, map, 0),
        Value::Array(items) if !items.is_empty() => sequence(&mut out, items, 0),
        scalar => {
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
    out
}

fn mapping(out: &mut String, map: &serde_json::Map<String, Value>, indent: usize) {
    for (i, (key, value)) in map.iter().enumerate() {
        // The first key of a list item follows its `- ` on the same line.
        if i > 0 || indent == 0 || !out.ends_with("- ") {
            pad(out, indent);
        }
        out.push_str(&string(key));
        out.push(':');
        nested(out, value, indent);
    }
}

fn sequence(out: &mut String, items: &[Value], indent: usize) {
    for item in items {
        pad(out, indent);
        out.push_str("- ");
        match item {
            Value::Object(map) if !map.is_empty() => mapping(out, map, indent + 2),
            Value::Array(inner) if !inner.is_empty() => {
                out.pop();
                out.push('\n');
                sequence(out, inner, indent + 2);
            }
            scalar => {
                out.push_str(&inline(scalar));
                out.push('\n');
            }
        }
    }
}

/// What follows `key:`: a scalar on the same line, or a block below it. A list under a key
/// starts at the key's own indentation, as kubectl writes it.
fn nested(out: &mut String, value: &Value, indent: usize) {
    match value {
        Value::Object(map) if !map.is_empty() => {
            out.push('\n');
            mapping(out, map, indent + 2);
        }
        Value::Array(items) if !items.is_empty() => {
            out.push('\n');
            sequence(out, items, indent);
        }
        scalar => {
            out.push(' ');
            out.push_str(&inline(scalar));
            out.push('\n');
        }
    }
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

fn inline(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(_) => "[]".to_owned(),
        Value::Object(_) => "{}".to_owned(),
    }
}

/// A string plain when YAML reads it back as that same string, else quoted: single quotes
/// when that needs no escape, JSON's double quotes (valid YAML) otherwise.
fn string(s: &str) -> String {
    if is_plain(s) {
        s.to_owned()
    } else if !s.contains(['\'', '\n', '\\']) && !s.chars().any(char::is_control) {
        format!("'{s}'")
    } else {
        serde_json::to_string(s).expect("strings serialize")
    }
}

/// Whether `s` can be written unquoted: only characters that never start or end structure,
/// and not a word YAML 1.1 or 1.2 reads as a number, a boolean or null.
fn is_plain(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let safe = |c: char| c.is_ascii_alphanumeric() || "-_./=+@()".contains(c);
    if !(first.is_ascii_alphabetic() || first == '/' || first == '_') || !s.chars().all(safe) {
        // A colon is plain inside a word (`image:tag`), never before a blank or at the end.
        let colon_ok = s.chars().all(|c| safe(c) || c == ':') && !s.ends_with(':');
        if !(first.is_ascii_alphabetic() || first == '/' || first == '_') || !colon_ok {
            return false;
        }
    }
    let lower = s.to_ascii_lowercase();
    let special = [
        "true", "false", "yes", "no", "on", "off", "y", "n", "null", "nan", "inf",
    ];
    !special.contains(&lower.as_str()) && s.parse::<f64>().is_err()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_blocks_like_kubectl() {
        let value = json!({
            "kind": "TrainJob",
            "spec": {
                "list": [{"b": 1, "a": "x"}, "plain", ["nested"]],
                "empty": {},
                "none": [],
            },
        });
        assert_eq!(
            to_yaml(&value),
            "kind: TrainJob\nspec:\n  empty: {}\n  list:\n  - a: x\n    b: 1\n  - plain\n  -\n    - nested\n  none: []\n"
        );
    }

    #[test]
    fn quotes_what_yaml_would_read_as_something_else() {
        for (s, written) in [
            ("3", "'3'"),
            ("true", "'true'"),
            ("No", "'No'"),
            ("", "''"),
            ("a: b", "'a: b'"),
            ("a:", "'a:'"),
            ("registry.example.com/x:1", "registry.example.com/x:1"),
            ("-x", "'-x'"),
            ("[{\"a\":1}]", "'[{\"a\":1}]'"),
            ("it's", "\"it's\""),
            ("two\nlines", "\"two\\nlines\""),
            ("metadata.labels['x']", "\"metadata.labels['x']\""),
            ("registry.example.com/x", "registry.example.com/x"),
            ("/usr/local/bin/launcher", "/usr/local/bin/launcher"),
        ] {
            assert_eq!(string(s), written, "{s:?}");
        }
    }
}
