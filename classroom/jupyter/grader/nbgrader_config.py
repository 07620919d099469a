"""nbgrader settings of the formgrader service only (the grader account).

On the formgrader's JUPYTER_CONFIG_PATH (classroom/jupyterhub_config.py), in
front of jupyter/common/. The course directory's nbgrader_config.py sets the
same; this copy holds even when the formgrader or a terminal reads nbgrader's
configuration from another folder.

The exchange's inbound folder is written by students: collecting (the
formgrader's *Collect*, ``nbgrader collect``) runs the course's
``python -m grader collect`` code, which never follows a link, checks that
each folder belongs to the student it names and keeps every submission;
releasing feedback copies only pages the grader wrote (grader.collect).
Students' servers never load this file.
"""

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

c.ExchangeFactory.collect = "grader.collect.GuardedCollect"
c.ExchangeFactory.release_feedback = "grader.collect.GuardedReleaseFeedback"
# Optional: which account owns each student's inbound folder when the accounts
# are not named like the students (JSON {"student id": uid}); default: the Unix
# account named like the student.
# c.GuardedCollect.uid_map = "/srv/attention-course/uids.json"
