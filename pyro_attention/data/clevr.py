"""CLEVR v1.0 scene graphs as region QA: a reader, region features, a program executor and a question generator.

Each CLEVR object is one region; a question attends over the objects of its scene and predicts one answer.
The files (Johnson et al. 2017, CC BY 4.0) are the original scene graphs and questions made with the original
CLEVR templates; they are read from a folder given on the command line or ``$PYRO_ATTENTION_DATA`` and never
copied into this repository::

    clevr-scenes/CLEVR_{split}_scenes_{n}.json.gz      {"info": ..., "scenes": [{"image_index", "objects",
                                                          "relationships", "directions", ...}, ...]}
    clevr-scenes/questions/CLEVR_{split}_1_{family}.json.gz
                                                       {"info": ..., "questions": [{"question", "image_indices",
                                                          "answers", "program", "template_filename", ...}]}

A question record applies to several scenes (``image_indices``), with one answer and one executed program per
scene; :func:`read_questions` flattens them into (question, scene, answer) triples.

**Region features** (:func:`region_features`, :data:`FEATURES`; 22 numbers per object)::

    one-hot colour (8: gray red blue green brown purple cyan yellow) | one-hot size (2: small large)
    | one-hot shape (3: cube sphere cylinder) | one-hot material (2: rubber metal)
    | 3-D ground-plane position x/3, y/3 (CLEVR's coordinates lie in about [-3, 3])
    | the position projected on the scene's own "right" and "front" directions, each /3 (the relations
      left/right/behind/front are comparisons of these two numbers between objects)
    | pixel column/480, pixel row/320, camera depth/16 (``pixel_coords``; images are 480 x 320)

The height ``z`` (a function of size) and the rotation (asked by no template) are not used.

**Questions** are lower-cased and split into words (punctuation dropped); ids come from a
:class:`~pyro_attention.data.text.Vocab` built on the training questions (``<pad>`` = 0, unseen words ->
``<unk>``).  **Answers** form one fixed vocabulary :data:`ANSWERS`: ``yes`` / ``no`` for booleans, ``0``..``10``
for counts, and the attribute values.

**Gold region**: where the program ends in a ``query_*`` node the answer is read from one object -- the object
the ``unique`` node before it picks (the object a zero-hop query names; for one-hop and same-relate queries, the
related object that is queried, not the anchor).  Count, exist, union and comparison questions have no single
attended object: gold ``-1`` (not scored).

**Generated questions** (:func:`generate_questions`) use the same five template families over the same real
scenes, with seeded choices: ``zero_hop`` (count / exist / query an attribute of a uniquely described object),
``one_hop`` (the same, about the objects left / right / behind / in front of a uniquely described anchor),
``same_relate`` (other objects with the same size / colour / material / shape as an anchor), ``single_or``
(count a union of two filters, optionally restricted by a third) and ``compare_integer`` (fewer / more / as many
A as B).  Their programs are CLEVR-style node lists and are run by the same executor (:func:`execute`) that
reproduces the original programs' outputs, so their answers and gold objects are exact.  The wording follows
the original questions (including CLEVR's "left the X" for "left of the X").

References:
[1] J. Johnson et al. "CLEVR: A Diagnostic Dataset for Compositional Language and Elementary Visual Reasoning."
    CVPR 2017.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import random
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from pyro_attention.data.region_qa import RegionBatch, RegionQADataset
from pyro_attention.data.text import Vocab

COLORS = ["gray", "red", "blue", "green", "brown", "purple", "cyan", "yellow"]
SIZES = ["small", "large"]
SHAPES = ["cube", "sphere", "cylinder"]
MATERIALS = ["rubber", "metal"]
#: attribute -> allowed values
ATTRIBUTES: dict[str, list[str]] = {"size": SIZES, "color": COLORS, "material": MATERIALS, "shape": SHAPES}
RELATIONS = ["left", "right", "behind", "front"]
FAMILIES = ["zero_hop", "one_hop", "same_relate", "single_or", "compare_integer"]
MAX_COUNT = 10
#: the answer vocabulary (fixed, so every split shares it)
ANSWERS: list[str] = ["yes", "no", *map(str, range(MAX_COUNT + 1)), *COLORS, *SIZES, *SHAPES, *MATERIALS]
#: names of the region feature columns, in order
FEATURES: list[str] = [
    *(f"color={c}" for c in COLORS),
    *(f"size={s}" for s in SIZES),
    *(f"shape={s}" for s in SHAPES),
    *(f"material={m}" for m in MATERIALS),
    "x/3",
    "y/3",
    "right/3",
    "front/3",
    "pixel_x/480",
    "pixel_y/320",
    "depth/16",
]
MAX_OBJECTS = 10


class ClevrFormatError(ValueError):
    """A malformed entry in a CLEVR scene or question file (the message names the file and the entry)."""


@dataclass
class Scene:
    """One CLEVR scene: its objects (attribute dicts) and spatial relations.

    ``relationships[r][i]`` lists the objects that are ``r`` (left / right / behind / front) of object ``i``.
    """

    index: int
    objects: list[dict[str, Any]]
    relationships: dict[str, list[list[int]]]
    directions: dict[str, list[float]]
    filename: str = ""

    def __len__(self) -> int:
        return len(self.objects)

    def object_name(self, i: int) -> str:
        o = self.objects[i]
        return f"{o['size']} {o['color']} {o['material']} {o['shape']}"


@dataclass
class ClevrQuestion:
    """One (question, scene, answer) triple.

    :param program: CLEVR program nodes (``type``, ``inputs``, ``value_inputs``, optionally ``_output``).
    :param gold: the object the answer is read from, or ``-1`` (see the module docstring).
    :param source: ``"original"`` (read from the files) or ``"generated"``.
    """

    text: str
    image_index: int
    answer: str
    family: str
    program: list[dict[str, Any]]
    gold: int = -1
    template_index: int = -1
    source: str = "original"


# ----------------------------------------------------------------------------------------------------------------
# Reading


def _load_json_gz(path: str | os.PathLike) -> Any:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"CLEVR file {path} does not exist")
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)
    except (OSError, EOFError) as error:
        raise ClevrFormatError(f"{path}: not a readable gzip file ({error})") from None
    except json.JSONDecodeError as error:
        raise ClevrFormatError(f"{path}: not valid JSON ({error})") from None


def _number_list(value: Any, length: int, where: str) -> list[float]:
    if (
        not isinstance(value, list)
        or len(value) != length
        or not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    ):
        raise ClevrFormatError(f"{where}: expected a list of {length} finite numbers, got {value!r}")
    return [float(v) for v in value]


def parse_scene(entry: Any, where: str = "scene") -> Scene:
    """Check one scene dict of a CLEVR scene file and return it as a :class:`Scene`."""
    if not isinstance(entry, dict):
        raise ClevrFormatError(f"{where}: expected an object, got {type(entry).__name__}")
    for key in ("image_index", "objects", "relationships"):
        if key not in entry:
            raise ClevrFormatError(f"{where}: missing key {key!r}")
    index = entry["image_index"]
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ClevrFormatError(f"{where}: image_index must be a non-negative integer, got {index!r}")
    objects = entry["objects"]
    if not isinstance(objects, list) or not 1 <= len(objects) <= MAX_OBJECTS:
        got = len(objects) if isinstance(objects, list) else type(objects).__name__
        raise ClevrFormatError(f"{where}: objects must be a list of 1..{MAX_OBJECTS} objects, got {got}")
    parsed = []
    for j, obj in enumerate(objects):
        at = f"{where}, object {j}"
        if not isinstance(obj, dict):
            raise ClevrFormatError(f"{at}: expected an object, got {type(obj).__name__}")
        o: dict[str, Any] = {}
        for attr, allowed in ATTRIBUTES.items():
            if attr not in obj:
                raise ClevrFormatError(f"{at}: missing key {attr!r}")
            if obj[attr] not in allowed:
                raise ClevrFormatError(f"{at}: {attr} {obj[attr]!r} is not one of {allowed}")
            o[attr] = obj[attr]
        for key in ("3d_coords", "pixel_coords"):
            if key not in obj:
                raise ClevrFormatError(f"{at}: missing key {key!r}")
            o[key] = _number_list(obj[key], 3, f"{at}, {key}")
        parsed.append(o)
    rel = entry["relationships"]
    if not isinstance(rel, dict) or set(RELATIONS) - set(rel):
        raise ClevrFormatError(f"{where}: relationships must map each of {RELATIONS} to lists, got {rel!r:.80}")
    n = len(parsed)
    for r in RELATIONS:
        lists = rel[r]
        if not isinstance(lists, list) or len(lists) != n:
            raise ClevrFormatError(f"{where}: relationships[{r!r}] must hold one list per object ({n})")
        for i, others in enumerate(lists):
            if not isinstance(others, list) or not all(
                isinstance(k, int) and not isinstance(k, bool) and 0 <= k < n and k != i for k in others
            ):
                raise ClevrFormatError(
                    f"{where}: relationships[{r!r}][{i}] = {others!r} must list other object indices in 0..{n - 1}"
                )
    directions = entry.get("directions", {"right": [1.0, 0.0, 0.0], "front": [0.0, -1.0, 0.0]})
    if not isinstance(directions, dict) or not {"right", "front"} <= set(directions):
        raise ClevrFormatError(f"{where}: directions must give 'right' and 'front' vectors")
    dirs = {k: _number_list(directions[k], 3, f"{where}, directions[{k!r}]") for k in ("right", "front")}
    return Scene(index, parsed, {r: rel[r] for r in RELATIONS}, dirs, str(entry.get("image_filename", "")))


def read_scenes(path: str | os.PathLike) -> dict[int, Scene]:
    """Read a CLEVR scene file (gzip JSON with a ``scenes`` list) into ``{image_index: Scene}``.

    :raises ClevrFormatError: naming the file, the scene and the object of a malformed entry.
    """
    data = _load_json_gz(path)
    if not isinstance(data, dict) or not isinstance(data.get("scenes"), list):
        raise ClevrFormatError(f"{path}: expected an object with a 'scenes' list")
    scenes: dict[int, Scene] = {}
    for k, entry in enumerate(data["scenes"]):
        scene = parse_scene(entry, f"{path}: scene {k}")
        if scene.index in scenes:
            raise ClevrFormatError(f"{path}: scene {k}: duplicate image_index {scene.index}")
        scenes[scene.index] = scene
    return scenes


def answer_string(value: Any) -> str:
    """A CLEVR answer as a string of :data:`ANSWERS`: booleans -> ``yes`` / ``no``, integers -> digits."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return {"true": "yes", "false": "no"}.get(value.lower(), value.lower())
    raise ValueError(f"an answer must be a boolean, an integer or a string, got {value!r}")


