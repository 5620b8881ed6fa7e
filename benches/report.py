#!/usr/bin/env python3
"""Prints criterion results as records/s and the ratios the issues ask for.

Run after `cargo bench --bench append` (and `--bench replicate` once it exists):
    python3 benches/report.py
Ratios are only meaningful between figures from the same run.
"""
import json
import pathlib
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/criterion")
rates = {}
times = {}
for bench in sorted(root.glob("**/new/benchmark.json")):
    meta = json.loads(bench.read_text())
    est = json.loads((bench.parent / "estimates.json").read_text())
    ns = est["mean"]["point_estimate"]
    name = meta["full_id"]
    times[name] = ns
    tp = meta.get("throughput") or {}
    elements = tp.get("Elements")
    if elements:
        rates[name] = elements / (ns * 1e-9)
        print(f"{name:55s} {rates[name] / 1e6:10.2f} M records/s   ({ns / 1e3:10.1f} us/iter)")
    else:
        print(f"{name:55s} {ns / 1e6:10.2f} ms/iter")


def ratio(label, a, b):
    if a in rates and b in rates:
        print(f"{label:55s} {rates[a] / rates[b]:10.2f}")


print()
for size in ["100B", "1KiB"]:
    ratio(f"append {size} batch100 nosync / memcpy+CRC (warm pages)",
          f"append/{size}/batch100/nosync", f"baseline/memcpy_crc/{size}/batch100")
    ratio(f"append {size} batch100 nosync / memcpy+CRC (new pages)",
          f"append/{size}/batch100/nosync", f"baseline/memcpy_crc_cold/{size}/batch100")
    ratio(f"append {size} batch100 nosync, under retention / memcpy+CRC (warm pages)",
          f"append/{size}/batch100/nosync_steady", f"baseline/memcpy_crc/{size}/batch100")
    ratio(f"append {size} batch100 sync / nosync",
          f"append/{size}/batch100/sync", f"append/{size}/batch100/nosync")
ratio("append 1KiB batch100 nosync / commitlog (same batches)",
      "append/1KiB/batch100/nosync", "baseline/commitlog/1KiB/batch100")
ratio("append 100B batch100 sync / pwrite+fdatasync floor",
      "append/100B/batch100/sync", "baseline/write_fdatasync/100B/batch100")
for case in ["sync_steady", "sync_growing_zeros", "sync_growing_fallocate"]:
    ratio(f"append 100B batch100 {case} / pwrite+fdatasync floor",
          f"append/100B/batch100/{case}", "baseline/write_fdatasync/100B/batch100")
for kind in ["clean", "crash"]:
    a, b = f"reopen/{kind}/1GiB_in_8x128MiB", f"reopen/{kind}/128MiB_in_1x128MiB"
    if a in times and b in times:
        print(f"{'reopen ' + kind + ': 1 GiB in 8 segments / 128 MiB in 1 (time)':55s} {times[a] / times[b]:10.2f}")
for size in ["100B", "1KiB"]:
    for inflight in ["1", "64"]:
        ratio(f"replicated {size} inflight{inflight} fsync / local fsync",
              f"replicate/{size}/batch100/inflight{inflight}/fsync", f"local/{size}/batch100/fsync")
        ratio(f"replicated {size} inflight{inflight} replicated / local no sync",
              f"replicate/{size}/batch100/inflight{inflight}/replicated", f"local/{size}/batch100/nosync")
for mode in ["replicated", "fsync"]:
    ratio(f"Producer+Client / Node::append, 100B, {mode}",
          f"produce/100B/producer_all_outstanding/{mode}",
          f"produce/100B/node_append_batch100_inflight64/{mode}")
