"""``python -m nbgrader`` as grade_all runs it: nbgrader, minus a slow import.

jsonschema registers an optional "iri" format check when the package
``rfc3987_syntax`` is importable; importing that package builds a Lark grammar,
about 1.3 CPU seconds -- half of nbgrader's start-up, paid by every nbgrader
command (grade_all runs five, plus one per autograde worker). nbgrader
validates notebooks against nbformat's schema, which has no "iri" formats, so
the check is never used: marking the module as absent skips it (jsonschema
treats it as not installed) and changes nothing else.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # import -> ImportError, skipped

from nbgrader.apps.nbgraderapp import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
