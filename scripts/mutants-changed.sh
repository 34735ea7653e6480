#!/usr/bin/env bash
# Mutation-tests the Rust files a change touched, with cargo-mutants and the test selection
# in .cargo/mutants.toml. Not part of .ci/run: run it before sending a change to a module
# that decides (see "Mutation testing" in docs/guide/contributing.md).
#
#   scripts/mutants-changed.sh                 files changed since main (committed or not)
#   scripts/mutants-changed.sh BASE            files changed since BASE (a branch, tag or commit)
#   scripts/mutants-changed.sh --lines BASE    only the lines changed since BASE (--in-diff)
#   scripts/mutants-changed.sh --files F...    these files, whole
#   ... -- ARGS                                more cargo-mutants arguments (e.g. -- --list)
#
# Jobs default to 1 (CARGO_MUTANTS_JOBS overrides). Results land in mutants.out/ (-- -o DIR
# to put them elsewhere). CARGO_TARGET_DIR is ignored: each cargo-mutants job builds in the
# target directory of its own copy of the tree.
#
# Why a temporary config: cargo-mutants adds `--file` globs to the config's `examine_globs`
# instead of narrowing them (and v27 does not apply `--re` to its "delete field" mutants), so
# the only way to examine just some files is a copy of the config without `examine_globs`.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
# The recorded SDK transcripts beside the clone, as .ci/run reads them: without them the
# conformance tests check nothing and decoder mutants go unnoticed.
export AGENT_LOOP_TRANSCRIPTS="${AGENT_LOOP_TRANSCRIPTS:-$(cd .. && pwd)/shared/transcripts}"

mode=files-since
base=main
files=()
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lines) mode=lines; shift; [[ $# -gt 0 && "$1" != -- ]] && { base="$1"; shift; } ;;
    --files) mode=files; shift
             while [[ $# -gt 0 && "$1" != -- ]]; do files+=("$1"); shift; done ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) base="$1"; shift ;;
  esac
done

config="$(mktemp)"
trap 'rm -f "$config" "${diff:-}"' EXIT
# Everything but the examine_globs array.
awk '/^examine_globs *= *\[/ {skip=1} !skip {print} skip && /^\]/ {skip=0}' \
  .cargo/mutants.toml >"$config"

export CARGO_MUTANTS_JOBS="${CARGO_MUTANTS_JOBS:-1}"
# Each job builds its mutant in its own copy of the tree, and must use that copy's target
# directory. With one shared CARGO_TARGET_DIR, parallel jobs (and any build of the real tree
# meanwhile) overwrite each other's artifacts: cargo then reports a mutated crate "Fresh" and
# tests another job's binary, so mutants are marked caught or missed by the wrong build.
unset CARGO_TARGET_DIR
# Debug info is not needed to tell a failing test from a passing one, and it doubles link time.
export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-0}"
case "$mode" in
  lines)
    diff="$(mktemp)"
    git diff "$base" -- 'src/*.rs' >"$diff"
    if [[ ! -s "$diff" ]]; then echo "no Rust source changed since $base"; exit 0; fi
    # Every changed source file is examined, but only the mutants on changed lines run.
    mapfile -t files < <(git diff --name-only "$base" -- 'src/*.rs')
    ;;
  files-since)
    mapfile -t files < <(git diff --name-only "$base" -- 'src/*.rs')
    ;;
esac
# Deleted files cannot be mutated.
existing=()
for f in "${files[@]}"; do [[ -f "$f" ]] && existing+=("$f"); done
if [[ ${#existing[@]} -eq 0 ]]; then echo "no Rust source files to mutate"; exit 0; fi

args=(--config "$config")
for f in "${existing[@]}"; do args+=(--file "$f"); done
[[ "$mode" == lines ]] && args+=(--in-diff "$diff")
echo "cargo mutants ${args[*]} ${extra[*]:-}" >&2
cargo mutants "${args[@]}" "${extra[@]}"