def family_of(template_filename: str) -> str:
    """``"1_same_relate_restricted.json"`` -> ``"same_relate"``."""
    name = Path(template_filename).stem
    name = re.sub(r"^\d+_", "", name).removesuffix("_restricted")
    return name


def gold_object(program: list[dict[str, Any]]) -> int:
    """The object a ``query_*`` program reads its answer from (the ``_output`` of its input), else ``-1``."""
    if not program or not str(program[-1].get("type", "")).startswith("query_"):
        return -1
    inputs = program[-1].get("inputs", [])
    if len(inputs) != 1 or not isinstance(inputs[0], int) or not 0 <= inputs[0] < len(program) - 1:
        raise ValueError(f"query node must have one input node before it, got inputs {inputs!r}")
    obj = program[inputs[0]].get("_output")
    if not isinstance(obj, int) or isinstance(obj, bool):
        raise ValueError(f"the node queried must output one object (an int), got {obj!r}")
    return obj


def read_questions(path: str | os.PathLike) -> list[ClevrQuestion]:
    """Read a CLEVR question file (gzip JSON with a ``questions`` list) into (question, scene, answer) triples.

    :raises ClevrFormatError: naming the file and question of a malformed entry (missing key, lists of different
        lengths, an answer that is not a boolean / integer / string, a query node that does not read one object).
    """
    data = _load_json_gz(path)
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ClevrFormatError(f"{path}: expected an object with a 'questions' list")
    out = []
    for k, q in enumerate(data["questions"]):
        where = f"{path}: question {k}"
        if not isinstance(q, dict):
            raise ClevrFormatError(f"{where}: expected an object, got {type(q).__name__}")
        for key in ("question", "image_indices", "answers", "program"):
            if key not in q:
                raise ClevrFormatError(f"{where}: missing key {key!r}")
        text, images, answers, programs = q["question"], q["image_indices"], q["answers"], q["program"]
        if not isinstance(text, str) or not text.strip():
            raise ClevrFormatError(f"{where}: 'question' must be a non-empty string, got {text!r}")
        if not all(isinstance(v, list) for v in (images, answers, programs)) or not (
            len(images) == len(answers) == len(programs)
        ):
            lens = [len(v) if isinstance(v, list) else type(v).__name__ for v in (images, answers, programs)]
            raise ClevrFormatError(
                f"{where}: image_indices, answers and program must be lists of equal length, got {lens}"
            )
        family = family_of(q.get("template_filename", Path(path).name.split("_1_")[-1]))
        for j, (image, answer, program) in enumerate(zip(images, answers, programs, strict=True)):
            at = f"{where}, scene {j}"
            if not isinstance(image, int) or isinstance(image, bool) or image < 0:
                raise ClevrFormatError(f"{at}: image index must be a non-negative integer, got {image!r}")
            try:
                ans = answer_string(answer)
                if not isinstance(program, list) or not all(isinstance(n, dict) and "type" in n for n in program):
                    raise ValueError("program must be a list of nodes with a 'type'")
                gold = gold_object(program)
            except ValueError as error:
                raise ClevrFormatError(f"{at}: {error}") from None
            if ans not in ANSWERS:
                raise ClevrFormatError(f"{at}: answer {answer!r} is not a CLEVR answer ({ANSWERS})")
            out.append(
                ClevrQuestion(text, image, ans, family, program, gold, int(q.get("template_index", -1)), "original")
            )
    return out


