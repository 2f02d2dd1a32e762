//! Rendered Kubernetes objects checked offline, as the API server would check them on create.
//!
//! [`check`] reads YAML files (several documents each), and for every object:
//!
//! 1. finds the CRD of its `apiVersion` and `kind` among the vendored ones (`crds/`: Kubeflow
//!    Trainer's TrainJob, TrainingRuntime, ClusterTrainingRuntime, and JobSet);
//! 2. checks it against the version's structural schema with strict field validation: types,
//!    enums, patterns, bounds, required fields, and unknown fields, with a "did you mean" hint
//!    (`schema`); the top-level `metadata` as the server's ObjectMeta validation (`meta`);
//! 3. evaluates the schema's CEL rules, `x-kubernetes-validations`, on the nodes they are attached
//!    to (`cel`), skipping transition rules as a create does ([`refused_update`] runs those
//!    against a live object, as an update does: `transition`);
//! 4. applies hetgen's own rules across the objects of all files, for what the controllers would
//!    refuse that no schema says (`rules`).
//!
//! Every problem is a [`Problem`] at a file, line and column, found by field path in the
//! positions the YAML reader keeps (`yaml`).

mod cel;
mod crds;
mod meta;
mod rules;
mod schema;
mod transition;
mod yaml;

use std::path::PathBuf;

use hetgen_spec::{Problem, SpecSource};

pub use transition::{Refused, refused_update};

/// A diagnostic code: `code!("unknown-field")` is `hetgen::kube::unknown-field`.
macro_rules! code {
    ($name:literal) => {
        concat!("hetgen::kube::", $name)
    };
}
pub(crate) use code;

/// The objects of a YAML stream as JSON values, read as `kubectl` reads them (YAML 1.1
/// scalars); the error says what is wrong and where.
pub fn documents(text: &str) -> Result<Vec<serde_json::Value>, String> {
    yaml::parse(text, false)
        .map(|docs| docs.into_iter().map(|d| d.value).collect())
        .map_err(|e| {
            format!(
                "line {}, column {}: {}",
                e.pos.line, e.pos.column, e.message
            )
        })
}

/// Checks the Kubernetes objects in `files`, each a display name and its YAML text, and
/// returns every problem found, in file order, then by position. No problems means the API
/// server would accept every object on create, as far as the vendored CRDs and hetgen's rules
/// tell.
pub fn check(files: &[(PathBuf, String)]) -> Vec<Problem> {
    checked(files).0
}

/// [`check`], and the objects of every file, read once: each file's documents as JSON values
/// when nothing is wrong, every problem otherwise.
pub fn read(files: &[(PathBuf, String)]) -> Result<Vec<Vec<serde_json::Value>>, Vec<Problem>> {
    let (problems, documents) = checked(files);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut per_file = vec![Vec::new(); files.len()];
    for (f, doc) in documents {
        per_file[f].push(doc.value);
    }
    Ok(per_file)
}

/// The problems of `files`, sorted, and the documents they were found in, by file index.
fn checked(files: &[(PathBuf, String)]) -> (Vec<Problem>, Vec<(usize, yaml::Document)>) {
    let crds = crds::crds();
    let sources: Vec<SpecSource> = files
        .iter()
        .map(|(name, text)| SpecSource::new(name.display().to_string(), text.as_str()))
        .collect();
    let mut out = Vec::new();
    let mut documents = Vec::new();
    for (f, (_, text)) in files.iter().enumerate() {
        match yaml::parse(text, true) {
            Ok(docs) => documents.extend(docs.into_iter().map(|d| (f, d))),
            Err(e) => out.push((
                f,
                Problem::at_position(
                    &sources[f],
                    code!("yaml"),
                    (e.pos.line, e.pos.column),
                    String::new(),
                    e.message,
                    Some("fix the YAML syntax; nothing else in this file was checked".into()),
                ),
            )),
        }
    }

    let mut objects = Vec::new();
    for (f, doc) in &documents {
        let mut found = Vec::new();
        if let Some(object) = object(*f, doc, &mut found) {
            if let Some(kind) = crds.get(object.api_version, object.kind) {
                schema::check(kind, &doc.value, &crds.rules, &mut found);
            }
            objects.push(object);
        }
        out.extend(found.into_iter().map(|x| (*f, x.at(doc, &sources[*f]))));
    }
    for (i, finding) in rules::check(&objects) {
        let o = &objects[i];
        out.push((o.file, finding.at(o.doc, &sources[o.file])));
    }
    out.sort_by_key(|(f, p)| (*f, p.span.as_ref().map(|s| s.start)));
    (out.into_iter().map(|(_, d)| d).collect(), documents)
}

