"""``python -m grader <command> [options]`` -- the instructors' commands.

    collect     collect the exchange's submissions (links refused, owners checked)
    grade       stage, autograde in the sandbox, feedback, grades.csv, report
    release     regenerate the student release exercises/ and check it for leaks
    references  regenerate (or --check) the hidden reference data
    sandbox     check that a bubblewrap sandbox can be started here
    worker      a Dask worker for ``grade --scheduler`` (grader.cluster)

``python -m grader <command> --help`` lists each command's options.
"""

import sys

COMMANDS = {
    "collect": "grader.collect",
    "grade": "grader.grade_all",
    "release": "grader.release",
    "references": "grader.build_references",
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "worker":
        from grader import cluster

        return cluster.worker_main(rest)
    if command == "sandbox":
        from grader import sandbox

        problem = sandbox.check_available()
        print(problem or "ok: a bubblewrap sandbox can be started")
        return 1 if problem else 0
    if command not in COMMANDS:
        print(
            f"unknown command {command!r}; one of: {', '.join(COMMANDS)}, sandbox",
            file=sys.stderr,
        )
        return 2
    import importlib

    return importlib.import_module(COMMANDS[command]).main(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
