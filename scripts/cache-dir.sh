#!/usr/bin/env bash
# hetgen's cache folder, printed on stdout, by the rule the `hetgen` command follows
# (hetgen_env::cache_dir): $XDG_CACHE_HOME/hetgen when that is an absolute path, else
# ~/.cache/hetgen. The venvs and the cargo target folder the scripts and the Makefile make go
# there, so `hetgen deploy --local` finds the PyTorch venv where scripts/torch-env.sh made it.
case "${XDG_CACHE_HOME:-}" in
  /*) echo "$XDG_CACHE_HOME/hetgen" ;;
  *) echo "$HOME/.cache/hetgen" ;;
esac
