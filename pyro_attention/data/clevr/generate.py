"""Questions generated with the five CLEVR template families over real scenes (seeded choices), with programs
the executor runs, so that their answers and gold objects are exact."""

from __future__ import annotations

import random
from typing import Any

from pyro_attention.data.clevr.programs import execute
from pyro_attention.data.clevr.scenes import (
    ATTRIBUTES,
    FAMILIES,
    RELATIONS,
    ClevrQuestion,
    Scene,
    answer_string,
    gold_object,
)

#: question kinds of the zero-hop, one-hop and same-relate families (queries half the time, as in the originals)
_KINDS = ["count", "exist", "query", "query"]
_PLURAL = {"cube": "cubes", "sphere": "spheres", "cylinder": "cylinders"}
_ATTR_ORDER = ["size", "color", "material", "shape"]


class _Program:
    """Builds a CLEVR program node by node."""

    def __init__(self) -> None:
        self.nodes: list[dict[str, Any]] = []

    def add(self, type_: str, inputs: list[int], values: list[str] | None = None) -> int:
        self.nodes.append({"type": type_, "inputs": inputs, "value_inputs": values or []})
        return len(self.nodes) - 1

    def filters(self, start: int, spec: dict[str, str]) -> int:
        node = start
        for attr in _ATTR_ORDER:
            if attr in spec:
                node = self.add(f"filter_{attr}", [node], [spec[attr]])
        return node

    def select(self, spec: dict[str, str]) -> int:
        return self.filters(self.add("scene", []), spec)


def _phrase(spec: dict[str, str], plural: bool = False, rng: random.Random | None = None) -> str:
    words = [spec[a] for a in ("size", "color", "material") if a in spec]
    if "shape" in spec:
        noun = _PLURAL[spec["shape"]] if plural else spec["shape"]
    else:
        noun = (
            ("things" if plural else "thing")
            if rng is None or rng.random() < 0.7
            else ("objects" if plural else "object")
        )
    return " ".join([*words, noun])


def _unique_spec(rng: random.Random, scene: Scene, target: int, among: list[int], avoid: str = "") -> dict | None:
    """A random attribute subset of ``target`` that picks it alone among ``among`` (``avoid``: never use it)."""
    attrs = [a for a in _ATTR_ORDER if a != avoid]
    subsets = [[a for a in attrs if mask >> attrs.index(a) & 1] for mask in range(1 << len(attrs))]
    rng.shuffle(subsets)
    subsets.sort(key=len)  # shortest descriptions first, random among equals (as people describe objects)
    if rng.random() < 0.5:  # sometimes a longer description than needed, as CLEVR does
        rng.shuffle(subsets)
    o = scene.objects[target]
    for subset in subsets:
        spec = {a: o[a] for a in subset}
        if [i for i in among if all(scene.objects[i][a] == v for a, v in spec.items())] == [target]:
            return spec
    return None


def _random_spec(rng: random.Random, scene: Scene, max_attrs: int = 2, from_scene: float = 0.7) -> dict:
    """A filter of 0..``max_attrs`` attributes, values mostly taken from a random object of the scene."""
    k = rng.choice(range(max_attrs + 1))
    attrs = rng.sample(_ATTR_ORDER, k)
    if rng.random() < from_scene:
        o = scene.objects[rng.randrange(len(scene))]
        return {a: o[a] for a in attrs}
    return {a: rng.choice(ATTRIBUTES[a]) for a in attrs}


def _query_words(attr: str, rng: random.Random) -> tuple[str, str]:
    """(question opening for "the X", "its" ending) for a query of ``attr``."""
    name = {"color": "color", "size": "size", "material": "material", "shape": "shape"}[attr]
    return rng.choice([f"what is the {name} of", f"what {name} is"]), rng.choice(
        [f"what is its {name}", f"what {name} is it"]
        + (["what is it made of"] if attr == "material" else [])
        + (["how big is it"] if attr == "size" else [])
    )


def _cap(text: str) -> str:
    return text[0].upper() + text[1:]


