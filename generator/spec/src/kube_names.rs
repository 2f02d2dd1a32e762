//! The names Kubernetes imposes, as `k8s.io/apimachinery/pkg/util/validation` checks them: one
//! home for the spec's rules, the offline check of rendered objects (`hetgen-kube`) and the
//! pods' own reading of their environment (`hetgen-env`).
//!
//! Each function says why a string is not such a name, or `None` when it is one.

/// At most 63 characters, the longest DNS label.
pub const MAX_LABEL: usize = 63;
/// At most 253 characters, the longest DNS name.
pub const MAX_SUBDOMAIN: usize = 253;

fn lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// Whether `s` is lower-case letters, digits and `-`, starting and ending with a letter or digit
/// (a DNS-1123 label of any length: a subdomain's parts are not limited to 63 each).
fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && lower_alnum(b[0])
        && lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| lower_alnum(c) || c == b'-')
}

/// Why `s` is not a DNS-1123 label (`IsDNS1123Label`: at most 63 lower-case letters, digits and
/// `-`, starting and ending with a letter or digit), as namespaces and Services are named.
pub fn dns1123_label(s: &str) -> Option<String> {
    let b = s.as_bytes();
    if b.len() > MAX_LABEL {
        Some(format!("is {} characters long, more than 63", b.len()))
    } else if !label_chars(s) {
        Some("must consist of lowercase letters, digits and `-`, and start and end with a letter or digit".into())
    } else {
        None
    }
}

/// Why `s` is not a DNS-1035 label (`IsDNS1035Label`: a DNS-1123 label that starts with a
/// letter), as a TrainJob's and a replicatedJob's names must be.
pub fn dns1035_label(s: &str) -> Option<String> {
    dns1123_label(s).or_else(|| {
        (!s.as_bytes()[0].is_ascii_lowercase()).then(|| "must start with a letter".to_owned())
    })
}

/// Why `s` is not a DNS-1123 subdomain (`IsDNS1123Subdomain`: at most 253 characters,
/// dot-separated DNS-1123 labels), as most objects are named.
pub fn dns1123_subdomain(s: &str) -> Option<String> {
    if s.len() > MAX_SUBDOMAIN {
        Some(format!("is {} characters long, more than 253", s.len()))
    } else if !s.split('.').all(label_chars) {
        Some("must consist of lowercase letters, digits, `-` and `.`, and start and end with a letter or digit".into())
    } else {
        None
    }
}

/// Whether `s` is at most 63 characters of letters, digits, `-`, `_` and `.`, starting and
/// ending with a letter or digit: a qualified name's name part, or a label value.
fn name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Why `key` is not a qualified name (`IsQualifiedName`: `[prefix/]name`, the prefix a DNS-1123
/// subdomain), the syntax of label and annotation keys.
pub fn qualified_name(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Some("has an empty prefix before `/`".into());
        }
        if let Some(why) = dns1123_subdomain(p) {
            return Some(format!("has a prefix `{p}` that {why}"));
        }
    }
    if name.is_empty() {
        Some("has an empty name".into())
    } else if name.len() > MAX_LABEL {
        Some(format!(
            "has a name part {} characters long, more than 63",
            name.len()
        ))
    } else if !name_part(name) {
        Some("must have a name part of letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit".into())
    } else {
        None
    }
}

/// Why `value` is not a label value (`IsValidLabelValue`: empty, or a qualified name's name
/// part).
pub fn label_value(value: &str) -> Option<String> {
    if value.len() > MAX_LABEL {
        Some(format!("is {} characters long, more than 63", value.len()))
    } else if !value.is_empty() && !name_part(value) {
        Some("must be empty or letters, digits, `-`, `_` and `.`, starting and ending with a letter or digit".into())
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_names() {
        assert_eq!(dns1123_label("pytorch-digits"), None);
        assert!(dns1123_label("Pytorch").is_some());
        assert!(dns1123_label("digits-").is_some());
        assert!(dns1123_label("").is_some());
        assert!(dns1123_label(&"a".repeat(64)).is_some());
        assert_eq!(dns1123_label("1digits"), None);
        assert!(dns1035_label("1digits").is_some());
        assert!(dns1035_label("").is_some());
        assert_eq!(dns1123_subdomain("a.b-c.d"), None);
        assert!(dns1123_subdomain("a..b").is_some());
        assert!(dns1123_subdomain("-a").is_some());
        // Only the whole name is limited, not each part.
        assert_eq!(dns1123_subdomain(&"a".repeat(100)), None);
    }

    #[test]
    fn qualified_names_and_label_values() {
        assert_eq!(
            qualified_name("trainer.kubeflow.org/trainjob-ancestor-step"),
            None
        );
        assert_eq!(qualified_name("app"), None);
        assert!(qualified_name("Bad_Prefix/x").is_some());
        assert!(qualified_name("a/b/c").is_some());
        assert!(qualified_name("x/").is_some());
        assert!(qualified_name("/x").is_some());
        assert!(qualified_name("-x").is_some());
        assert_eq!(label_value(""), None);
        assert_eq!(label_value("data_group"), None);
        assert!(label_value("two words").is_some());
        assert!(label_value(&"a".repeat(64)).is_some());
    }
}
