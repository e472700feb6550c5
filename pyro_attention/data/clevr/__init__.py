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

**Modules.**  ``scenes`` (the dataset's vocabularies, :class:`Scene`, :class:`ClevrQuestion`, the readers),
``encoding`` (region features, questions as a region-QA dataset), ``programs`` (the executor), ``generate`` (the
template families) and ``splits`` (the experiment's splits); their public names are importable from this package.
"""

from __future__ import annotations

from pyro_attention.data.clevr.encoding import (
    ClevrDataset,
    encode_questions,
    region_features,
    tokenize,
)
from pyro_attention.data.clevr.generate import (
    generate_questions,
)
from pyro_attention.data.clevr.programs import (
    execute,
)
from pyro_attention.data.clevr.scenes import (
    ANSWERS,
    ATTRIBUTES,
    COLORS,
    FAMILIES,
    FEATURES,
    MATERIALS,
    MAX_COUNT,
    MAX_OBJECTS,
    RELATIONS,
    SHAPES,
    SIZES,
    ClevrFormatError,
    ClevrQuestion,
    Scene,
    answer_string,
    check_question,
    clevr_dir,
    family_of,
    gold_object,
    load_clevr,
    parse_scene,
    read_questions,
    read_scenes,
)
from pyro_attention.data.clevr.splits import (
    ClevrSplits,
    clevr_splits,
)

__all__ = [
    "ANSWERS",
    "ATTRIBUTES",
    "COLORS",
    "ClevrDataset",
    "ClevrFormatError",
    "ClevrQuestion",
    "ClevrSplits",
    "FAMILIES",
    "FEATURES",
    "MATERIALS",
    "MAX_COUNT",
    "MAX_OBJECTS",
    "RELATIONS",
    "SHAPES",
    "SIZES",
    "Scene",
    "answer_string",
    "check_question",
    "clevr_dir",
    "clevr_splits",
    "encode_questions",
    "execute",
    "family_of",
    "generate_questions",
    "gold_object",
    "load_clevr",
    "parse_scene",
    "read_questions",
    "read_scenes",
    "region_features",
    "tokenize",
]
