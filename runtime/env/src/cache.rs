//! hetgen's cache folder on the machine it runs on: what a later run can reuse, never what a
//! job needs (the prices `hetgen plan --prices aws` read, the launchers `deploy --local` builds,
//! the project's Python environments its scripts make).

use std::ffi::OsString;
use std::path::PathBuf;

/// hetgen's cache folder, by the XDG rule: `$XDG_CACHE_HOME/hetgen` when that is an absolute
/// path, else `~/.cache/hetgen` (the project's scripts follow the same rule). `None` when
/// neither variable says where the user's home is.
pub fn cache_dir() -> Option<PathBuf> {
    cache_dir_from(|var| std::env::var_os(var))
}

/// [`cache_dir`] with the environment read through `var`.
fn cache_dir_from(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    if let Some(dir) = var("XDG_CACHE_HOME").map(PathBuf::from)
        && dir.is_absolute()
    {
        return Some(dir.join("hetgen"));
    }
    let home = PathBuf::from(var("HOME").filter(|h| !h.is_empty())?);
    Some(home.join(".cache/hetgen"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        cache_dir_from(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn the_cache_follows_the_xdg_rule() {
        let home = ("HOME", "/home/u");
        assert_eq!(
            with(&[home, ("XDG_CACHE_HOME", "/var/cache/u")]),
            Some(PathBuf::from("/var/cache/u/hetgen"))
        );
        // A relative XDG_CACHE_HOME is to be ignored, as the specification says.
        for vars in [&[home][..], &[home, ("XDG_CACHE_HOME", "cache")]] {
            assert_eq!(with(vars), Some(PathBuf::from("/home/u/.cache/hetgen")));
        }
        assert_eq!(with(&[]), None);
        assert_eq!(with(&[("HOME", "")]), None);
    }
}