def clevr_dir(root: str | os.PathLike) -> Path:
    """``root/clevr-scenes`` if it exists, else ``root`` when it holds the scene files itself."""
    root = Path(root)
    if (root / "clevr-scenes").is_dir():
        return root / "clevr-scenes"
    if any(root.glob("CLEVR_*_scenes_*.json.gz")):
        return root
    raise FileNotFoundError(
        f"no CLEVR scenes under {root} (expected {root / 'clevr-scenes'} or CLEVR_*_scenes_*.json.gz)"
    )


def load_clevr(root: str | os.PathLike, split: str) -> tuple[dict[int, Scene], list[ClevrQuestion]]:
    """Read the scenes and the original questions of ``split`` (``train`` or ``val``) under ``root``.

    Every question's scene must exist and its query must name an object of that scene whose attribute is the
    answer (checked).
    """
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    folder = clevr_dir(root)
    scene_files = sorted(folder.glob(f"CLEVR_{split}_scenes_*.json.gz"))
    if not scene_files:
        raise FileNotFoundError(f"no CLEVR_{split}_scenes_*.json.gz in {folder}")
    scenes: dict[int, Scene] = {}
    for path in scene_files:
        scenes.update(read_scenes(path))
    question_files = sorted((folder / "questions").glob(f"CLEVR_{split}_*.json.gz"))
    if not question_files:
        raise FileNotFoundError(f"no questions/CLEVR_{split}_*.json.gz in {folder}")
    questions = []
    for path in question_files:
        for q in read_questions(path):
            check_question(q, scenes, str(path))
            questions.append(q)
    return scenes, questions


