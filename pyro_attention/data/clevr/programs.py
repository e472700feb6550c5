"""The CLEVR program executor: runs an original or a generated program on a scene, node by node."""

from __future__ import annotations

from typing import Any

from pyro_attention.data.clevr.scenes import Scene


def execute(program: list[dict[str, Any]], scene: Scene) -> list[Any]:
    """Run a CLEVR program on ``scene``; returns every node's output (the last one is the answer).

    Node types: ``scene``, ``filter_<attr>``, ``unique``, ``relate``, ``same_<attr>``, ``union``, ``intersect``,
    ``count``, ``exist``, ``query_<attr>``, ``less_than``, ``greater_than``, ``equal_integer``.  ``unique`` on a
    set that does not hold exactly one object raises ``ValueError`` (such a question is ill-posed).
    """
    outs: list[Any] = []
    objs = scene.objects
    for k, node in enumerate(program):
        t, args, vals = node["type"], [outs[i] for i in node.get("inputs", [])], node.get("value_inputs", [])
        if t == "scene":
            out: Any = list(range(len(objs)))
        elif t.startswith("filter_"):
            attr = t.removeprefix("filter_")
            out = [i for i in args[0] if objs[i][attr] == vals[0]]
        elif t == "unique":
            if len(args[0]) != 1:
                raise ValueError(f"node {k} (unique) got {len(args[0])} objects")
            out = args[0][0]
        elif t == "relate":
            out = list(scene.relationships[vals[0]][args[0]])
        elif t.startswith("same_"):
            attr = t.removeprefix("same_")
            out = [i for i in range(len(objs)) if i != args[0] and objs[i][attr] == objs[args[0]][attr]]
        elif t == "union":
            out = sorted(set(args[0]) | set(args[1]))
        elif t == "intersect":
            out = sorted(set(args[0]) & set(args[1]))
        elif t == "count":
            out = len(args[0])
        elif t == "exist":
            out = len(args[0]) > 0
        elif t.startswith("query_"):
            out = objs[args[0]][t.removeprefix("query_")]
        elif t == "less_than":
            out = args[0] < args[1]
        elif t == "greater_than":
            out = args[0] > args[1]
        elif t == "equal_integer":
            out = args[0] == args[1]
        else:
            raise ValueError(f"node {k}: unknown program node type {t!r}")
        outs.append(out)
    return outs
