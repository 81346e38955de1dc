#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder's image (as root), with the zip
# unpacked in /autograder/source. Base image: Ubuntu 22.04 (Gradescope's default), whose
# python3 is 3.10, the oldest Python the course supports. It installs what grading imports
# (requirements-grading.txt: PyTorch's CPU build when PyTorch's index answers, nothing of
# Jupyter, the book or the tests), the course package `mha` and its grader `mha_grade` (not editable), bubblewrap
# (used when the container allows user namespaces), and makes the unprivileged user `student`
# that every submission runs as. Run again, it installs only what changed.
set -euo pipefail
source=/autograder/source
venv=/autograder/venv
missing=()  # from apt only what the image lacks
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3 python3-venv)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v setpriv >/dev/null || missing+=(util-linux)  # runs each notebook as `student`
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "setup.sh: the course needs Python 3.10 or newer, this image has $(python3 -V 2>&1);" \
    "choose the base image Ubuntu 22.04 (or newer)" >&2
  exit 1
}
python3 -m venv "$venv"
# the lock's pip, then the lock (every package at its exact version; tools/lock.py makes it)
"$venv/bin/python" -m pip install --quiet "$(grep -m1 '^pip==' "$source/requirements-grading.txt")"
# torch's CPU build (about 200 MB to download instead of several GB of CUDA) when the index answers
torch_index=https://download.pytorch.org/whl/cpu
index=$("$venv/bin/python" "$source/tools/reachable.py" "$torch_index")
[ -n "$index" ] || echo "setup.sh: PyTorch's CPU index ($torch_index) does not answer: pip" \
  "takes torch from its own configuration or PyPI, whose Linux build brings several GB of CUDA" >&2
"$venv/bin/python" -m pip install --quiet ${index:+--extra-index-url "$index"} \
  -r "$source/requirements-grading.txt"
# built with the lock's setuptools (just installed), not PyPI's newest
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall --no-build-isolation "$source"
"$venv/bin/python" -m pip check
chmod -R go+rX,go-w "$venv"  # the student's user runs this Python, never changes it
"$venv/bin/python" -m mha_grade gradescope prepare