def check_question(q: ClevrQuestion, scenes: dict[int, Scene], where: str = "question") -> None:
    """Raise :class:`ClevrFormatError` if ``q``'s scene is missing or its gold object does not hold the answer."""
    if q.image_index not in scenes:
        raise ClevrFormatError(f"{where}: {q.text!r} refers to scene {q.image_index}, which is not in the scene file")
    scene = scenes[q.image_index]
    if q.gold >= 0:
        if q.gold >= len(scene):
            raise ClevrFormatError(
                f"{where}: {q.text!r} (scene {q.image_index}) queries object {q.gold} of a scene with {len(scene)}"
            )
        attr = q.program[-1]["type"].removeprefix("query_") if q.program else ""
        if attr in ATTRIBUTES and scene.objects[q.gold][attr] != q.answer:
            raise ClevrFormatError(
                f"{where}: {q.text!r} (scene {q.image_index}) answer {q.answer!r} differs from the {attr} "
                f"{scene.objects[q.gold][attr]!r} of the object its program queries ({q.gold})"
            )


# ----------------------------------------------------------------------------------------------------------------
# Region features and encoding


def region_features(scene: Scene) -> torch.Tensor:
    """``(n, len(FEATURES))`` features of the scene's objects (the encoding is in the module docstring)."""
    rows = []
    right, front = scene.directions["right"], scene.directions["front"]
    for o in scene.objects:
        onehot = [
            float(o[a] == v)
            for a, values in (("color", COLORS), ("size", SIZES), ("shape", SHAPES), ("material", MATERIALS))
            for v in values
        ]
        x, y, z = o["3d_coords"]
        px, py, depth = o["pixel_coords"]
        rows.append(
            onehot
            + [
                x / 3.0,
                y / 3.0,
                (x * right[0] + y * right[1] + z * right[2]) / 3.0,
                (x * front[0] + y * front[1] + z * front[2]) / 3.0,
                px / 480.0,
                py / 320.0,
                depth / 16.0,
            ]
        )
    return torch.tensor(rows, dtype=torch.float32)


def tokenize(text: str) -> list[str]:
    """Lower-cased words; punctuation dropped."""
    return re.findall(r"[a-z0-9]+", text.lower())


@dataclass
class ClevrDataset(RegionQADataset):
    """A CLEVR region-QA split: a :class:`RegionQADataset` that also keeps its :class:`ClevrQuestion` triples."""

    questions: list[ClevrQuestion] = field(default_factory=list)

    def families(self) -> list[str]:
        return [q.family for q in self.questions]