def _zero_hop(rng: random.Random, scene: Scene) -> tuple[str, _Program] | None:
    p = _Program()
    kind = rng.choice(_KINDS)
    if kind == "query":
        target = rng.randrange(len(scene))
        attr = rng.choice(_ATTR_ORDER)
        spec = _unique_spec(rng, scene, target, list(range(len(scene))), avoid=attr)
        if spec is None:
            return None
        p.add(f"query_{attr}", [p.add("unique", [p.select(spec)])])
        opening, _ = _query_words(attr, rng)
        return _cap(f"{opening} the {_phrase(spec, rng=rng)}?"), p
    spec = _random_spec(rng, scene, 3)
    node = p.select(spec)
    if kind == "count":
        p.add("count", [node])
        return rng.choice(["How many", "What number of"]) + f" {_phrase(spec, True, rng)} are there?", p
    p.add("exist", [node])
    return f"Are there any {_phrase(spec, True, rng)}?", p


def _count_or_exist(p: _Program, node: int, kind: str, rng: random.Random, counts: list[str],
                    exists: list[str]) -> str:
    """A ``count`` (``kind == "count"``) or ``exist`` question on ``node``: its last program step, and one of its
    wordings drawn by ``rng``."""
    p.add("count" if kind == "count" else "exist", [node])
    return rng.choice(counts if kind == "count" else exists)


def _one_hop(rng: random.Random, scene: Scene) -> tuple[str, _Program] | None:
    p = _Program()
    anchor = rng.randrange(len(scene))
    a_spec = _unique_spec(rng, scene, anchor, list(range(len(scene))))
    if a_spec is None:
        return None
    rel = rng.choice(RELATIONS)
    related = scene.relationships[rel][anchor]
    a_text = _phrase(a_spec, rng=rng)
    kind = rng.choice(_KINDS)
    rel_node = p.add("relate", [p.add("unique", [p.select(a_spec)])], [rel])
    if kind == "query":
        if not related:
            return None
        target = rng.choice(related)
        attr = rng.choice(_ATTR_ORDER)
        spec = _unique_spec(rng, scene, target, related, avoid=attr)
        if spec is None:
            return None
        p.add(f"query_{attr}", [p.add("unique", [p.filters(rel_node, spec)])])
        opening, ending = _query_words(attr, rng)
        t_text = _phrase(spec, rng=rng)
        text = rng.choice(
            [f"{opening} the {t_text} {rel} the {a_text}?", f"there is a {t_text} {rel} the {a_text}; {ending}?"]
        )
        return _cap(text), p
    spec = _random_spec(rng, scene, 2)
    node = p.filters(rel_node, spec)
    things = _phrase(spec, True, rng)
    text = _count_or_exist(
        p, node, kind, rng,
        [f"there is a {a_text}; how many {things} are {rel} it?", f"what number of {things} are {rel} the {a_text}?"],
        [f"there is a {a_text}; are there any {things} {rel} it?", f"are there any {things} {rel} the {a_text}?"],
    )
    return _cap(text), p


def _same_relate(rng: random.Random, scene: Scene) -> tuple[str, _Program] | None:
    p = _Program()
    anchor = rng.randrange(len(scene))
    same = rng.choice(_ATTR_ORDER)
    a_spec = _unique_spec(rng, scene, anchor, list(range(len(scene))), avoid=same)
    if a_spec is None:
        return None
    a_text = _phrase(a_spec, rng=rng)
    others = [i for i in range(len(scene)) if i != anchor and scene.objects[i][same] == scene.objects[anchor][same]]
    same_node = p.add(f"same_{same}", [p.add("unique", [p.select(a_spec)])])
    kind = rng.choice(_KINDS)
    if kind == "query":
        if not others:
            return None
        target = rng.choice(others)
        attr = rng.choice([a for a in _ATTR_ORDER if a != same])
        spec = _unique_spec(rng, scene, target, others, avoid=attr)
        if spec is None:
            return None
        spec.pop(same, None)
        if [i for i in others if all(scene.objects[i][a] == v for a, v in spec.items())] != [target]:
            return None
        p.add(f"query_{attr}", [p.add("unique", [p.filters(same_node, spec)])])
        opening, ending = _query_words(attr, rng)
        t_text = _phrase(spec, rng=rng)
        text = rng.choice(
            [
                f"{opening} the other {t_text} that is the same {same} as the {a_text}?",
                f"there is a {t_text} that is the same {same} as the {a_text}; {ending}?",
            ]
        )
        return _cap(text), p
    spec = {a: v for a, v in _random_spec(rng, scene, 1).items() if a != same}
    node = p.filters(same_node, spec)
    things = _phrase(spec, True, rng)
    text = _count_or_exist(
        p, node, kind, rng,
        [f"how many other {things} are the same {same} as the {a_text}?",
         f"what number of other {things} have the same {same} as the {a_text}?"],
        [f"are there any other {things} that have the same {same} as the {a_text}?"]
        + ([f"is there anything else that is the same {same} as the {a_text}?"] if not spec else []),
    )
    return _cap(text), p


