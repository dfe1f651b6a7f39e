"""The weight-editing benchmark's costs, each beside its baseline, from one run.

    OMP_NUM_THREADS=1 python bench/editing.py [--snapshot DIR] [--cases N]

| what | measured against | goal |
|---|---|---|
| preflight on the SmolLM2 snapshot (~540 MB to hash) | sha256sum on the same files | <= 1.5x |
| grading throughput on SmolLM2, tokens/s | plain transformers forward loop, same inputs | >= 90% |
| report rebuild time (fixture run) | - | measured |
| peak RSS while grading (grader process) | - | measured |

The SmolLM2 snapshot is imported once into .cache/smollm2 (about 25 s).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mw_actors.editing import (
    build_report,
    import_smollm2,
    load_config,
    preflight,
    render_json,
    write_fixture,
)

ROOT = Path(__file__).resolve().parents[1]


def row(*cells: str) -> None:
    widths = (44, 16, 16, 10)
    print("| " + " | ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + " |")


def best(fn, runs: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def snapshot(path: Path | None) -> Path:
    if path is not None:
        return path
    cached = ROOT / ".cache" / "smollm2"
    if not (cached / "model.safetensors").is_file():
        print(f"importing SmolLM2 into {cached} (once) ...", file=sys.stderr)
        import_smollm2(cached)
    return cached


def bench_preflight(config: Path, student: Path) -> None:
    loaded = load_config(config)
    files = [str(student / n) for n in ("config.json", "model.safetensors", "tokenizer.json")]
    ours = best(lambda: preflight(loaded))
    theirs = best(lambda: subprocess.run(["sha256sum", *files], check=True, capture_output=True))
    row(
        "preflight, SmolLM2 snapshot",
        f"{ours * 1e3:.0f} ms",
        f"{theirs * 1e3:.0f} ms",
        f"{ours / theirs:.2f}x",
    )


def _cases(config: Path, limit: int) -> list[tuple[str, str]]:
    data = config.parent / "datasets" / "completion.jsonl"
    cases = [json.loads(line) for line in data.read_text().splitlines()]
    return [(c["prompt"], c["completion"]) for c in cases][:limit]


def bench_grading(student_dir: Path, config: Path, limit: int) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer

    from mw_actors.editing.student import load_student

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    tokenizer = Tokenizer.from_file(str(student_dir / "tokenizer.json"))
    inputs = []
    for prompt, completion in _cases(config, limit) * 4:
        p = tokenizer.encode(prompt, add_special_tokens=False).ids
        c = tokenizer.encode(completion, add_special_tokens=False).ids
        inputs.append((p + c, len(p)))
    tokens = sum(len(ids) - 1 for ids, _ in inputs)
    student = load_student(student_dir / "config.json", student_dir / "model.safetensors")
    reference = transformers.AutoModelForCausalLM.from_pretrained(student_dir, dtype=torch.float32)
    reference.eval()

    def ours() -> list[float]:
        with torch.inference_mode():
            return [student.nll(ids, start)[0] for ids, start in inputs]

    def theirs() -> list[float]:
        out = []
        with torch.inference_mode():
            for ids, start in inputs:
                t = torch.tensor(ids)
                logits = reference(t[None, :-1]).logits[0]
                out.append(float(torch.nn.functional.cross_entropy(logits[start - 1 :], t[start:])))
        return out

    ours(), theirs()  # warm up
    a, b = ours(), theirs()
    diff = max(abs(x - y) for x, y in zip(a, b, strict=True))
    t_ours, t_theirs = best(ours), best(theirs)
    rate_ours, rate_theirs = tokens / t_ours, tokens / t_theirs
    row(
        f"grading, SmolLM2 ({len(inputs)} cases, {tokens} tokens)",
        f"{rate_ours:.0f} tok/s",
        f"{rate_theirs:.0f} tok/s",
        f"{rate_ours / rate_theirs:.0%}",
    )
    print(f"  largest per-case loss difference from transformers: {diff:.2e}")


def bench_report(tmp: Path) -> None:
    config = write_fixture(tmp / "fixture")
    run = tmp / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bin.wsm",
            "benchmark",
            "run",
            "--config",
            str(config),
            "--output",
            str(run),
            "--local-trusted",
        ],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=True,
    )
    assert render_json(build_report(run)) == done.stdout
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        render_json(build_report(run))
        times.append(time.perf_counter() - t0)
    row(
        "report rebuild, fixture run (3 trials)",
        f"{statistics.median(times) * 1e3:.1f} ms",
        "-",
        "-",
    )


def bench_rss(student: Path, config: Path, tmp: Path) -> None:
    from mw_actors.editing import file_sha256, read_cases

    cases = tmp / "cases.jsonl"
    cases.write_text((config.parent / "datasets" / "completion.jsonl").read_text())
    assert read_cases(cases)
    request = {
        "trial_id": "bench",
        "model_config": str(student / "config.json"),
        "tokenizer": str(student / "tokenizer.json"),
        "weights": str(student / "model.safetensors"),
        "weights_sha256": file_sha256(student / "model.safetensors"),
        "partitions": {"private": str(cases)},
        "partition_sha256": {"private": file_sha256(cases)},
        "max_tokens_per_case": 512,
        "threads": 1,
        "omp_num_threads": "1",
        "git_commit": "bench",
        "scores_out": str(tmp / "scores.json"),
    }
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mw_actors.editing.grader"],
        input=json.dumps(request).encode(),
        capture_output=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        check=True,
    )
    wall = time.perf_counter() - t0
    answer = json.loads(done.stdout)
    assert answer.get("result"), answer
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    row(
        "grader process, SmolLM2, 48 cases",
        f"{max(peak, before) / 1024:.0f} MiB peak",
        f"{wall:.1f} s wall",
        "-",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--snapshot", type=Path, help="a SmolLM2 snapshot (default: .cache/smollm2)"
    )
    parser.add_argument("--cases", type=int, default=48)
    args = parser.parse_args()
    student = snapshot(args.snapshot)
    with tempfile.TemporaryDirectory() as temp:
        tmp = Path(temp)
        config = write_fixture(tmp / "smoke", student=student)
        threads = os.environ.get("OMP_NUM_THREADS", "unset")
        print(f"OMP_NUM_THREADS={threads}; best of 3 unless noted\n")
        row("what", "mw", "baseline", "ratio")
        row("-" * 44, "-" * 16, "-" * 16, "-" * 10)
        bench_preflight(config, student)
        bench_grading(student, config, args.cases)
        bench_report(tmp)
        bench_rss(student, config, tmp)


if __name__ == "__main__":
    main()
