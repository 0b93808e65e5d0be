"""The planner package's own import direction, checked on the import graph (grimp, which lint-imports uses):
types <- feasibility <- search -> explain, serialize beside search. explain words numbers the search computed and
imports no search; nothing below search imports it back."""

from __future__ import annotations

import grimp

# Highest first: a module may import only the layers below it; search and serialize do not import each other.
PLANNER_LAYERS = (
    {"search", "serialize"},
    "explain",
    "feasibility",
    "types",
    "throughput",
    "memory",
    "calibration",
)


def test_the_planner_modules_import_one_way() -> None:
    graph = grimp.build_graph("wizard")
    illegal = graph.find_illegal_dependencies_for_layers(layers=PLANNER_LAYERS, containers={"wizard.planner"})
    assert not illegal, sorted(f"{d.importer} -> {d.imported}" for d in illegal)
