//! `hetgen completions SHELL`: a script for every shell clap supports, and the bash one
//! completes commands and flags when bash sources it.

use std::process::Command;

use super::{code, hetgen, repo, stderr, succeeded};

#[test]
fn every_shell_gets_a_script_naming_the_commands() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let out = hetgen(&["completions", shell], &repo());
        assert_eq!(code(&out), 0, "{shell}: {}", stderr(&out));
        let script = String::from_utf8(out.stdout).unwrap();
        for command in ["validate", "render", "deploy", "completions"] {
            assert!(script.contains(command), "{shell} script lacks `{command}`");
        }
    }
    let out = hetgen(&["completions", "tcsh"], &repo());
    assert_eq!(code(&out), 2, "an unknown shell is a usage error");
}

/// What bash offers after `hetgen WORDS...` with the script sourced.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let script = hetgen(&["completions", "bash"], &repo()).stdout;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hetgen.bash");
    std::fs::write(&path, script).unwrap();
    let line = std::iter::once("hetgen")
        .chain(words.iter().copied())
        .collect::<Vec<_>>();
    let program = format!(
        "source {}; COMP_WORDS=({}); COMP_CWORD={}; COMP_LINE='{}'; COMP_POINT=${{#COMP_LINE}}; \
         _hetgen hetgen '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        path.display(),
        line.iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" "),
        line.len() - 1,
        line.join(" "),
        line[line.len() - 1],
        line[line.len() - 2],
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &program])
        .output()
        .unwrap();
    succeeded(&out).lines().map(str::to_owned).collect()
}

#[test]
fn bash_completes_commands_and_their_flags() {
    assert_eq!(bash_completes(&["de"]), ["deploy"]);
    let flags = bash_completes(&["deploy", "--"]);
    for flag in ["--local", "--dry-run", "--wait"] {
        assert!(flags.iter().any(|f| f == flag), "{flags:?}");
    }
    assert_eq!(bash_completes(&["completions", "fi"]), ["fish"]);
}
