"""Per-file passed/failed/skipped counts from a pytest junit xml (used by scripts/polygraphy_cli_tests.sh).
   summarize.py A.xml            counts per file
   summarize.py A.xml B.xml      also: tests passing in A but not in B"""
import collections
import sys
import xml.etree.ElementTree as ET


def load(path):
    res = {}
    for tc in ET.parse(path).getroot().iter("testcase"):
        f = tc.get("classname", "").split(".")
        fname = next((p for p in f if p.startswith("test_")), "?") + ".py"
        tid = f"{fname}::{tc.get('classname').split('.')[-1]}::{tc.get('name')}"
        if tc.find("failure") is not None or tc.find("error") is not None:
            st = "failed"
        elif tc.find("skipped") is not None:
            st = "skipped"
        else:
            st = "passed"
        res[tid] = st
    return res


a = load(sys.argv[1])
counts = collections.defaultdict(collections.Counter)
for tid, st in a.items():
    counts[tid.split("::")[0]][st] += 1
tot = collections.Counter()
for f in sorted(counts):
    c = counts[f]
    tot.update(c)
    print(f"{f:18s} passed {c['passed']:3d}  failed {c['failed']:3d}  skipped {c['skipped']:3d}")
print(f"{'total':18s} passed {tot['passed']:3d}  failed {tot['failed']:3d}  skipped {tot['skipped']:3d}")
if len(sys.argv) > 2:
    b = load(sys.argv[2])
    diff = sorted(t for t, s in a.items() if s == "passed" and b.get(t) != "passed")
    print(f"--- {len(diff)} passing in {sys.argv[1]} but not in {sys.argv[2]} ---")
    for t in diff:
        print(f"{b.get(t, 'missing'):8s} {t}")
