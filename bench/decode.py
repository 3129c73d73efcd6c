"""Decoding API pods: the generated client's decoder against pykubelet's planned one.

What each pod the kubelet hears of costs it before any work: the watch's and
the status manager's answers are JSON decoded into ``V1Pod`` models. This
decodes the same pods (by default the churn pods of
``tests/unit/fixtures/churn_pods.json``, as a 1.20 API server stored them
during ``bench/soak.py``; or ``--pods FILE``, e.g. ``kubectl get pods -o json``
output) ``--rounds`` times each way and prints the time per pod:

- the generated ``ApiClient`` decoder (what every answer went through before);
- ``api.modelcodec``'s planned decoder (``from_dict``, the watch and every answer now);
- the status manager's reading of a GET / PATCH answer (``pod_without_spec``:
  metadata and status only);
- ``json.loads`` of the pod's text alone, the floor under all three.

Every planned result is first checked equal to the generated one.

    .venv/bin/python -m bench.decode [--rounds 200] [--pods FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pykubelet.api.modelcodec import decode, generated_decode
from pykubelet.status.apiclient import pod_without_spec

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "unit" / "fixtures" / "churn_pods.json"


def load_pods(path: Path) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    pods = data.get("items", []) if isinstance(data, dict) else data
    if not pods:
        raise SystemExit(f"{path}: no pods")
    return list(pods)


def per_pod_us(texts: list[str], rounds: int, decode_one: Callable[[str], Any]) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        for text in texts:
            decode_one(text)
    return (time.perf_counter() - started) / (rounds * len(texts)) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=Path, default=FIXTURE,
                        help="a JSON list of pods or a PodList (default: the churn fixture)")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    pods = load_pods(args.pods)
    texts = [json.dumps(pod) for pod in pods]
    for pod in pods:
        if decode(pod, "V1Pod") != generated_decode(pod, "V1Pod"):
            print(f"planned decode differs for {pod['metadata'].get('name')}", file=sys.stderr)
            return 1
    cases: list[tuple[str, Callable[[str], Any]]] = [
        ("generated ApiClient decoder", lambda t: generated_decode(json.loads(t), "V1Pod")),
        ("planned decoder (from_dict)", lambda t: decode(json.loads(t), "V1Pod")),
        ("status answer, no spec", lambda t: pod_without_spec(json.loads(t))),
        ("json.loads alone", json.loads),
    ]
    figures = [(name, per_pod_us(texts, args.rounds, one)) for name, one in cases]
    size = sum(len(t) for t in texts) / len(texts)
    print(f"decoding {len(pods)} API pods (mean {size:,.0f} bytes of JSON), "
          f"{args.rounds} rounds, Python {sys.version.split()[0]}")
    base = figures[0][1]
    for name, us in figures:
        print(f"  {name:30} {us:9.1f} us/pod  {base / us:5.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
