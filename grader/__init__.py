"""The course's grading machinery (instructors), apart from ``attncourse`` (learners).

Two parts, split by where the code runs:

* ``grader.kernel`` -- inside the student's sandboxed kernel: the hidden-test
  recorder, the runners, the integrity probe. Mounted into the sandbox with
  this file (which must stay import-free) and ``attncourse``, nothing else.
* everything else -- in the grader process.

The path of one submission, in order (``python -m grader grade``):

1. ``collect`` -- the exchange's inbound folders into ``submitted/`` (links
   refused, owners checked);
2. ``staging`` -- read and repair each notebook, scan it (``provenance``),
   stage it with a signed manifest; ``fresh`` draws its hidden inputs;
3. ``dispatch`` / ``cluster`` -- one Dask task per submission; ``locks``
   keeps two grading runs off one course and one gradebook;
4. nbgrader's autograde with the course's preprocessors (``nbgrader_config.py``
   lists them): ``entry.RequireStaged`` (only staged copies), ``guard``
   (``GuardedExecute``: the kernel in ``sandbox``, output bounds, the probe),
   ``verdicts`` (``JudgeHiddenTests``: hidden tests judged from the message
   stream with ``judging`` and ``checks``), ``sanitize`` (nothing active in
   what people see), ``hooks`` (hidden data kept out of releases);
5. ``grade_all`` -- feedback, ``report`` (the per-student table, ``events``
   the flags and notes), ``export`` (grades.csv), ``leaks`` (nothing
   grader-only reaches a student).

Per assignment: ``assignments/<slug>.py`` (checks, known mistakes, float64
references with ``numeric``), ``reference`` / ``build_references`` (hidden
data). The other commands: ``python -m grader {collect,release,references}``.
"""
