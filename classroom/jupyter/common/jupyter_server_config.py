"""Jupyter Server settings for every server on the course's hub (students,
instructors, the formgrader service): on JUPYTER_CONFIG_PATH, see
classroom/jupyterhub_config.py."""

c = get_config()  # noqa: F821  (provided by traitlets when it loads this file)

# Terminals: an interactive, non-login bash. A login shell would reset PATH
# from /etc/profile and lose the course environment (python, nbgrader)
# that the hub puts first on PATH.
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash"]}
