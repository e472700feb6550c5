"""CLEVR v1.0 scene graphs and questions: the vocabularies of the dataset (colours, sizes, shapes, materials,
relations, answers, region features), :class:`Scene` and :class:`ClevrQuestion`, and their readers with clear
errors."""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
