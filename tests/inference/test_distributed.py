"""Data-parallel training with ``torchrun`` (2 CPU processes, gloo) and crash-safe resumption under SIGKILL.

Every run here is a subprocess (``python -m pyro_attention train`` / ``torchrun -m pyro_attention train``) on
the synthetic corpus with tiny sizes and one torch thread per process.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyro
import pytest
import torch
import torch.distributed as dist
from pyro import poutine
from pyro.infer import Trace_ELBO
from pyro.poutine.util import site_is_subsample

from pyro_attention.inference import AlignmentRWS, distributed
from pyro_attention.inference.distributed import (
    DataParallelSVI,
    all_reduce_gradients,
    end_process,
    shard,
    sums_over_examples,
)
from pyro_attention.pair import AlignmentPair
from pyro_attention.registry import ALL_PAIRS, PAIR_ESTIMATORS, make_pair
from tests.support.autocast import bfloat16_products
from tests.support.toy_network import ToyBatch, ToyNetwork, make_toy_batch

TINY = [
    "--train-size", "48", "--val-size", "8", "--batch-size", "8", "--embedding", "8", "--encoder", "8",
    "--decoder", "16", "--attention", "8", "--threads", "1", "--quiet",
]  # fmt: skip
STEPS_PER_EPOCH = 6  # 48 pairs in batches of 8


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("WORLD_SIZE", None)
    return env


def _train_cmd(out: Path, *extra: str, nproc: int = 1) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}"]
    head = [*launcher, "-m", "pyro_attention"] if nproc > 1 else [sys.executable, "-m", "pyro_attention"]
    return [*head, "train", *TINY, "--out", str(out), *extra]


def _run(cmd: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _weights(path: Path) -> dict[str, torch.Tensor]:
    state = torch.load(path, weights_only=True)
    return {**state["network"], **{f"{k}.{n}": v for k, m in state["pair_modules"].items() for n, v in m.items()}}


@pytest.mark.parametrize(
    "model",
    [["--model", "marginal"], pytest.param(["--model", "segmentation"], marks=pytest.mark.slow)],
    ids=["marginal", "segmentation"],
)
def test_two_processes_match_one_over_the_same_global_batches(tmp_path, model):
    """Summed shard gradients = the global batch's gradient: after 12 Adam steps the parameters of a 2-process
    run equal a 1-process run's up to float32 summation order (measured: max |difference| ~1.5e-5; tolerance
    1e-4 absolute on weights of size ~1)."""
    _run(_train_cmd(tmp_path / "one", *model, "--epochs", "2"))
    two = _run(_train_cmd(tmp_path / "two", *model, "--epochs", "2", nproc=2))
    assert two.stdout.count("pyro-attention train:") == 1  # only process 0 speaks
    one, two = _weights(tmp_path / "one" / "last.pt"), _weights(tmp_path / "two" / "last.pt")
    assert one.keys() == two.keys()
    for key in one:
        assert torch.allclose(one[key], two[key], atol=1e-4, rtol=0), key
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == [".lock", "best.pt", "history.csv", "last.pt"]
    state = torch.load(tmp_path / "two" / "last.pt", weights_only=True)
    assert state["world_size"] == 2 and len(state["rng_ranks"]) == 2


def test_two_processes_with_the_reinforce_estimator(tmp_path):
    """The REINFORCE path (no differentiable_loss) trains data-parallel too: gradients, not losses, are reduced.
    With ``--checkpoint-minutes`` near zero every step writes ``last.pt``: process 0's clock decides for both, so
    both take part in the checkpoint's collective (deciding apart, one would wait for the other forever)."""
    va = ["--model", "variational", "--estimator", "sample", "--checkpoint-minutes", "1e-9"]
    done = _run(_train_cmd(tmp_path / "va", *va, "--epochs", "1", nproc=2))
    assert "epoch 1/1 step 6" in done.stdout
    with pytest.raises(AssertionError, match="written by 2 process"):  # resuming needs the same process count
        _run(_train_cmd(tmp_path / "va", *va, "--epochs", "2", "--resume"))


