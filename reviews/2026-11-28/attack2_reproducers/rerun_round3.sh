# Re-runs round 3 reproducers (copied to /tmp/a2/old with /work/wt/attack -> /work/wt/attack2). Prepare: mkdir -p /tmp/a2/old; for f in /work/wt/reviews-r3/attack/*.py; do sed "s#/work/wt/attack\b#/work/wt/attack2#g" $f > /tmp/a2/old/$(basename $f); done
set -x
cd /work/wt/attack2
export OMP_NUM_THREADS=1
P=.venv/bin/python
O=/tmp/a2/old
rm -rf /tmp/a2/class && mkdir -p /tmp/a2/class
$P $O/make_capture_class.py /tmp/a2/class
$P $O/make_same_cell_class.py /tmp/a2/class
$P $O/make_hidden_feedback_class.py /tmp/a2/class
$P $O/make_memory_class.py /tmp/a2/class
ls /tmp/a2/class
nice .venv/bin/mha-grade grade /tmp/a2/class --source tests/fixtures/00_example_exercises.ipynb --jobs 1 --no-calibrate
nice .venv/bin/mha-grade report /tmp/a2/class --source tests/fixtures/00_example_exercises.ipynb --out /tmp/a2/classout
grep -o "hidden part[^<]*" /tmp/a2/classout/feedback/*.html
for f in metadata_override merged_students reference_unflagged references_given report_injection; do echo "=== $f"; nice $P $O/$f.py; done
echo "=== gradescope"; nice $P $O/gradescope_other_chapter.py
