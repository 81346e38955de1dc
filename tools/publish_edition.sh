#!/usr/bin/env bash
# Publish the Jupyter edition to a branch of its own, which the book's Colab and Binder buttons
# open (book/_ext/jupyter_launch.py), as d2l publishes its Colab notebooks:
#
#   tools/publish_edition.sh EDITION_FOLDER REMOTE BRANCH
#
# The branch holds the repository as it is at HEAD (binder/, pyproject.toml and src/ give Binder
# its environment) with every notebook of the book replaced by its Jupyter edition from
# EDITION_FOLDER (`make book` writes _build/jupyter). One commit, force-pushed: the branch is
# made, never edited. .github/workflows/pages.yml runs it after `make book`.
set -euo pipefail
edition=$(cd "$1" && pwd)
remote=$2
branch=$3
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
git archive HEAD | tar -x -C "$tree"
(cd "$edition" && find . -name '*.ipynb' -print0) | while IFS= read -r -d '' notebook; do
  test -f "$tree/$notebook" || { echo "no source for $notebook" >&2; exit 1; }
  cp "$edition/$notebook" "$tree/$notebook"
done
source_commit=$(git rev-parse HEAD)
cd "$tree"
git init -q -b "$branch"
git add -A
git -c user.name="${GIT_AUTHOR_NAME:-mha-course build}" \
    -c user.email="${GIT_AUTHOR_EMAIL:-build@invalid}" \
    commit -q -m "Jupyter edition of $source_commit (tools/jupyter_edition.py)"
git push -q --force "$remote" "$branch:$branch"
echo "published the Jupyter edition of $source_commit to $branch"