def _gradient_worker(rank: int, world_size: int, path: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world_size)
    a, b, c = (torch.zeros(2, requires_grad=True) for _ in range(3))
    a.grad = torch.full((2,), float(rank + 1))  # both ranks: summed
    if rank == 1:
        b.grad = torch.ones(2)  # only rank 1: the sum counts rank 0 as zero
    all_reduce_gradients([a, b, c])
    assert torch.equal(a.grad, torch.full((2,), 3.0)) and torch.equal(b.grad, torch.ones(2)) and c.grad is None
    end_process(0)  # as the package's own runs end: left to the interpreter, gloo aborted now and then (SIGABRT)


def test_all_reduce_gradients_sums_and_keeps_missing_ones_missing(tmp_path):
    context = torch.multiprocessing.spawn(_gradient_worker, args=(2, str(tmp_path / "rendezvous")), nprocs=2,
                                          join=False)
    deadline = time.monotonic() + 120  # a rank stuck in a collective must fail the test, not hang the suite
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            alive = [p.pid for p in context.processes if p.exitcode is None]
            pytest.fail(f"two gloo processes did not finish all_reduce_gradients in 120 s (exit codes "
                        f"{[p.exitcode for p in context.processes]}, killed {alive})")


def _kill_after(cmd: list[str], csv: Path, steps: int, timeout: float = 300) -> bool:
    """Start ``cmd``; SIGKILL it once ``history.csv`` shows ``steps`` step rows. False if it finished first."""
    proc = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if csv.is_file() and csv.read_text().count("\nstep,") >= steps:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        time.sleep(0.02)
    if proc.poll() is None:  # pragma: no cover - a hung run
        proc.kill()
        raise TimeoutError(" ".join(cmd))
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    return False


def _kill_and_resume(tmp_path: Path, kills: int, seed: int) -> None:
    """Kill a run ``kills`` times at random steps, resume each time; the final weights are bit-identical to an
    uninterrupted run's (sampling estimator and dropout, so RNG states must be restored exactly)."""
    extra = ["--model", "variational", "--estimator", "sample", "--dropout", "0.1", "--epochs", "2",
             "--checkpoint-every", "1"]  # fmt: skip
    _run(_train_cmd(tmp_path / "whole", *extra))
    out, csv = tmp_path / "killed", tmp_path / "killed" / "history.csv"
    rng = random.Random(seed)
    at = sorted(rng.sample(range(1, 2 * STEPS_PER_EPOCH), kills))
    killed = 0
    for steps in at:
        resume = ["--resume"] if (out / "last.pt").is_file() else []
        killed += _kill_after(_train_cmd(out, *extra, *resume), csv, steps)
    _run(_train_cmd(out, *extra, *(["--resume"] if (out / "last.pt").is_file() else [])))
    assert killed >= 1
    whole, resumed = _weights(tmp_path / "whole" / "last.pt"), _weights(out / "last.pt")
    assert whole.keys() == resumed.keys()
    for key in whole:
        assert torch.equal(whole[key], resumed[key]), key
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_sigkill_three_times_then_resume_is_bit_identical(tmp_path):
    _kill_and_resume(tmp_path, kills=3, seed=0)


@pytest.mark.slow
def test_sigkill_ten_times_then_resume_is_bit_identical(tmp_path):
    _kill_and_resume(tmp_path, kills=10, seed=1)


def test_tensorboard_logging_when_installed_and_a_clear_error_when_not(tmp_path):
    from pyro_attention.tasks.translation import TranslationConfig, train

    config = TranslationConfig(
        train_size=8, val_size=4, batch_size=8, embedding=8, encoder=8, decoder=8, attention=8, epochs=1,
        out=str(tmp_path / "tb"), tensorboard=True,
    )  # fmt: skip
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="tensorboard: the 'tensorboard' package is not installed"):
            train(config, progress=False, log=None)
        # the default (None) trains without it; the CSV still logs every step
        train(config.replace(tensorboard=None, out=str(tmp_path / "csv")), progress=False, log=None)
        assert (tmp_path / "csv" / "history.csv").read_text().count("\nstep,") == 1
        return
    train(config, progress=False, log=None)
    assert list((tmp_path / "tb" / "tensorboard").glob("events.out.tfevents.*"))


