//! `format = "python"`: the user's own map-style dataset, named as `file.py:function` in the
//! script's code folder (its `source_dir`). No Python runs here: when the spec is a file, the
//! file is read and the function looked for among the names its top level binds.

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

use crate::ctx::Ctx;
use crate::model::PythonRef;
use crate::path;
use crate::raw::{RawPipeline, RawSpec};
use crate::rules::trainer::{path_problem, source_dir};
use crate::spans::KeyPath;
use crate::suggest::did_you_mean;

/// The two functions a Python source names.
#[derive(Debug, Clone, Copy)]
enum Function {
    Dataset,
    Collate,
}

impl Function {
    fn key(self) -> &'static str {
        match self {
            Function::Dataset => "dataset",
            Function::Collate => "collate",
        }
    }

    /// A reference as the help texts show one.
    fn example(self) -> &'static str {
        match self {
            Function::Dataset => "data.py:make_train_set",
            Function::Collate => "data.py:collate",
        }
    }

    /// The parameters the runtime calls it with.
    fn parameters(self) -> &'static str {
        match self {
            Function::Dataset => "(path, hyperparameters)",
            Function::Collate => "(samples)",
        }
    }
}

/// The dataset and collate functions, each `file.py:function` and, when the spec is a file,
/// defined where it says; `None` when either is not of that form.
pub(super) fn functions(
    ctx: &mut Ctx<'_>,
    raw: &RawSpec,
    dataset: &str,
    collate: Option<&str>,
) -> Option<(PythonRef, Option<PythonRef>)> {
    script_trainer(ctx, raw);
    let folder = code_folder(ctx, raw);
    let mut check = |f: Function, value: &str| {
        let at = path!["pipeline", "source", f.key()];
        let r = python_ref(ctx, &at, value, f)?;
        if let Some((base, source_dir)) = &folder {
            defined(ctx, &at, base, source_dir, &r, f);
        }
        Some(r)
    };
    let dataset = check(Function::Dataset, dataset);
    let collate = collate.map(|c| check(Function::Collate, c));
    Some((
        dataset?,
        match collate {
            Some(c) => Some(c?),
            None => None,
        },
    ))
}

/// The dataset does its own preprocessing: hetgen's stages have nothing to work on. Reported
/// at the first stage; `Some` (no stages) when there are none.
pub(super) fn no_stages(ctx: &mut Ctx<'_>, p: &RawPipeline) -> Option<()> {
    if p.stage.is_empty() {
        return Some(());
    }
    ctx.error(
        "hetgen::spec::python-stages",
        &path!["pipeline", "stage", 0],
        "`[[pipeline.stage]]` with a Python dataset",
        "hetgen's stages do not run on a Python dataset's samples",
        "your dataset does its own preprocessing: remove the `[[pipeline.stage]]` tables, or use \
         `format = \"image-folder\"` for hetgen's built-in stages",
    );
    None
}

/// The built-in trainer takes only the image and label batches hetgen's stages make; a Python
/// dataset's batches are whatever it returns, for the user's own script to read.
fn script_trainer(ctx: &mut Ctx<'_>, raw: &RawSpec) {
    let t = &raw.trainer;
    // Without either key, or with both, the trainer's own rules say what to do.
    if t.model.is_some() && t.script.is_none() {
        ctx.error(
            "hetgen::spec::python-trainer",
            &path!["pipeline", "source", "format"],
            "a Python dataset needs your own training script",
            "the built-in trainer cannot read it",
            "the built-in trainer (`model = …`) takes only image and label batches from hetgen's \
             stages: use `script = \"train.py\"` in `[trainer]` and read the batches with \
             `hetgen.Loader`, or use `format = \"image-folder\"`",
        );
    }
}

/// Where the functions' files are looked for: the script's `source_dir` and its name as the
/// spec gives it, when the spec is a file and that folder is there (the trainer's rules report
/// it when it is not).
fn code_folder(ctx: &Ctx<'_>, raw: &RawSpec) -> Option<(PathBuf, String)> {
    raw.trainer.script.as_ref()?;
    let dir = ctx.dir?;
    let source_dir = source_dir(&raw.trainer);
    if path_problem(source_dir, true).is_some() {
        return None;
    }
    let base = dir.join(source_dir);
    base.is_dir().then(|| (base, source_dir.to_owned()))
}

