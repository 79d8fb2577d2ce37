#!/usr/bin/env bash
# English about Python and the shell for pretraining's text share, from a Debian machine with apt's
# network (the chip's host has none; the v5e speedrun carries the result in its seed tarball):
# the Python documentation's reST sources (python3.11-doc), git's manual (git-doc) and the
# machine's English man pages as plain text. The eval split's packages' pages are left out, as
# `train data local --exclude` leaves out their code; gcloud's generated pages too.
#
#   bash train/english.sh OUT        # then: train data local --kind text --src OUT ...
#
# Trade-off: man pages describe the tools the agent runs (git, grep, find, pytest's cousins) but
# are terse reference prose; they are what an offline machine has. data local drops their
# duplicates and licences.
set -euo pipefail
out=${1:?usage: bash train/english.sh OUT}
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
cd "$(dirname "$0")/.."  # the repository root, for tasks/ below
# the eval split's packages (tasks/real_projects.py): their library pages, e.g. json.rst.txt, stay out
eval_pages=$(python3 -c 'from tasks.real_projects import EVAL_PACKAGES; print("^(" + "|".join(sorted(EVAL_PACKAGES)) + ")[.]")')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out/pydoc" "$out/gitdoc" "$out/man"
(cd "$work" && apt-get download python3.11-doc git-doc >/dev/null)
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
cp -r "$work"/x/usr/share/doc/python3.11/html/_sources/. "$out/pydoc/"
find "$out/pydoc" -type f ! -name '*.txt' -delete
find "$out/pydoc/library" -type f | while read -r f; do
    if basename "$f" | grep -Eq "$eval_pages"; then rm -f "$f"; fi
done
cp "$work"/x/usr/share/doc/git-doc/*.txt "$out/gitdoc/"
for f in /usr/share/man/man[1-8]/*; do
    name=$(basename "$f")
    case "$name" in gcloud*) continue ;; esac
    section=$(basename "$(dirname "$f")")
    mkdir -p "$out/man/$section"
    # rendered at 100 columns, man's 7-space body indent taken off
    MANWIDTH=100 man -l "$f" 2>/dev/null | col -bx | sed 's/^       //' > "$out/man/$section/${name%.gz}.txt" || true
done
find "$out" -type f -empty -delete
echo "english: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1) in $out"