def _draws(trace: poutine.Trace, rows: torch.Tensor | None = None) -> poutine.Trace:
    """The draws of ``trace`` as constants to replay, each cut to ``rows`` of its ``"batch"`` plate (a shard's own
    draws); enumerated sites are left out (nothing is drawn there: they are enumerated again)."""
    draws = trace.copy()
    for name, site in list(draws.nodes.items()):
        if site["type"] != "sample" or site_is_subsample(site) or site["infer"].get("enumerate"):
            draws.remove_node(name)  # a plate's indices (the shard's size) or an enumerated site
            continue
        frame = next((f for f in site["cond_indep_stack"] if f.name == "batch"), None)
        value = site["value"].detach()
        if rows is not None and frame is not None:
            value = value.index_select(frame.dim - site["fn"].event_dim, rows)
        infer = dict(site["infer"])
        if "baseline" in infer:  # replayed with the draw: the shard's rows of the soft baseline
            baseline = infer["baseline"]["baseline_value"].detach()
            infer["baseline"] = {"baseline_value": baseline if rows is None else baseline.index_select(frame.dim, rows)}
        draws.nodes[name] = {**site, "value": value, "infer": infer}
    return draws


def _loss_and_grads_replayed(pair: AlignmentPair, elbo, batch: ToyBatch, trace: poutine.Trace) -> tuple[float, list]:
    for p in pair.parameters():
        p.grad = None
    loss = elbo.loss_and_grads(pair.model, poutine.replay(pair.guide, trace=trace), batch)
    return float(loss), [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in pair.parameters()]


def _shard_gaps(name: str, estimator: str | None, elbo_of=None) -> tuple[float, float]:  # noqa: ANN001
    """|sum of two shards' loss - the global batch's| (relative) and max |sum of their gradients - the global
    batch's|, on a toy batch of 4 with the global batch's draws replayed (a shard takes its own rows of them)."""
    torch.manual_seed(0)
    pair = make_pair(name, ToyNetwork(), estimator)
    batch = make_toy_batch(B=4, S=3, T=2, seed=0)
    elbo = pair.elbo() if elbo_of is None else elbo_of(pair)
    for module_name, module in pair.modules().items():
        pyro.module(module_name, module)
    recorder = poutine.trace(pair.guide)
    pyro.set_rng_seed(1)
    elbo.loss_and_grads(pair.model, recorder, batch)  # the global batch's draws (particles included)
    shards = [torch.arange(rank, 4, 2) for rank in range(2)]  # the rows shard(batch, rank, 2) takes
    # replayed draws skip the broadcast of the particles' plate (outside the replay): Pyro's model/guide shape
    # check would see the guide's distribution without it (the values and log-densities do have it)
    with pyro.validation_enabled(not getattr(elbo, "vectorize_particles", False)):
        whole_loss, whole = _loss_and_grads_replayed(pair, elbo, batch, _draws(recorder.trace))
        parts = [_loss_and_grads_replayed(pair, elbo, shard(batch, rank, 2), _draws(recorder.trace, rows))
                 for rank, rows in enumerate(shards)]
    assert any(g.abs().sum() > 0 for g in whole)
    loss_gap = abs(parts[0][0] + parts[1][0] - whole_loss) / abs(whole_loss)
    grad_gap = max(float((g0 + g1 - g).abs().max()) for g, g0, g1 in zip(whole, parts[0][1], parts[1][1], strict=True))
    return loss_gap, grad_gap