/// A document that is an object of a known kind, as the rules see it.
pub(crate) struct Object<'a> {
    file: usize,
    doc: &'a yaml::Document,
    api_version: &'a str,
    kind: &'a str,
}

impl Object<'_> {
    fn name(&self) -> Option<&str> {
        self.doc.value["metadata"]["name"].as_str()
    }

    fn namespace(&self) -> Option<&str> {
        self.doc.value["metadata"]["namespace"].as_str()
    }
}

/// The document as an object of a kind the vendored CRDs define, or why it is not one.
fn object<'a>(file: usize, doc: &'a yaml::Document, out: &mut Vec<Finding>) -> Option<Object<'a>> {
    let v = &doc.value;
    if !v.is_object() {
        out.push(Finding::value(
            "",
            code!("not-an-object"),
            "a document must be a mapping with `apiVersion` and `kind`".into(),
        ));
        return None;
    }
    let (api_version, kind) = match (v["apiVersion"].as_str(), v["kind"].as_str()) {
        (Some(a), Some(k)) => (a, k),
        (a, _) => {
            let missing = if a.is_none() { "apiVersion" } else { "kind" };
            out.push(
                Finding::key(
                    "",
                    code!("missing-field"),
                    format!("the object has no `{missing}`"),
                )
                .hint("every object starts with `apiVersion:` and `kind:`"),
            );
            return None;
        }
    };
    let crds = crds::crds();
    if crds.get(api_version, kind).is_some() {
        return Some(Object {
            file,
            doc,
            api_version,
            kind,
        });
    }
    let known = crds.known();
    let hint = match known.iter().find(|(_, k)| *k == kind) {
        Some((a, _)) => format!("`{kind}` is served as `apiVersion: {a}`"),
        None => {
            let kinds: Vec<&str> = known.iter().map(|(_, k)| *k).collect();
            match hetgen_spec::did_you_mean(kind, kinds.iter().copied()) {
                Some(s) => format!("did you mean `{s}`?"),
                None => format!(
                    "hetgen checks {}",
                    kinds
                        .iter()
                        .map(|k| format!("`{k}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        }
    };
    let at = if known.iter().any(|(_, k)| *k == kind) {
        "apiVersion"
    } else {
        "kind"
    };
    out.push(
        Finding::value(
            at,
            code!("unknown-kind"),
            format!("no CRD for `{kind}` in `{api_version}`"),
        )
        .hint(&hint),
    );
    None
}

/// A problem found at a field path of one document, before it is given a line and column.
#[derive(Debug, Clone)]
pub(crate) struct Finding {
    path: String,
    /// Point at the field's key rather than its value (unknown and missing fields).
    key: bool,
    code: &'static str,
    message: String,
    hint: Option<String>,
}

impl Finding {
    /// A problem with the field at `path` itself (reported at its key).
    pub(crate) fn key(path: &str, code: &'static str, message: String) -> Finding {
        Finding {
            path: path.into(),
            key: true,
            code,
            message,
            hint: None,
        }
    }

    /// A problem with the value at `path`.
    pub(crate) fn value(path: &str, code: &'static str, message: String) -> Finding {
        Finding {
            path: path.into(),
            key: false,
            code,
            message,
            hint: None,
        }
    }

    pub(crate) fn hint(mut self, hint: &str) -> Finding {
        self.hint = Some(hint.to_string());
        self
    }

    fn at(self, doc: &yaml::Document, source: &SpecSource) -> Problem {
        let pos = doc.pos(&self.path, self.key);
        Problem::at_position(
            source,
            self.code,
            (pos.line, pos.column),
            self.path,
            self.message,
            self.hint,
        )
    }
}