def _single_or(rng: random.Random, scene: Scene) -> tuple[str, _Program] | None:
    p = _Program()
    first, second = _random_spec(rng, scene, 2), _random_spec(rng, scene, 2)
    if not first or not second or first == second:
        return None
    outer = _random_spec(rng, scene, 1) if rng.random() < 0.5 else {}
    union = p.add("union", [p.select(first), p.select(second)])
    p.add("count", [p.filters(union, outer)])
    whole = _phrase(outer, True, rng)
    either = rng.choice(["", "either "])
    text = rng.choice(["How many", "What number of"]) + (
        f" {whole} are {either}{_phrase(first, True, rng)} or {_phrase(second, True, rng)}?"
    )
    return text, p


def _compare_integer(rng: random.Random, scene: Scene) -> tuple[str, _Program] | None:
    p = _Program()
    first, second = _random_spec(rng, scene, 2), _random_spec(rng, scene, 2)
    if not first or not second or first == second:
        return None
    a, b = _phrase(first, True, rng), _phrase(second, True, rng)
    kind = rng.choice(["less_than", "greater_than", "equal_integer"])
    p.add(kind, [p.add("count", [p.select(first)]), p.add("count", [p.select(second)])])
    text = {
        "less_than": rng.choice(
            [f"Are there fewer {a} than {b}?", f"Is the number of {a} less than the number of {b}?"]
        ),
        "greater_than": rng.choice(
            [f"Are there more {a} than {b}?", f"Is the number of {a} greater than the number of {b}?"]
        ),
        "equal_integer": rng.choice(
            [f"Are there the same number of {a} and {b}?", f"Is the number of {a} the same as the number of {b}?"]
        ),
    }[kind]
    return text, p


_GENERATORS = {
    "zero_hop": _zero_hop,
    "one_hop": _one_hop,
    "same_relate": _same_relate,
    "single_or": _single_or,
    "compare_integer": _compare_integer,
}


def generate_questions(
    scenes: dict[int, Scene], num_questions: int, seed: int = 0, families: list[str] | None = None
) -> list[ClevrQuestion]:
    """``num_questions`` seeded questions over ``scenes`` (a family and a scene drawn uniformly for each).

    Ill-posed draws (an anchor no description picks alone, an empty relation for a query, ...) are redrawn.
    Each question's program is run by :func:`execute`; its answer and gold object come from that run.
    """
    families = list(families or FAMILIES)
    unknown = [f for f in families if f not in _GENERATORS]
    if unknown:
        raise ValueError(f"unknown question families {unknown}; choose from {FAMILIES}")
    if num_questions < 0:
        raise ValueError(f"num_questions must be >= 0, got {num_questions}")
    if not scenes and num_questions:
        raise ValueError("generate_questions: no scenes")
    rng = random.Random(seed)
    indices = sorted(scenes)
    out: list[ClevrQuestion] = []
    attempts = 0
    while len(out) < num_questions:
        attempts += 1
        if attempts > 100 * num_questions + 1000:
            raise RuntimeError("generate_questions: too many ill-posed draws")
        family = rng.choice(families)
        scene = scenes[rng.choice(indices)]
        made = _GENERATORS[family](rng, scene)
        if made is None:
            continue
        text, program = made
        try:
            outs = execute(program.nodes, scene)
        except ValueError:
            continue
        nodes = [dict(n, _output=o) for n, o in zip(program.nodes, outs, strict=True)]
        answer = answer_string(outs[-1])
        out.append(ClevrQuestion(text, scene.index, answer, family, nodes, gold_object(nodes), -1, "generated"))
    return out