ESTIMATOR_CASES = [(n, e) for n in ALL_PAIRS for e in PAIR_ESTIMATORS.get(n, (None,))]


@pytest.mark.parametrize("name,estimator", ESTIMATOR_CASES, ids=[f"{n}-{e}" if e else n for n, e in ESTIMATOR_CASES])
def test_shard_gradients_sum_to_the_global_batch_gradient_with_the_same_draws(float64, name, estimator):
    """What ``DataParallelSVI`` relies on, for every pair and estimator: with the global batch's draws held fixed,
    the gradients of two shards' losses -- rows 0, 2 and rows 1, 3 -- sum to the gradient of the whole batch's
    loss, and so do the losses.  Measured in float64: gradients within 9e-16, losses within 2e-15 relative;
    tolerances 1e-14 for both."""
    loss_gap, grad_gap = _shard_gaps(name, estimator)
    assert loss_gap < 1e-14 and grad_gap < 1e-14


def test_the_shard_check_sees_an_estimator_that_couples_examples(float64):
    """The same check on Pyro's whole-trace RWS weights (one weight per particle for the whole batch) fails by a
    wide margin (measured: 0.11 in the gradients): it is why ``DataParallelSVI`` refuses that loss."""
    loss_gap, grad_gap = _shard_gaps("rws", None, lambda pair: AlignmentRWS(per_token=False))
    assert grad_gap > 1e-3


@pytest.mark.parametrize("elbo", [AlignmentRWS(per_token=False), pyro.infer.ReweightedWakeSleep(),
                                  pyro.infer.RenyiELBO()], ids=["rws-whole-trace", "pyro-rws", "renyi"])
def test_whole_trace_weights_are_refused_under_data_parallel(monkeypatch, elbo):
    """Importance weights of the whole batch's trace (Pyro's RWS, ``AlignmentRWS(per_token=False)``, Rényi bounds)
    couple the examples: a shard's weights are not the global batch's, so ``DataParallelSVI`` refuses them when
    there is more than one process, and takes them with one."""
    assert not sums_over_examples(elbo) and sums_over_examples(AlignmentRWS()) and sums_over_examples(Trace_ELBO())
    DataParallelSVI(None, None, None, elbo)  # one process
    monkeypatch.setattr(distributed, "world", lambda: (0, 2))
    DataParallelSVI(None, None, None, elbo, distributed=False)  # this process alone, as asked
    with pytest.raises(ValueError, match=f"{type(elbo).__name__}.*whole batch.*2 processes"):
        DataParallelSVI(None, None, None, elbo)


def test_model_and_guide_run_under_autocast_and_the_elbo_outside():
    """``autocast=torch.bfloat16``: the model and guide calls multiply in bfloat16; what the loss does with them
    afterwards (Pyro's contraction, the backward pass) and the optimiser do not."""
    seen: list = []

    class Loss:
        def loss_and_grads(self, model, guide, batch):  # noqa: ANN001, ANN202
            guide(batch)
            model(batch)
            seen.append(("loss", bfloat16_products()))
            return 1.0

    def optim(params):  # noqa: ANN001, ANN202
        seen.append(("optim", bfloat16_products()))

    def model(batch):  # noqa: ANN001, ANN202
        seen.append(("model", bfloat16_products()))

    def guide(batch):  # noqa: ANN001, ANN202
        seen.append(("guide", bfloat16_products()))

    DataParallelSVI(model, guide, optim, Loss(), distributed=False, autocast=torch.bfloat16).step([0])
    assert seen == [("guide", True), ("model", True), ("loss", False), ("optim", False)]
    seen.clear()
    DataParallelSVI(model, guide, optim, Loss(), distributed=False).step([0])  # None: float32
    assert seen == [("guide", False), ("model", False), ("loss", False), ("optim", False)]
    with pytest.raises(ValueError, match="autocast must be None, torch.bfloat16 or torch.float16, got torch.float64"):
        DataParallelSVI(model, guide, optim, Loss(), autocast=torch.float64)