/// `file.py:function`: a relative `.py` path, a colon, a Python name.
fn python_ref(ctx: &mut Ctx<'_>, at: &KeyPath, value: &str, f: Function) -> Option<PythonRef> {
    let problem = match value.rsplit_once(':') {
        None => "no `:` before the function's name".to_owned(),
        Some(("", _)) => "no file before `:`".to_owned(),
        Some((_, "")) => "no function after `:`".to_owned(),
        Some((file, name)) => match path_problem(file, false) {
            Some(problem) => format!("`{file}` is {problem}"),
            None if !is_py_file(file) => format!("`{file}` is not a `.py` file"),
            None if KEYWORDS.contains(&name) => format!("`{name}` is a Python keyword"),
            None if !is_identifier(name) => format!("`{name}` is not a Python name"),
            None => {
                return Some(PythonRef {
                    file: file.to_owned(),
                    name: name.to_owned(),
                });
            }
        },
    };
    ctx.error(
        "hetgen::spec::python-ref",
        at,
        format!("`{value}` is not `file.py:function`"),
        problem,
        format!(
            "give a `.py` file relative to `source_dir` (`/` between folders), a colon and a \
             function defined at the file's top level, e.g. `\"{}\"`",
            f.example()
        ),
    );
    None
}

fn is_py_file(file: &str) -> bool {
    file.rsplit('/')
        .next()
        .and_then(|name| name.strip_suffix(".py"))
        .is_some_and(|stem| !stem.is_empty())
}

/// A Python identifier: a letter or `_`, then letters, digits and `_` (Unicode ones included,
/// as Python allows).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
}

/// Python's keywords, which name nothing a file can define.
const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield",
];

/// The file `r` names must be in the code folder and bind `r.name` at its top level, where the
/// runtime's workers look it up once they have imported the file.
fn defined(
    ctx: &mut Ctx<'_>,
    at: &KeyPath,
    base: &Path,
    source_dir: &str,
    r: &PythonRef,
    f: Function,
) {
    let Ok(bytes) = std::fs::read(base.join(&r.file)) else {
        ctx.error(
            "hetgen::spec::not-found",
            at,
            format!("no file `{}` in `{source_dir}`", r.file),
            "not found",
            format!(
                "`{}` is relative to `source_dir` (the spec's folder unless set)",
                f.key()
            ),
        );
        return;
    };
    let text = String::from_utf8_lossy(&bytes);
    let top = TopLevel::of(&text);
    if top.star_import || top.names.contains(&r.name) {
        return;
    }
    let help = match did_you_mean(&r.name, top.names.iter().map(String::as_str)) {
        Some(s) => format!("did you mean `{s}`?"),
        None if nested(&text, &r.name) => format!(
            "`{}` is defined inside a block of `{}`: move it to the top level, where hetgen's \
             workers look it up",
            r.name, r.file
        ),
        None => format!(
            "define `def {}{}:` at the top level of `{}`",
            r.name,
            f.parameters(),
            r.file
        ),
    };
    ctx.error(
        "hetgen::spec::python-undefined",
        at,
        format!("`{}` defines no `{}`", r.file, r.name),
        "no such top-level name",
        help,
    );
}

/// A line that binds a name: `def`/`async def`/`class` statements and assignments (annotated
/// ones too; `==` is a comparison).
static DEFINITION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:(?:async\s+)?def\s+([^\W\d]\w*)\s*[(\[]|class\s+([^\W\d]\w*)\b|([^\W\d]\w*)\s*(?::[^=]*)?=(?:[^=]|$))",
    )
    .unwrap()
});
static FROM_IMPORT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^from\s+\S+\s+import\s+(.*)$").unwrap());
static IMPORT: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^import\s+(.*)$").unwrap());

/// The names a Python file's top level binds, read line by line as written: what
/// [`DEFINITION`] matches at the start of a line, and imports.
#[derive(Debug, Default)]
struct TopLevel {
    /// In the order the file binds them, each once.
    names: Vec<String>,
    /// `from … import *`: the file may bind any name.
    star_import: bool,
}

