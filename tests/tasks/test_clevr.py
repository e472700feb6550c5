"""CLEVR scene graphs as region QA: reader errors, features, executor, generator, a tiny training run.

Tests marked by ``_real_data()`` read ../shared/data/clevr-scenes (or ``$PYRO_ATTENTION_DATA``) and skip with a
reason when it is absent; the rest build small scene and question files in a temporary folder.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import torch

from pyro_attention.data.clevr import (
    ANSWERS,
    FEATURES,
    MAX_OBJECTS,
    ClevrFormatError,
    ClevrQuestion,
    Scene,
    answer_string,
    check_question,
    encode_questions,
    execute,
    family_of,
    generate_questions,
    load_clevr,
    parse_scene,
    read_questions,
    read_scenes,
    region_features,
    tokenize,
)
from pyro_attention.data.corpora import DATA_ENV
from pyro_attention.data.text import Vocab
from tests.support.paths import REPO


def _object(color="red", size="small", shape="cube", material="rubber", xy=(0.0, 0.0)):
    return {
        "color": color,
        "size": size,
        "shape": shape,
        "material": material,
        "3d_coords": [xy[0], xy[1], 0.35],
        "pixel_coords": [240, 160, 10.0],
        "rotation": 0.0,
    }


def _scene_entry(index=0):
    """Three objects on a line: 0 left of 1 left of 2 (``right`` grows with x); 0 is behind the others."""
    objects = [
        _object("red", "small", "cube", "rubber", (-2.0, 0.0)),
        _object("blue", "large", "sphere", "metal", (0.0, 1.0)),
        _object("red", "large", "cylinder", "metal", (2.0, 2.0)),
    ]
    return {
        "image_index": index,
        "image_filename": f"CLEVR_test_{index:06d}.png",
        "objects": objects,
        "relationships": {
            "right": [[1, 2], [2], []],
            "left": [[], [0], [0, 1]],
            "front": [[1, 2], [2], []],
            "behind": [[], [0], [0, 1]],
        },
        "directions": {"right": [1.0, 0.0, 0.0], "front": [0.0, 1.0, 0.0]},
    }


def _write(path: Path, data) -> Path:  # noqa: ANN001
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    return path


def _question(text="What color is the sphere?", answers=("blue",), program=None):
    program = program or [
        {"type": "scene", "inputs": [], "value_inputs": [], "_output": [0, 1, 2]},
        {"type": "filter_shape", "inputs": [0], "value_inputs": ["sphere"], "_output": [1]},
        {"type": "unique", "inputs": [1], "value_inputs": [], "_output": 1},
        {"type": "query_color", "inputs": [2], "value_inputs": [], "_output": "blue"},
    ]
    return {
        "question": text,
        "image_indices": [0] * len(answers),
        "answers": list(answers),
        "program": [program] * len(answers),
        "template_filename": "1_zero_hop.json",
        "template_index": 4,
    }


@pytest.fixture
def scene() -> Scene:
    return parse_scene(_scene_entry())


# ----------------------------------------------------------------------------------------------------------------
# Reader


def test_read_scenes_and_questions(tmp_path, scene):
    scenes = read_scenes(_write(tmp_path / "s.json.gz", {"info": {}, "scenes": [_scene_entry(0), _scene_entry(7)]}))
    assert sorted(scenes) == [0, 7] and len(scenes[7]) == 3
    assert scenes[0].object_name(1) == "large blue metal sphere"
    qs = read_questions(_write(tmp_path / "q.json.gz", {"questions": [_question(answers=("blue", "blue"))]}))
    assert len(qs) == 2 and qs[0].answer == "blue" and qs[0].gold == 1 and qs[0].family == "zero_hop"
    check_question(qs[0], scenes)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda s: s.pop("objects"), "scene 0: missing key 'objects'"),
        (lambda s: s["objects"][1].pop("color"), "scene 0, object 1: missing key 'color'"),
        (lambda s: s["objects"][2].update(shape="cone"), "object 2: shape 'cone' is not one of"),
        (lambda s: s["objects"][0].update({"3d_coords": [1.0, "x", 0.0]}), "object 0, 3d_coords: expected a list"),
        (lambda s: s["objects"][0].update({"pixel_coords": [1.0, 2.0]}), "pixel_coords: expected a list of 3"),
        (lambda s: s["relationships"]["left"][1].append(5), r"relationships\['left'\]\[1\]"),
        (lambda s: s["relationships"].pop("front"), "relationships must map each of"),
        (lambda s: s.update(image_index=-1), "image_index must be a non-negative integer"),
        (lambda s: s.update(objects=[]), "objects must be a list of 1..10 objects"),
    ],
)
def test_scene_errors_name_the_entry(tmp_path, edit, message):
    entry = _scene_entry()
    edit(entry)
    path = _write(tmp_path / "bad.json.gz", {"scenes": [entry]})
    with pytest.raises(ClevrFormatError, match=message) as info:
        read_scenes(path)
    assert str(path) in str(info.value)


def test_scene_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_scenes(tmp_path / "missing.json.gz")
    plain = tmp_path / "plain.json.gz"
    plain.write_text("{}")
    with pytest.raises(ClevrFormatError, match="not a readable gzip file"):
        read_scenes(plain)
    with gzip.open(tmp_path / "broken.json.gz", "wt") as f:
        f.write("{not json")
    with pytest.raises(ClevrFormatError, match="not valid JSON"):
        read_scenes(tmp_path / "broken.json.gz")
    with pytest.raises(ClevrFormatError, match="'scenes' list"):
        read_scenes(_write(tmp_path / "q.json.gz", {"questions": []}))
    dup = _write(tmp_path / "dup.json.gz", {"scenes": [_scene_entry(3), _scene_entry(3)]})
    with pytest.raises(ClevrFormatError, match="duplicate image_index 3"):
        read_scenes(dup)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda q: q.pop("answers"), "question 0: missing key 'answers'"),
        (lambda q: q.update(answers=["blue", "red"]), "must be lists of equal length"),
        (lambda q: q.update(answers=[1.5]), "scene 0: an answer must be a boolean, an integer or a string"),
        (lambda q: q.update(answers=["banana"]), "answer 'banana' is not a CLEVR answer"),
        (lambda q: q.update(question=""), "'question' must be a non-empty string"),
        (lambda q: q["program"][0][2].update(_output=[1, 2]), "must output one object"),
        (lambda q: q.update(image_indices=["0"]), "image index must be a non-negative integer"),
    ],
)
def test_question_errors_name_the_entry(tmp_path, edit, message):
    q = _question()
    q["program"] = [json.loads(json.dumps(p)) for p in q["program"]]
    edit(q)
    with pytest.raises(ClevrFormatError, match=message):
        read_questions(_write(tmp_path / "q.json.gz", {"questions": [q]}))


def test_question_checked_against_its_scene(tmp_path, scene):
    wrong = read_questions(_write(tmp_path / "q.json.gz", {"questions": [_question(answers=("red",))]}))[0]
    with pytest.raises(ClevrFormatError, match="answer 'red' differs from the color 'blue'"):
        check_question(wrong, {0: scene})
    with pytest.raises(ClevrFormatError, match="refers to scene 0, which is not in the scene file"):
        check_question(wrong, {5: scene})


def test_answers_and_families():
    assert [answer_string(a) for a in (True, False, 3, "Metal")] == ["yes", "no", "3", "metal"]
    assert family_of("1_same_relate_restricted.json") == "same_relate" and family_of("1_zero_hop.json") == "zero_hop"
    assert len(set(ANSWERS)) == len(ANSWERS) == 28
    assert tokenize("There is a red cube; what size is it?") == "there is a red cube what size is it".split()


# ----------------------------------------------------------------------------------------------------------------
# Features, encoding, executor, generator


def test_region_features(scene):
    f = region_features(scene)
    assert f.shape == (3, len(FEATURES)) == (3, 22)
    # one-hot groups: colour 8, size 2, shape 3, material 2
    for lo, hi in ((0, 8), (8, 10), (10, 13), (13, 15)):
        assert torch.equal(f[:, lo:hi].sum(-1), torch.ones(3))
    assert f[1, FEATURES.index("color=blue")] == 1 and f[2, FEATURES.index("shape=cylinder")] == 1
    right = f[:, FEATURES.index("right/3")]
    assert right[0] < right[1] < right[2]  # the scene's "right" relation is an order on this column


def test_encode_questions_shapes(scene):
    qs = [
        ClevrQuestion("What color is the sphere?", 0, "blue", "zero_hop", [], gold=1),
        ClevrQuestion("How many red cubes are there?", 0, "1", "zero_hop", []),
    ]
    vocab = Vocab.build(tokenize(q.text) for q in qs[:1])
    data = encode_questions(qs, {0: scene}, vocab)
    b = data.data
    assert b.regions.shape == (2, MAX_OBJECTS, 22) and b.region_mask.sum(-1).tolist() == [3, 3]
    assert b.question.shape == (2, 6) and b.question[0, 5] == 0  # padded with <pad> = 0
    assert int((b.question[1] == vocab.unk_index).sum()) == 6  # no word of it is in the vocabulary
    assert vocab.decode(b.question[0]) == ["what", "color", "is", "the", "sphere"]
    assert b.answer.tolist() == [ANSWERS.index("blue"), ANSWERS.index("1")] and b.gold.tolist() == [1, -1]
    assert data.region_names[0][1] == "large blue metal sphere" and data.families() == ["zero_hop"] * 2


def test_execute(scene):
    def node(t, inputs=(), values=()):
        return {"type": t, "inputs": list(inputs), "value_inputs": list(values)}

    one_hop = [node("scene"), node("filter_shape", [0], ["cube"]), node("unique", [1]), node("relate", [2], ["right"])]
    assert execute([*one_hop, node("count", [3])], scene)[-1] == 2
    same = [node("scene"), node("filter_shape", [0], ["sphere"]), node("unique", [1]), node("same_size", [2])]
    assert execute(same, scene)[-1] == [2]
    compare = [node("scene"), node("filter_color", [0], ["red"]), node("count", [1])]
    compare += [node("scene"), node("filter_material", [3], ["metal"]), node("count", [4]), node("less_than", [2, 5])]
    assert execute(compare, scene)[-1] is False
    with pytest.raises(ValueError, match="unique"):
        execute([node("scene"), node("filter_color", [0], ["red"]), node("unique", [1])], scene)


def test_generator_is_seeded_and_exact(scene):
    scenes = {0: scene, 1: parse_scene(_scene_entry(1))}
    a, b = generate_questions(scenes, 60, seed=3), generate_questions(scenes, 60, seed=3)
    assert [q.text for q in a] == [q.text for q in b] and [q.text for q in a] != [
        q.text for q in generate_questions(scenes, 60, seed=4)
    ]
    assert {q.family for q in a} == {"zero_hop", "one_hop", "same_relate", "single_or", "compare_integer"}
    for q in a:
        assert q.answer in ANSWERS and q.source == "generated"
        assert answer_string(execute(q.program, scenes[q.image_index])[-1]) == q.answer
        check_question(q, scenes)  # a query's gold object holds the answer
        assert (q.gold >= 0) == q.program[-1]["type"].startswith("query_")
    with pytest.raises(ValueError, match="unknown question families"):
        generate_questions(scenes, 1, families=["two_hop"])


# ----------------------------------------------------------------------------------------------------------------
# The real data beside the project (skipped when absent)


def _real_data() -> Path:
    env = os.environ.get(DATA_ENV)
    for root in ([Path(env)] if env else []) + [REPO.parent / "shared" / "data"]:
        if (root / "clevr-scenes").is_dir():
            return root
    pytest.skip(f"CLEVR scenes not found: no clevr-scenes/ under ../shared/data or ${DATA_ENV}")


def test_real_clevr_counts_and_programs():
    root = _real_data()
    for split, n_scenes, n_questions in (("train", 1000, 565), ("val", 500, 275)):
        scenes, questions = load_clevr(root, split)
        assert len(scenes) == n_scenes and len(questions) == n_questions
        assert {len(s) for s in scenes.values()} <= set(range(3, 11))
        assert any(q.gold >= 0 for q in questions)
        # our executor reproduces every node output of the original programs that carry all their values
        complete = [
            q
            for q in questions
            if not any(n["type"].startswith(("filter_", "relate")) and not n["value_inputs"] for n in q.program)
        ]
        assert len(complete) > n_questions // 2
        for q in complete:
            outs = execute(q.program, scenes[q.image_index])
            assert outs == [n["_output"] for n in q.program], q.text


def test_real_clevr_tiny_training_run():
    from pyro_attention.tasks.clevr import ClevrConfig, format_clevr, run_clevr

    config = ClevrConfig(
        data_dir=str(_real_data()),
        generated_train=32,
        generated_val=40,
        hidden_size=8,
        epochs=1,
        batch_size=64,
        rows=[("soft", None), ("variational", "enum")],
    )
    result = run_clevr(config, progress=False, log=lambda *_: None)
    splits = result.splits
    assert len(splits.train) == 565 + 32 and len(splits.val_original) == 275 and len(splits.val_generated) == 40
    assert splits.train.data.regions.shape[1:] == (MAX_OBJECTS, 22)
    assert [r.name for r in result.original] == [r.name for r in result.generated] == ["soft", "variational (enum)"]
    for r in result.original + result.generated:
        assert 0 < r.nll < 10 and 0 <= r.accuracy <= 1
    assert set(result.original[1].gold) == {"prior", "posterior", "guide"}  # alignment accuracy is scored
    text = format_clevr(result)
    assert "Original CLEVR validation questions (275" in text and "| variational (sample) | 1.75 | 57.52 |" in text


@pytest.mark.slow  # ~18 s: all seven rows; examples/clevr_qa.py's tiny run covers the same code by default
def test_demo_task_clevr(capsys, tmp_path):
    from pyro_attention import cli

    args = ["demo", "--task", "clevr", "--data-dir", str(_real_data()), "--train-size", "16", "--val-size", "16"]
    args += ["--hidden", "8", "--epochs", "1", "--num-plots", "1", "--out", str(tmp_path), "--quiet"]
    assert cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "| hard (sample) |" in printed and "| relaxed | ~" in printed
    assert (tmp_path / "clevr_alignments.png").read_bytes()[:4] == b"\x89PNG"


def test_demo_rejects_unknown_task(capsys):
    from pyro_attention import cli

    with pytest.raises(SystemExit):
        cli.main(["demo", "--task", "vqa"])
    assert "invalid choice: 'vqa' (choose from 'synthetic', 'clevr')" in capsys.readouterr().err


def test_demo_clevr_missing_data(capsys, tmp_path):
    from pyro_attention import cli

    assert cli.main(["demo", "--task", "clevr", "--data-dir", str(tmp_path / "nowhere"), "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err