def encode_questions(questions: list[ClevrQuestion], scenes: dict[int, Scene], vocab: Vocab) -> ClevrDataset:
    """Encode triples as a :class:`ClevrDataset` (regions padded to :data:`MAX_OBJECTS`; answers: :data:`ANSWERS`)."""
    if not questions:
        raise ValueError("encode_questions: no questions")
    answer_id = {a: i for i, a in enumerate(ANSWERS)}
    tokens = [vocab.encode(tokenize(q.text)) for q in questions]
    B, L, F = len(questions), max(len(t) for t in tokens), len(FEATURES)
    regions = torch.zeros(B, MAX_OBJECTS, F)
    mask = torch.zeros(B, MAX_OBJECTS, dtype=torch.bool)
    question = torch.zeros(B, L, dtype=torch.long)
    answer = torch.zeros(B, dtype=torch.long)
    gold = torch.full((B,), -1, dtype=torch.long)
    cache: dict[int, torch.Tensor] = {}
    names = []
    for i, (q, ids) in enumerate(zip(questions, tokens, strict=True)):
        check_question(q, scenes)
        scene = scenes[q.image_index]
        if q.image_index not in cache:
            cache[q.image_index] = region_features(scene)
        n = len(scene)
        regions[i, :n] = cache[q.image_index]
        mask[i, :n] = True
        question[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        if q.answer not in answer_id:
            raise ValueError(f"question {i} ({q.text!r}): answer {q.answer!r} is not in ANSWERS")
        answer[i] = answer_id[q.answer]
        gold[i] = q.gold
        names.append([scene.object_name(j) for j in range(n)])
    data = RegionBatch(regions, mask, question, answer, gold)
    data.validate(len(ANSWERS), len(vocab))
    return ClevrDataset(data, list(vocab.itos), list(ANSWERS), names, questions)


# ----------------------------------------------------------------------------------------------------------------
# Executing CLEVR programs


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


# ----------------------------------------------------------------------------------------------------------------
# Generating questions with the CLEVR template families

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
    if kind == "count":
        p.add("count", [node])
        text = rng.choice(
            [
                f"there is a {a_text}; how many {things} are {rel} it?",
                f"what number of {things} are {rel} the {a_text}?",
            ]
        )
    else:
        p.add("exist", [node])
        text = rng.choice(
            [f"there is a {a_text}; are there any {things} {rel} it?", f"are there any {things} {rel} the {a_text}?"]
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
    if kind == "count":
        p.add("count", [node])
        text = rng.choice(
            [
                f"how many other {things} are the same {same} as the {a_text}?",
                f"what number of other {things} have the same {same} as the {a_text}?",
            ]
        )
    else:
        p.add("exist", [node])
        text = rng.choice(
            [f"are there any other {things} that have the same {same} as the {a_text}?"]
            + ([f"is there anything else that is the same {same} as the {a_text}?"] if not spec else [])
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


# ----------------------------------------------------------------------------------------------------------------
# The splits of the experiment


@dataclass
class ClevrSplits:
    """Training data (original + generated training questions) and the two validation sets, one vocabulary."""

    train: ClevrDataset
    val_original: ClevrDataset
    val_generated: ClevrDataset | None  # None when no validation questions are generated
    vocab: Vocab


def clevr_splits(
    root: str | os.PathLike,
    generated_train: int = 8000,
    generated_val: int = 1000,
    seed: int = 0,
    original_train: bool = True,
) -> ClevrSplits:
    """Read the CLEVR scenes and questions under ``root`` and build the experiment's splits.

    :param generated_train: questions generated over the training scenes (seed ``seed``), added to the
        original training questions (unless ``original_train`` is false).
    :param generated_val: questions generated over the validation scenes (seed ``seed + 1``), a split of its own
        (``0``: none, ``val_generated`` is ``None``).
    """
    train_scenes, train_q = load_clevr(root, "train")
    val_scenes, val_q = load_clevr(root, "val")
    generated = generate_questions(train_scenes, generated_train, seed=seed)
    train_all = (train_q if original_train else []) + generated
    if not train_all:
        raise ValueError("clevr_splits: no training questions (original_train=False and generated_train=0)")
    vocab = Vocab.build(tokenize(q.text) for q in train_all)
    val_gen = generate_questions(val_scenes, generated_val, seed=seed + 1)
    return ClevrSplits(
        encode_questions(train_all, train_scenes, vocab),
        encode_questions(val_q, val_scenes, vocab),
        encode_questions(val_gen, val_scenes, vocab) if val_gen else None,
        vocab,
    )
