"""The course's grading machinery (instructors), apart from ``attncourse`` (learners).

Two parts, split by where the code runs:

* ``grader.kernel`` -- inside the student's sandboxed kernel: the hidden-test
  recorder, the runners, the integrity probe. Mounted into the sandbox with
  this file (which must stay import-free) and ``attncourse``, nothing else.
* everything else -- in the grader process: ``staging`` (read and repair
  submissions), ``fresh`` (per-student inputs), ``sandbox`` and ``guard``
  (sandboxed kernels and their limits), ``verdicts`` and ``judging`` (hidden
  tests judged from the message stream the grader saw), ``assignments`` and
  ``numeric`` (the float64 references and known mistakes), ``reference``
  and ``build_references`` (hidden data), ``leaks``, ``report``, ``parallel``,
  ``grade_all`` and the CLI: ``python -m grader {grade,release,references}``.
"""
