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

import pytest
import torch
import torch.distributed as dist

from pyro_attention.inference.distributed import all_reduce_gradients, end_process

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
    from pyro_attention.translation import TranslationConfig, train

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
