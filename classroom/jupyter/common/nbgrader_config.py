"""nbgrader settings shared by every account on the course's JupyterHub.

Every single-user server and the formgrader service get this folder on
JUPYTER_CONFIG_PATH (classroom/jupyterhub_config.py sets it), so students,
instructors and the grader account agree on the course id and the exchange.
The course's own nbgrader_config.py (in the grader's course directory) adds
the grading settings on top.
"""

import os

from nbgrader.auth import JupyterHubAuthPlugin

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# The hub groups nbgrader-attention-course (students) and
# formgrade-attention-course (instructors) say who takes / grades the course,
# and the formgrader service is named after the course id.
c.CourseDirectory.course_id = "attention-course"

# The exchange: world-writable with the sticky bit (chmod 1777), on a disk
# every single-user server sees. The hub passes ATTNCOURSE_EXCHANGE to every server.
c.Exchange.root = os.environ.get("ATTNCOURSE_EXCHANGE", "/srv/nbgrader/exchange")
# Students find their assignments in ~/attention-course/<assignment>/, so a
# second course on the same hub cannot collide with this one.
c.Exchange.path_includes_course = True
# Ask JupyterHub which courses a user belongs to (groups nbgrader-<course> and
# formgrade-<course>): only members see, fetch and submit the assignments.
c.Authenticator.plugin_class = JupyterHubAuthPlugin