impl TopLevel {
    fn of(text: &str) -> TopLevel {
        let mut top = TopLevel::default();
        let mut lines = text.trim_start_matches('\u{feff}').lines();
        while let Some(line) = lines.next() {
            if let Some(caps) = DEFINITION.captures(line) {
                let name = caps.get(1).or(caps.get(2)).or(caps.get(3));
                top.bind(name.map_or("", |m| m.as_str()));
            } else if let Some(caps) = FROM_IMPORT.captures(line) {
                let mut list = uncommented(&caps[1]).to_owned();
                // `from m import (a,\n b,\n)`
                if list.trim_start().starts_with('(') {
                    while !list.contains(')') {
                        let Some(next) = lines.next() else { break };
                        list.push(',');
                        list.push_str(uncommented(next));
                    }
                }
                for item in list.split(',') {
                    let item = item.trim_matches(|c: char| c.is_whitespace() || "()\\".contains(c));
                    match item.split_whitespace().collect::<Vec<_>>()[..] {
                        ["*"] => top.star_import = true,
                        [name] | [_, "as", name] => top.bind(name),
                        _ => {}
                    }
                }
            } else if let Some(caps) = IMPORT.captures(line) {
                for item in uncommented(&caps[1]).split(',') {
                    match item.split_whitespace().collect::<Vec<_>>()[..] {
                        // `import a.b` binds `a`.
                        [module] => top.bind(module.split('.').next().unwrap_or("")),
                        [_, "as", name] => top.bind(name),
                        _ => {}
                    }
                }
            }
        }
        top
    }

    fn bind(&mut self, name: &str) {
        if is_identifier(name) && !KEYWORDS.contains(&name) && !self.names.iter().any(|n| n == name)
        {
            self.names.push(name.to_owned());
        }
    }
}

/// An import line up to its comment.
fn uncommented(line: &str) -> &str {
    line.split('#').next().unwrap_or("")
}

/// Whether an indented line (inside a function, class or other block) binds `name`.
fn nested(text: &str, name: &str) -> bool {
    text.lines()
        .filter(|line| line.starts_with(char::is_whitespace))
        .filter_map(|line| DEFINITION.captures(line.trim_start()))
        .any(|caps| {
            caps.get(1)
                .or(caps.get(2))
                .or(caps.get(3))
                .is_some_and(|m| m.as_str() == name)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_level_names_are_found_without_running_python() {
        let text = "\u{feff}\"\"\"Data.\"\"\"\nimport os, numpy as np\nimport torch.utils.data\n\
                    from .impl import (\n    load,  # the loader\n    Folder as F,\n)\n\
                    from x import y as z\n\n@decorator\ndef make_train_set(path, hp):\n    \
                    inner = 1\n    def helper():\n        pass\n    return F(path)\n\n\
                    async def fetch [T](x):\n    pass\n\nclass Digits(torch.utils.data.Dataset):\n    \
                    pass\n\nSIZE: int = 8\nmean = std = 0.5\nif SIZE == 8:\n    nested = 1\n\
                    else: other = 2\n";
        let top = TopLevel::of(text);
        assert_eq!(
            top.names,
            [
                "os",
                "np",
                "torch",
                "load",
                "F",
                "z",
                "make_train_set",
                "fetch",
                "Digits",
                "SIZE",
                "mean"
            ]
        );
        assert!(!top.star_import);
        assert!(nested(text, "helper") && nested(text, "inner"));
        assert!(!nested(text, "make_train_set"));
        assert!(TopLevel::of("from .impl import *\n").star_import);
    }

    #[test]
    fn references_are_a_relative_py_file_and_a_name() {
        assert!(is_py_file("data.py") && is_py_file("src/my-data.py"));
        assert!(!is_py_file("data") && !is_py_file(".py") && !is_py_file("src/.py"));
        assert!(
            is_identifier("make_train_set") && is_identifier("_x1") && is_identifier("données")
        );
        assert!(!is_identifier("1x") && !is_identifier("make-set") && !is_identifier("a.b"));
    }
}
