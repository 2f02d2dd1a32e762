//! JSON values as block-style YAML, the way `kubectl get -o yaml` writes objects: keys sorted,
//! lists of maps as `- key: value` items at their key's indent, and every string that a YAML 1.1
//! reader (kubectl's go-yaml) would take for something else quoted (`"on"`, `"yes"`, `"3"`).
//! serde-saphyr writes it (the kubeconfig reader of kube-rs, so no crate more); the output is
//! deterministic, so rendered files diff cleanly and snapshot well.

use serde_json::Value;

/// `value` as one YAML document, ending in a newline.
pub fn to_yaml(value: &Value) -> String {
    // A JSON value has only string keys and finite numbers: every one has a YAML form.
    let mut text = serde_saphyr::to_string(value).expect("a JSON value is always YAML");
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
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
                "list": [{"b": 1, "a": "x"}, "plain"],
                "empty": {},
                "none": [],
            },
        });
        assert_eq!(
            to_yaml(&value),
            "kind: TrainJob\nspec:\n  empty: {}\n  list:\n  - a: x\n    b: 1\n  - plain\n  none: []\n"
        );
    }

    /// What is written is what `kubectl` reads back (YAML 1.1 scalars, as the offline check
    /// reads them): every string stays a string, however much it looks like something else.
    #[test]
    fn kubectl_reads_back_what_is_written() {
        let strings = [
            "3",
            "-1",
            "1e3",
            "0x1F",
            "0o17",
            "1_000",
            ".5",
            ".inf",
            ".NaN",
            "true",
            "No",
            "on",
            "OFF",
            "yes",
            "y",
            "n",
            "~",
            "null",
            "Null",
            "",
            " lead",
            "trail ",
            "a: b",
            "a:",
            "-x",
            "- x",
            "[{\"a\":1}]",
            "{a}",
            "it's",
            "\"q\"",
            "two\nlines",
            "tab\there",
            "#c",
            "a #c",
            "*a",
            "&a",
            "!t",
            "%d",
            "@a",
            "`b",
            "|",
            ">",
            "?",
            "?x",
            ",",
            "2026-12-07",
            "12:30",
            "metadata.labels['x']",
            "registry.example.com/x:1",
            "/usr/local/bin/launcher",
            "ünïcode",
            "\u{7}bell",
        ];
        let value = json!({
            "values": strings.to_vec(),
            "keys": strings.iter().map(|s| (s.to_string(), json!(s))).collect::<serde_json::Map<_, _>>(),
            "numbers": [0, -3, 1.5, 1e300, i64::MAX],
            "nested": [[["deep"]], [{"a": [1]}]],
        });
        let text = to_yaml(&value);
        let back = crate::validate::documents(&text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
        assert_eq!(back, [value], "{text}");
    }
}
