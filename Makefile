# Two commands do everything: `make book` and `make test`. Each first sets up .venv from
# requirements.txt, the lock of every package (again only when it or pyproject.toml changed).
# A person edits requirements.in; `make lock` resolves it into requirements.txt (tools/lock.py).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# chapters, and the book pages that are notebooks (their outputs are checked the same way)
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb)) $(sort $(wildcard book/*.ipynb))

.PHONY: setup lock book test test-fast chapter lint pytest execute lab jupyter clean

setup: $(STAMP)

# torch from PyTorch's CPU index, as binder/requirements.txt does (on PyPI, torch for Linux is the
# CUDA build: GBs never used), but only when the index answers within 3 s (tools/reachable.py):
# pip retries an unreachable index for every package, minutes in all. `TORCH_INDEX=` skips it.
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
# The environment is the lock and nothing else: a changed lock makes .venv again from nothing
# (no installer removes what a lock no longer lists), and `pip check` proves it. Only a folder
# that is a virtual environment is emptied (it may be a link to one). pip installs torch: it
# finds the CPU build where pip's configuration or TORCH_INDEX offers one, and brings the CUDA
# packages where only PyPI's build is at hand. uv installs the rest of the lock exactly as
# written (--no-deps: the lock is complete, tests/test_locks.py), downloading in parallel: a
# fraction of pip's time. Both take the lock's versions (constraints.txt: the lock as
# constraints), of what they install and of what builds a package (the course's own, -e .).
# Then byte-compiled once, here, on every core (pip's own compiling is serial): where
# PYTHONDONTWRITEBYTECODE=1 is set (this machine, CI, many Docker images) Python never writes a
# .pyc, so every notebook kernel, sandboxed grading run and test subprocess would compile torch
# again (import torch: 3.5-4.6 s of CPU instead of 1.7 s). Errors are ignored, as pip does: a few
# files are tests in a newer Python's syntax (torch's py312_intrinsics.py).
LOCKED := $(VENV)/.locked
$(LOCKED): requirements.txt
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "make setup needs Python 3.11 or newer: make PYTHON=python3.11"; exit 1; }
	@test ! -e $(VENV) || test -f $(VENV)/pyvenv.cfg || rmdir $(VENV) 2>/dev/null || \
		{ echo "$(VENV) is not a virtual environment: move it away, setup would empty it"; exit 1; }
	venv=$$($(PYTHON) -c 'import os, sys; print(os.path.realpath(sys.argv[1]))' $(VENV)) && \
		test -n "$$venv" && test "$$venv" != "$(CURDIR)" && $(PYTHON) -m venv --clear "$$venv"
	grep -v '^-e ' requirements.txt > $(VENV)/constraints.txt
	$(BIN)/python -m pip install --quiet -c $(VENV)/constraints.txt pip uv
	index=$$($(if $(TORCH_INDEX),$(BIN)/python tools/reachable.py $(TORCH_INDEX))) && \
		$(BIN)/python -m pip install --quiet --no-compile $${index:+--extra-index-url $$index} \
		-c $(VENV)/constraints.txt torch
	$(BIN)/uv pip install --quiet --no-config --python $(BIN)/python --no-deps \
		--build-constraints $(VENV)/constraints.txt -r requirements.txt
	$(BIN)/python -m pip check
	$(BIN)/python -m compileall -qq -j 0 src \
		$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') || true
	touch $(LOCKED)

# A change to pyproject.toml alone (a lint or test setting, an entry point) reinstalls the course
# package, not the environment; its dependencies are the lock's (`make lock` after changing them).
$(STAMP): $(LOCKED) pyproject.toml
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

# requirements.in and requirements-grading.in resolved again from today's releases on PyPI into
# requirements.txt, requirements-grading.txt and binder/requirements.txt; `make test` then sets up
# the new environment and checks it (tests/test_locks.py).
lock: $(STAMP)
	$(BIN)/python tools/lock.py

# The book (whose download buttons serve the Jupyter edition: book/_ext/jupyter_download.py), then
# its Jupyter edition (no MyST left: what Colab and Binder open; tools/jupyter_edition.py).
book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	$(BIN)/python tools/jupyter_edition.py --out _build/jupyter
	@echo "The book is built: open $(CURDIR)/_build/html/index.html"

lint: $(STAMP)
	$(BIN)/ruff check src tests tools notebooks benchmarks

# numpy's DeprecationWarning when a torch tensor reaches matplotlib (pass `.numpy()` instead).
# With STRICT_ARRAYS=1 it is an error in the tests and in every notebook's kernel (kernels
# inherit PYTHONWARNINGS), so nbval fails on it; tests/test_strict_arrays.py proves that.
STRICT_ARRAYS ?=
ARRAY_WARNING := error:__array__ implementation doesn't accept a copy keyword:DeprecationWarning

# Two workers, each taking a whole file (or test class) at a time, longest first (conftest.py),
# each with one torch thread (kernels inherit it): two workers of two threads each on two cores
# slowed the lab fourfold.
PYTEST := $(if $(STRICT_ARRAYS),PYTHONWARNINGS="$(ARRAY_WARNING)" )OMP_NUM_THREADS=1 \
	$(BIN)/python -m pytest \
	-n 2 --dist loadscope --no-loadscope-reorder --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

# The unit and property tests, and every notebook under nbval (strict: outputs must match).
pytest: $(STAMP)
	$(PYTEST) --durations=15 tests $(NOTEBOOKS) --nbval

# For authors: the unit and property tests, and under nbval only the notebooks that differ from
# main (committed or not); no book, browser or chapter grading: about 10 minutes of CPU time
# (the figure README.md and CONTRIBUTING.md quote, measured as CONTRIBUTING.md says).
# `make test-fast TESTS="tests/test_a.py tests/test_b.py"` runs only those files
# (CONTRIBUTING.md names them per module of src/mha); `K=expr` adds pytest's -k. `make test` stays the complete run CI uses.
CHANGED_NOTEBOOKS = $(filter $(NOTEBOOKS),$(shell git diff --name-only main -- '*.ipynb' 2>/dev/null))
SLOW_TESTS := test_book_in_browser.py test_book_exercises.py test_grading_chapters.py \
	test_grading_attacks.py test_compile.py test_gradescope_tamper.py test_grading_env.py
test-fast: $(STAMP)
	$(PYTEST) $(or $(TESTS),tests $(CHANGED_NOTEBOOKS) --nbval \
		$(addprefix --ignore=tests/,$(SLOW_TESTS))) $(if $(K),-k "$(K)")

# One chapter's loop, for its author (CONTRIBUTING.md starts with it): `make chapter CHAPTER=06`
# (or 6, or 06_positional_encoding). Re-executes the chapter as `make execute` does (cells tagged
# machine-dependent keep their outputs; REFRESH=1 records them anew), brings the book up to date
# (Sphinx rewrites only what changed: ~15 s, the first build ~1 min), then runs every test about
# the chapter (`--chapter`, conftest.py): its notebook under nbval, its checks' tests and their
# rows in the shared tables, its static and edition tests, the book's rendering of its
# exercises, and its grading in the sandbox (solutions full marks, the student edition zero). A
# skip there fails. The browser tests and the other chapters are `make test`'s.
CHAPTER_NOTEBOOK = $(wildcard notebooks/$(CHAPTER)_*.ipynb notebooks/0$(CHAPTER)_*.ipynb \
	notebooks/$(CHAPTER).ipynb)
# (one recipe line each: a line continued with a backslash made make name the wrong line of
# the recipe when a later one failed)
CHAPTER_USAGE = usage: make chapter CHAPTER=06 (a number or a name: $(notdir $(basename $(wildcard notebooks/*.ipynb))))
chapter: $(STAMP)
	@test -n "$(CHAPTER)" -a "$(words $(CHAPTER_NOTEBOOK))" = 1 || { echo "$(CHAPTER_USAGE)"; exit 2; }
	$(EXECUTE) $(CHAPTER_NOTEBOOK)
	$(BIN)/jupyter-book build . -W -n --keep-going --quiet
	$(PYTEST) tests $(CHAPTER_NOTEBOOK) --nbval --chapter $(CHAPTER) \
		--ignore=tests/test_book_in_browser.py

# Book tests read _build/html, so the book is built first.
test: lint book pytest

# One torch thread, as nbval and grading run: chapter 8 took 78 s (47 s of CPU) with torch's
# default threads on a loaded 2-core machine, 25 s (14 s) with one.
EXECUTE = OMP_NUM_THREADS=1 $(BIN)/python tools/execute.py $(if $(REFRESH),--refresh)

# Re-run notebooks in place in a fresh kernel, for authors refreshing committed outputs (every
# notebook, or NOTEBOOKS=notebooks/06_positional_encoding.ipynb). Cells tagged machine-dependent
# keep their committed outputs; REFRESH=1 records them anew (tools/execute.py).
execute: $(STAMP)
	$(EXECUTE) $(NOTEBOOKS)

# The source notebooks, with jupyterlab-myst (requirements.txt) rendering their MyST as the book
# does: for authors (solutions open, MyST to edit). Readers and students run `make jupyter`.
lab: $(STAMP)
	$(BIN)/jupyter lab notebooks/

# The Jupyter edition (what the book's launch and download buttons open: no MyST left, solutions
# folded, links within a chapter as anchors in it) written to _build/jupyter/ and opened in
# JupyterLab. A notebook the student changed there since it was written is kept, and named.
# JupyterLab opens it without jupyterlab-myst (tools/jupyter_edition_lab/, added to the config
# path, not replacing the user's): the edition has no MyST, and jupyterlab-myst 2.7.0 leaves the
# maths inside a folded solution's <details> as raw TeX, where JupyterLab's own renderer
# typesets it.
jupyter: $(STAMP)
	$(BIN)/python tools/jupyter_edition.py --out _build/jupyter
	JUPYTER_CONFIG_PATH="$(CURDIR)/tools/jupyter_edition_lab$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
		$(BIN)/jupyter lab _build/jupyter/notebooks/

clean:
	rm -rf _build .pytest_cache .hypothesis

# The student edition of every chapter (solutions replaced by stubs, an answer cell for every
# question in words, plain Jupyter markdown like the Jupyter edition) in _build/student/notebooks/.
.PHONY: student grade gradescope
student: $(STAMP)
	$(BIN)/python tools/student_jupyter_edition.py --out _build/student/notebooks

# Grade every notebook under SUBMISSIONS, each in a bubblewrap sandbox (Linux; see
# book/instructors.md); writes SUBMISSIONS/grades.csv and grading_log.csv.
# GRADE_OPTS passes options on, e.g. GRADE_OPTS="--timeout 600 --jobs 4" (see mha-grade grade -h).
grade: $(STAMP)
	@test -n "$(SUBMISSIONS)" || { echo "usage: make grade SUBMISSIONS=<folder>"; exit 2; }
	$(BIN)/mha-grade grade "$(SUBMISSIONS)" $(GRADE_OPTS)

# A Gradescope autograder zip for one assignment, _build/gradescope-CHAPTER.zip: its
# run_autograder grades that chapter's notebook of one submission inside Gradescope's container
# (see book/instructors.md). CHAPTER is a chapter's number or name (03), or all (one assignment
# for the whole course).
gradescope: $(STAMP)
	@test -n "$(CHAPTER)" || { echo "usage: make gradescope CHAPTER=<03 | 03_attention_with_weights | all>"; exit 2; }
	$(BIN)/mha-grade gradescope build $(if $(filter all,$(CHAPTER)),--all,--chapter $(CHAPTER)) $(GRADESCOPE_OPTS) _build/gradescope-$(CHAPTER).zip
