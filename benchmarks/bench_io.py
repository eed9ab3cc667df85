"""nirbridge.write/read against nir.write/read (nir 1.0.8), in one run.

    python benchmarks/bench_io.py            # best of 5
    python benchmarks/bench_io.py --repeats 3

Graphs:
  weights  bench_interpret.py's chain at width 2048: 4 x (Affine 2048x2048 float32 -> LIF), 67 MB
  chain    the 802-node Affine(8x8) -> LIF chain of bench_interpret.py (Input and Output included)

Each tool writes its own file (nir gzips every dataset; nirbridge stores uncompressed
by default), and both readers read both files. Times are the best of ``--repeats`` runs
on a warm page cache. ``nir.read`` runs its type check by default; nirbridge.read infers
types too, so those columns compare like with like.
Targets (issue 3): writing the weights graph >= 5x faster than nir.write; reading no
slower than nir.read; for the chain a file >= 4x smaller, written >= 1.5x faster.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import nir
import numpy as np
from bench_interpret import affine_lif_chain, best_of  # benchmarks/ is on sys.path when run as a script

import nirbridge


def verdict(value: float, target: float) -> str:
    return "meets" if value >= target else "MISSES"


def run(name: str, graph: nir.NIRGraph, folder: str, repeats: int) -> dict[str, float]:
    theirs, ours = os.path.join(folder, f"{name}_nir.nir"), os.path.join(folder, f"{name}_nirbridge.nir")
    gz = os.path.join(folder, f"{name}_nirbridge_gzip.nir")
    write_nir = best_of(lambda: nir.write(theirs, graph), repeats)
    write_ours = best_of(lambda: nirbridge.write(ours, graph), repeats)
    write_gz = best_of(lambda: nirbridge.write(gz, graph, compression="gzip"), repeats)
    size_nir, size_ours, size_gz = (os.path.getsize(p) for p in (theirs, ours, gz))
    reads = {}
    for label, path in (("nir's file", theirs), ("nirbridge's file", ours)):
        reads[label] = (
            best_of(lambda p=path: nir.read(p), repeats),
            best_of(lambda p=path: nirbridge.read(p), repeats),
        )
    parameters = sum(
        np.asarray(v).nbytes
        for node in graph.nodes.values()
        for k, v in vars(node).items()
        if k not in ("input_type", "output_type", "metadata") and isinstance(v, np.ndarray)
    )
    print(f"\n{name}: {len(graph.nodes)} nodes, {parameters / 1e6:.1f} MB of parameters")
    print(f"  {'':28}{'nir 1.0.8':>12}{'nirbridge':>12}{'ratio':>9}")
    print(f"  {'write (s)':28}{write_nir:12.3f}{write_ours:12.3f}{write_nir / write_ours:8.1f}x")
    print(f"  {'file size (MB)':28}{size_nir / 1e6:12.2f}{size_ours / 1e6:12.2f}{size_nir / size_ours:8.1f}x")
    print(f"  {'write, nirbridge gzip (s)':28}{'':12}{write_gz:12.3f}{write_nir / write_gz:8.1f}x")
    print(f"  {'file size, gzip (MB)':28}{'':12}{size_gz / 1e6:12.2f}{size_nir / size_gz:8.1f}x")
    for label, (t_nir, t_ours) in reads.items():
        print(f"  {'read ' + label + ' (s)':28}{t_nir:12.3f}{t_ours:12.3f}{t_nir / t_ours:8.2f}x")
    own_nir, own_ours = reads["nir's file"][0], reads["nirbridge's file"][1]
    print(f"  {'read, each its own file':28}{own_nir:12.3f}{own_ours:12.3f}{own_nir / own_ours:8.2f}x")
    return {
        "write": write_nir / write_ours,
        "size": size_nir / size_ours,
        "read": min(t_nir / t_ours for t_nir, t_ours in reads.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    versions = f"nir {nir.version}, nirbridge {nirbridge.__version__}"
    print(f"{versions}, best of {args.repeats}; ratio = nir / nirbridge")
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(__file__))) as folder:
        weights = run("weights", affine_lif_chain(4, width=2048), folder, args.repeats)
        chain = run("chain", affine_lif_chain(400, width=8), folder, args.repeats)
    print("\ntargets")
    print(f"  weights write >= 5x faster:     {weights['write']:6.1f}x  {verdict(weights['write'], 5)}")
    print(
        f"  reading no slower than nir:     {min(weights['read'], chain['read']):6.2f}x  "
        f"{verdict(min(weights['read'], chain['read']), 1.0)}"
    )
    print(f"  chain file >= 4x smaller:       {chain['size']:6.1f}x  {verdict(chain['size'], 4)}")
    print(f"  chain write >= 1.5x faster:     {chain['write']:6.1f}x  {verdict(chain['write'], 1.5)}")


if __name__ == "__main__":
    main()
