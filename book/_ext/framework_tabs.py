"""Show TensorFlow and PyTorch code cells side by side as synced tabs.

Authors write ordinary, top-level executable cells (so the chapter runs cell by
cell in JupyterLab) and tag them ``tensorflow`` or ``pytorch``. On the site, each
run of consecutive tagged cells becomes one sphinx-design tab set -- code *and*
outputs inside the tabs -- in the sync group ``framework``, so choosing PyTorch
once switches every tab set on the page and on later pages (sphinx-design keeps
the choice in the browser's local storage).

A run must contain both frameworks; a run with only one is reported as a warning
(an error in the ``-W`` build), as is a cell tagged with both.
"""

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx_design.shared import create_component

LOGGER = logging.getLogger(__name__)

SYNC_GROUP = "framework"
FRAMEWORKS = {"tensorflow": "TensorFlow", "pytorch": "PyTorch"}  # tab order


def framework_of(node: nodes.Node) -> str | None:
    """The framework tag of a myst-nb code cell, or None for any other node."""
    if not isinstance(node, nodes.container) or "cell" not in node["classes"]:
        return None
    found = [fw for fw in FRAMEWORKS if f"tag_{fw}" in node["classes"]]
    if len(found) > 1:
        LOGGER.warning(
            "a cell is tagged with both frameworks %s [framework_tabs]",
            found,
            location=node,
            type="framework_tabs",
        )
    return found[0] if found else None


def make_tab_set(run: list[nodes.container]) -> nodes.container:
    """One tab set with a tab per framework holding that framework's cells."""
    items = []
    for fw, title in FRAMEWORKS.items():
        cells = [cell for cell in run if framework_of(cell) == fw]
        label = nodes.rubric(title, nodes.Text(title), classes=["sd-tab-label"])
        label["sync_group"] = SYNC_GROUP
        label["sync_id"] = fw
        content = create_component(
            "tab-content", children=cells, classes=["sd-tab-content"]
        )
        items.append(
            create_component(
                "tab-item", children=[label, content], classes=["sd-tab-item"]
            )
        )
    return create_component(
        "tab-set", children=items, classes=["sd-tab-set", "framework-tabs"]
    )


def split_runs(children: list[nodes.Node]) -> list[nodes.Node | list]:
    """Group consecutive framework cells into lists; keep other nodes as they are."""
    out: list[nodes.Node | list] = []
    for child in children:
        if framework_of(child):
            if out and isinstance(out[-1], list):
                out[-1].append(child)
            else:
                out.append([child])
        else:
            out.append(child)
    return out


class FrameworkTabs(SphinxTransform):
    """Wrap runs of tagged cells in synced sphinx-design tab sets."""

    default_priority = 500  # after parsing; before sphinx-design's HTML post-transform

    def apply(self, **kwargs) -> None:
        parents = {
            id(cell.parent): cell.parent
            for cell in self.document.findall(nodes.container)
            if framework_of(cell) and cell.parent is not None
        }
        for parent in parents.values():
            new_children = []
            for group in split_runs(list(parent.children)):
                if not isinstance(group, list):
                    new_children.append(group)
                    continue
                present = {framework_of(cell) for cell in group}
                if present != set(FRAMEWORKS):
                    LOGGER.warning(
                        "framework cells without their twin: this run has only %s; "
                        "tag a matching cell for each of %s [framework_tabs]",
                        sorted(present),
                        sorted(FRAMEWORKS),
                        location=group[0],
                        type="framework_tabs",
                    )
                    new_children.extend(group)
                    continue
                new_children.append(make_tab_set(group))
            parent.children = []
            parent.extend(new_children)


def setup(app: Sphinx) -> dict:
    app.setup_extension("sphinx_design")
    app.add_transform(FrameworkTabs)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
