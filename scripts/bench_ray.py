"""Benchmark `debug reduce --cluster ray` against local `--jobs 1`.

    python scripts/bench_ray.py                # the figures recorded in docs/performance.md
    python scripts/bench_ray.py --checks 10    # fewer checks for the overhead figure

1. Wall time: a 500-node chain (Relu/Abs/Neg, a `Sin` planted on node 311) reduced with a
   check that sleeps 1 s (a stand-in for a TensorRT build) and then fails when the planted
   node is in the iteration artifact; `--jobs 1` on this machine against
   `--cluster ray:ADDRESS --jobs 4` on a local Ray cluster started by the script
   (`ray.cluster_utils.Cluster`: a head without CPUs and two worker nodes of 2 virtual CPUs;
   each check asks for 1). Both are whole `toolkit` processes (start-up and, for Ray,
   connecting included). Bar: Ray <= 0.5x the wall time of --jobs 1, same node.
2. Ray's own floor: a bare Ray script (no toolkit) in a whole process of its own, which
   imports ray, connects to the same cluster and runs as many rounds of `--jobs` tasks of
   `sleep 1` as the Ray reduce needed, then disconnects. No Ray-based reduce can be faster
   than this on the machine; what `toolkit` adds is its wall time minus this floor.
3. Ray's overhead per check: `--checks` checks of `true` run one after the other through
   the Ray runner and through the local subprocess runner; the difference of the means.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

CHECK = "sleep {sleep}; grep -q {culprit} polygraphy_debug.onnx && exit 1; exit 0"


def build_chain(path: str, n: int, culprit: int) -> str:
    from onnx import TensorProto, helper, save

    ops = ["Relu", "Abs", "Neg"]
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        op = "Sin" if i == culprit else ops[i % len(ops)]
        nodes.append(helper.make_node(op, [prev], [out], name=f"node{i}_{op.lower()}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    save(model, path)
    return nodes[culprit].name


def reduce_once(model: str, work: str, extra: list, culprit: str, sleep: float) -> dict:
    os.makedirs(work, exist_ok=True)
    args = [sys.executable, "-m", "toolkit", "debug", "reduce", model, "-o", "out.onnx", "--json", *extra,
            "--check", "sh", "-c", CHECK.format(culprit=culprit, sleep=sleep)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    t0 = time.monotonic()
    proc = subprocess.run(args, cwd=work, capture_output=True, text=True, env=env)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        sys.exit(f"reduce failed ({proc.returncode}): {proc.stderr[-2000:]}")
    import json

    summary = json.loads(proc.stdout)
    return {"wall": wall, "checks": summary["checks"], "result": summary["result_nodes"], "reduce": summary["seconds"]}


FLOOR = """
import subprocess, sys
import ray
ray.init(address=sys.argv[1], logging_level=40, log_to_driver=False)
SECONDS = sys.argv[4]
def check():
    subprocess.run(["sleep", SECONDS], check=True)
task = ray.remote(check).options(num_cpus=1)
for _ in range(int(sys.argv[2])):
    ray.get([task.remote() for _ in range(int(sys.argv[3]))])
ray.shutdown()
"""


def ray_floor(address: str, rounds: int, jobs: int, sleep: float) -> float:
    """Wall seconds of a bare Ray process running ``rounds`` rounds of ``jobs`` sleeping tasks."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOR, address, str(rounds), str(jobs), str(sleep)], check=True)
    return time.monotonic() - t0


def overhead(address: str, checks: int, folder: str) -> dict:
    """Mean seconds per `true` check through Ray and locally (one after the other)."""
    from onnx import TensorProto, helper, save

    from toolkit.reduce.check import SubprocessRunner
    from toolkit.reduce.cluster import ClusterOptions, RayCluster

    artifact = os.path.join(folder, "polygraphy_debug.onnx")
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    save(m, artifact)
    check = ["sh", "-c", f"test -s {artifact}"]
    local = SubprocessRunner(check)
    times_local = []
    for _ in range(checks):
        t0 = time.monotonic()
        local.run()
        times_local.append(time.monotonic() - t0)
    cluster = RayCluster(ClusterOptions(address), check, artifact, None, print).connect()
    runner = cluster.runner(0, artifact)
    times_ray = []
    try:
        runner.run()  # warm-up: the first task starts a worker process
        for _ in range(checks):
            t0 = time.monotonic()
            res = runner.run()
            times_ray.append(time.monotonic() - t0)
            assert res.code == 0, res.stderr_text
    finally:
        cluster.close()
    return {"local": statistics.mean(times_local), "ray": statistics.mean(times_ray),
            "ray_median": statistics.median(times_ray)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--culprit", type=int, default=311)
    ap.add_argument("--checks", type=int, default=30, help="checks for the overhead figure")
    ap.add_argument("--sleep", type=float, default=1.0, help="seconds each check sleeps")
    args = ap.parse_args()
    from ray.cluster_utils import Cluster

    folder = tempfile.mkdtemp(prefix="bench-ray-")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=2)
        cluster.wait_for_nodes()
        model = os.path.join(folder, "chain.onnx")
        culprit = build_chain(model, args.nodes, args.culprit)
        one = reduce_once(model, os.path.join(folder, "jobs1"), ["--jobs", "1"], culprit, args.sleep)
        print(f"--jobs 1: {one['wall']:.2f} s (reduce {one['reduce']:.2f} s), {one['checks']} checks, "
              f"result {one['result']}")
        ray = reduce_once(model, os.path.join(folder, "ray4"), ["--cluster", f"ray:{cluster.address}", "--jobs", "4"],
                          culprit, args.sleep)
        print(f"--cluster ray --jobs 4: {ray['wall']:.2f} s (reduce {ray['reduce']:.2f} s), {ray['checks']} checks, "
              f"result {ray['result']}")
        print(f"ratio: {ray['wall'] / one['wall']:.2f} (bar <= 0.5); same node: {ray['result'] == one['result']}")
        rounds = -(-ray["checks"] // 4)
        floors = sorted(ray_floor(cluster.address, rounds, 4, args.sleep) for _ in range(3))
        print(f"Ray's floor ({rounds} rounds of 4 x `sleep {args.sleep:g}`, bare Ray, best of 3): {floors[0]:.2f} s "
              f"= {floors[0] / one['wall']:.2f}x of --jobs 1 (median {floors[1]:.2f} s); toolkit adds "
              f"{ray['wall'] - floors[1]:.2f} s")
        if not args.checks:
            return
        ov = overhead(cluster.address, args.checks, folder)
        print(f"per check ({args.checks} checks of `test -s`): local {ov['local'] * 1000:.1f} ms, Ray "
              f"{ov['ray'] * 1000:.1f} ms (median {ov['ray_median'] * 1000:.1f} ms): overhead "
              f"{(ov['ray'] - ov['local']) * 1000:.1f} ms")
    finally:
        cluster.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
