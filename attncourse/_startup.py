"""Skip one slow import that notebooks never need (book builds, nbgrader).

jsonschema (via nbformat) registers an optional "iri" format check when the
package ``rfc3987_syntax`` is importable; importing that package builds a Lark
grammar, about 1.3 CPU seconds -- half of nbgrader's start-up, paid by every
nbgrader command and by the book's parallel executor. nbformat's schema has no
"iri" formats, so the check is never used: marking the module as absent skips
it (jsonschema treats it as not installed) and changes nothing else.

Import this module before nbformat: ``import attncourse._startup``.
"""

import sys

sys.modules.setdefault("rfc3987_syntax", None)  # import -> ImportError, skipped
