"""The Python call's overhead over the same job from Rust: `ferry.run(example)` (options parsed,
outputs handed to numpy, the result dict built) against `Job::run` timed inside Rust, two ways:

- paired: each Python call's wall time minus the `Job::run` inside that same call (`job_s`),
  so the run's own variance cancels; the median over the rounds is the verdict;
- interleaved: the Python call and a separate Rust-only job (`_ferry._job_seconds`) in
  alternating order, medians compared (on a loaded machine their difference is mostly noise).

    v/bin/python python/bench/overhead.py [--example storm] [--rounds 21] [--small] [--arch a2a3]

Prints the medians and the paired overhead per run; exits 1 when that is 5 ms or more. Install the
package in the release profile (`pip install ./python`, the default) before timing.
"""
import argparse
import statistics
import sys
import time

import ferry
from ferry import _ferry

LIMIT_S = 0.005


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--example", default="storm")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--arch", default="a2a3")
    a = ap.parse_args()

    paired = []

    def python_call() -> float:
        t = time.perf_counter()
        r = ferry.run(a.example, arch=a.arch, small=a.small)
        wall = time.perf_counter() - t
        paired.append(wall - r.raw["job_s"])
        return wall

    def rust_job() -> float:
        return _ferry._job_seconds(a.example, arch=a.arch, small=a.small)

    python_call(), rust_job()  # warm both paths once
    paired.clear()
    py, rs = [], []
    for i in range(a.rounds):
        order = (python_call, rust_job) if i % 2 == 0 else (rust_job, python_call)
        for f in order:
            (py if f is python_call else rs).append(f())
    mp, mr = statistics.median(py), statistics.median(rs)
    over = statistics.median(paired)
    print(f"{a.example} ({'small' if a.small else 'full'}, {a.arch}), {a.rounds} interleaved rounds:")
    print(f"  python call  median {mp * 1e3:9.2f} ms")
    print(f"  rust job     median {mr * 1e3:9.2f} ms  (difference {(mp - mr) * 1e3:.2f} ms)")
    print(f"  overhead, paired    {over * 1e3:9.3f} ms per run, median (max {max(paired) * 1e3:.3f});"
          f" limit {LIMIT_S * 1e3:.0f} ms")
    return 0 if over < LIMIT_S else 1


if __name__ == "__main__":
    sys.exit(main())
