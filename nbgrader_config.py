"""nbgrader configuration of the attention course (run nbgrader from this folder).

    solutions/<id>/<id>.ipynb   source: solutions + hidden tests (+ hidden/ data)
    exercises/<id>/<id>.ipynb   the student release (generated, committed)
    submitted/ autograded/ feedback/ gradebook.db   grading state (not in git)

One command grades a batch: `python -m grader grade` (see
solutions/README.md); the plain nbgrader commands work from this folder too.

Autograde runs every student kernel in a bubblewrap sandbox and judges the
hidden tests outside it (solutions/GRADING_SECURITY.md): the autograde
pipeline below replaces nbgrader's Execute with GuardedExecute (sandboxed
kernel, time/memory/process limits, crash recovery) and adds JudgeHiddenTests
(verdicts in this process) and SanitizeStudentContent (no student HTML or
script reaches the formgrader or the feedback) before SaveAutoGrades.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
SOURCE, RELEASE, FEEDBACK = "solutions", "exercises", "feedback"

# Grade with *this* course's attncourse (hidden tests import grader),
# in this process (the hooks below) and in every kernel nbgrader starts.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if str(ROOT) not in _path:
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *_path])
from grader.nbgrader_cli import path_with_this_python  # noqa: E402

# nbgrader runs `alembic` to open the gradebook: the one beside this Python
os.environ["PATH"] = path_with_this_python(os.environ.get("PATH", ""))
from nbconvert.preprocessors import (  # noqa: E402
    ClearMetadataPreprocessor,
    CSSHTMLHeaderPreprocessor,
)
from nbgrader.preprocessors import (  # noqa: E402
    AssignLatePenalties,
    CheckCellMetadata,
    ClearHiddenTests,
    GetGrades,
    IgnorePattern,
    LimitOutput,
    SaveAutoGrades,
)

# Quiet kernels (TF log settings, inherited by every kernel): stderr costs points.
import attncourse._quiet  # noqa: E402,F401
from grader.guard import GuardedExecute  # noqa: E402
from grader.hooks import strip_hidden  # noqa: E402
from grader.noise import STDERR_NOISE  # noqa: E402
from grader.sanitize import SanitizeStudentContent, markdown_cell_html  # noqa: E402
from grader.verdicts import JudgeHiddenTests  # noqa: E402

# Grader-only state: the secret that seeds grading inputs, staged submissions,
# event logs. Never mounted in the sandbox, never released.
STATE = ROOT / ".grading"

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.source_directory = SOURCE
c.CourseDirectory.release_directory = RELEASE
c.CourseDirectory.feedback_directory = FEEDBACK
# SQLite by default; NBGRADER_DB_URL selects another gradebook, e.g. PostgreSQL
# (postgresql://user@host/db) for graders on several processes or machines.
c.CourseDirectory.db_url = os.environ.get(
    "NBGRADER_DB_URL", f"sqlite:///{ROOT / 'gradebook.db'}"
)

# Hidden reference data (solutions/<id>/hidden/) is deleted from the release and
# the feedback. nbgrader still copies it to autograded/, which the sandboxed
# kernels never see: the verdict is computed in the grader, on inputs drawn per
# grading run (grader.fresh).
c.GenerateAssignment.post_convert_hook = strip_hidden(ROOT / RELEASE)
c.GenerateFeedback.post_convert_hook = strip_hidden(ROOT / FEEDBACK)
# Feedback shows the graded notebook; strip the hidden tests' source from it
# (their failures print only a message, see grader.kernel.errors).
c.GenerateFeedback.preprocessors = [
    GetGrades,
    ClearHiddenTests,
    SanitizeStudentContent,
    CSSHTMLHeaderPreprocessor,
]

# Nothing a student wrote or printed is active content in the feedback or the
# formgrader (both render with an HTMLExporter configured here; see
# grader.sanitize): the graded copy is sanitized (SanitizeStudentContent
# below), nbconvert's sanitizer cleans HTML/markdown outputs and drops
# JavaScript and widgets, and markdown cells -- which nbgrader's templates
# render without it -- go through markdown_cell_html (their last filter).
c.HTMLExporter.sanitize_html = True
c.HTMLExporter.filters = {"strip_files_prefix": markdown_cell_html}

# grades.csv (the grading run's export, plain `nbgrader export`, the
# formgrader's): quoted CSV whose text cells can never open as spreadsheet
# formulas (a student id "=1+2"), grader.export.
c.ExportApp.plugin_class = "grader.export.SafeCsvExport"

# Collecting from the exchange (`nbgrader collect`, the formgrader's Collect)
# runs `python -m grader collect`'s code: links never followed, each inbound
# folder's owner checked against the student it names, every submission kept;
# releasing feedback copies only pages the grader wrote (grader.collect).
c.ExchangeFactory.collect = "grader.collect.GuardedCollect"
c.ExchangeFactory.release_feedback = "grader.collect.GuardedReleaseFeedback"

# Any stderr output gives a test cell 0 points: drop framework log noise
# (warnings, TF/absl/torch log lines) so only real errors count.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = STDERR_NOISE

# Sandboxed grading (see the module docstring). GuardedExecute takes its
# per-cell limit from Execute.timeout; memory/process limits and the sandbox
# switch are SandboxedKernelManager traits (grade_all has flags for them).
c.Autograde.autograde_preprocessors = [
    "grader.entry.RequireStaged",  # first: refuses what grading did not stage
    GuardedExecute,
    IgnorePattern,
    JudgeHiddenTests,
    SanitizeStudentContent,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
c.GuardedExecute.state_dir = str(STATE)
c.JudgeHiddenTests.state_dir = str(STATE)
c.GuardedExecute.notebook_timeout = 900

# Per-cell wall clock. The kernel imports TensorFlow and PyTorch while it
# starts (startup_timeout), before the first cell.
c.Execute.timeout = 120
c.Execute.startup_timeout = 120
# Stop each kernel at once when its notebook is done (a graceful TensorFlow +
# PyTorch shutdown adds seconds per submission and changes nothing).
c.Execute.shutdown_kernel = "immediate"

if "autograde" in sys.argv[1:3] and not os.environ.get("GRADER_GRADE_ALL"):
    # plain `nbgrader autograde` (and the formgrader's button) refuse every
    # submission: RequireStaged lets through only this run's staged copies
    print(
        "attncourse: `nbgrader autograde` grades nothing here -- grade with "
        "`python -m grader grade` (or `make grade`), which stages and checks "
        "the submissions first (grader.entry)",
        file=sys.stderr,
    )
