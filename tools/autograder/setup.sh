#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder's image (Ubuntu, as root), with the
# zip unpacked in /autograder/source. It installs Python, the course's pinned packages (PyTorch's
# CPU build, as for Binder), the course package `mha` and its grader `mha_grade` (not editable), bubblewrap (used
# when the container allows user namespaces), and makes the unprivileged user `student` that
# every submission runs as.
set -euo pipefail
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv python3-pip bubblewrap
python3 -m venv /autograder/venv
/autograder/venv/bin/python -m pip install --quiet --upgrade pip
grep -v '^-e ' /autograder/source/binder/requirements.txt > /tmp/requirements.txt
/autograder/venv/bin/python -m pip install --quiet -r /tmp/requirements.txt
/autograder/venv/bin/python -m pip install --quiet /autograder/source
chmod -R go+rX,go-w /autograder/venv  # the student's user runs this Python, never changes it
/autograder/venv/bin/python -m mha_grade gradescope prepare
