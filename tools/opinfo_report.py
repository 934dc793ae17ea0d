#!/usr/bin/env python
"""Runs the OpInfo conformance suite (the machinery of tests/test_opinfo.py,
in tools/opinfo_common.py) over every op, dtype and sample, and writes
docs/opinfo.md: totals, then one row per op | dtype | mode with the outcome:
native pass, fallback (the ATen ops that reached the CPU fallback), fail (the
first error) or skipped (why). Prints the totals.

    python tools/opinfo_report.py                       # full run, writes docs/opinfo.md
    python tools/opinfo_report.py --ops add,div --max-samples 8 --out /tmp/x.md
    python tools/opinfo_report.py --update-known-gaps   # also rewrites KNOWN_GAPS in tests/test_opinfo.py
    python tools/opinfo_report.py --all --max-samples 3 # every OpInfo of op_db: docs/opinfo_all.md

Fallbacks are found with TORCH_TPU_FALLBACK=error, as in the tests; for a case
that falls back, the samples are run again with the fallback allowed so that
torch_tpu.fallback_report() names every ATen op involved, not only the first.
"""
from __future__ import annotations

import argparse
import ast
import datetime
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

# Same device setup as tests/conftest.py (read when the runtime initialises).
os.environ.setdefault("TORCH_TPU_HOST_DEVICES", "2")
os.environ.setdefault("TORCH_TPU_HOST_MEMORY", "2G")

import torch  # noqa: E402
import torch_tpu  # noqa: E402

import opinfo_common as oc  # noqa: E402

TEST_FILE = os.path.join(ROOT, "tests", "test_opinfo.py")
STATUSES = ["pass", "fallback", "fail", "skip"]


def run_all(ops_filter, max_samples, progress):
    results = []
    work = [(n, op, d, "forward") for n, op, d in oc.cases()]
    work += [(n, op, torch.float32, "grad") for n, op in oc.grad_cases()]
    if ops_filter:
        work = [w for w in work if w[0] in ops_filter or w[1].name in ops_filter]
    for i, (name, op, dtype, mode) in enumerate(work):
        t0 = time.perf_counter()
        with oc.fallback_forbidden():
            res = oc.run_case(name, op, dtype, mode, max_samples=max_samples)
        if res.fallback_ops:
            full = oc.fallback_ops_allowed(name, op, dtype, mode, max_samples=max_samples)
            res.all_fallback_ops = full or dict(res.fallback_ops)
        else:
            res.all_fallback_ops = {}
        res.seconds = time.perf_counter() - t0
        if progress:
            print(f"[{i + 1}/{len(work)}] {name} {res.dtype} {mode}: {res.status} ({res.seconds:.1f}s)",
                  file=sys.stderr, flush=True)
        results.append(res)
    return results


def totals(results):
    t = {}
    for mode in ("forward", "grad"):
        rs = [r for r in results if r.mode == mode]
        t[mode] = {s: sum(r.status == s for r in rs) for s in STATUSES}
        t[mode]["total"] = len(rs)
        t[mode]["samples"] = sum(r.samples for r in rs)
        t[mode]["samples_passed"] = sum(r.passed for r in rs)
        t[mode]["samples_skipped"] = sum(sum(r.skipped.values()) for r in rs)
    return t


def _cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def _ops_list(d):
    return ", ".join(f"`{o}`" for o in sorted(d))


def detail(r):
    if r.status == "pass":
        d = f"{r.passed}/{r.samples} samples"
    elif r.status == "fallback":
        d = f"{_ops_list(r.all_fallback_ops)} ({sum(r.fallback_ops.values())}/{r.samples} samples)"
    elif r.status == "fail":
        d = f"{r.failures}/{r.samples} samples: {r.error}"
        if r.all_fallback_ops:
            d += f"; also falls back: {_ops_list(r.all_fallback_ops)}"
    else:
        d = r.reason
    if r.skipped and r.status != "skip":
        d += "; skipped " + "; ".join(f"{n}: {why}" for why, n in r.skipped.items())
    return _cell(d)


def fallback_index(results):
    """{ATen op: sorted [op (dtypes; grad)]} over every case that fell back."""
    idx = {}
    for r in results:
        for aten in r.all_fallback_ops:
            idx.setdefault(aten, {}).setdefault(r.name, []).append(r.dtype if r.mode == "forward" else "grad")
    return idx


def gaps_by_op(results):
    """{op test name: {ATen op: [dtype or 'grad']}} for KNOWN_GAPS."""
    gaps = {}
    for r in results:
        for aten in r.all_fallback_ops:
            where = r.dtype if r.mode == "forward" else "grad"
            gaps.setdefault(r.name, {}).setdefault(aten, []).append(where)
    return gaps


def gap_reason(entry):
    parts = [f"{aten} ({', '.join(where)})" for aten, where in sorted(entry.items())]
    return "no native kernel: " + "; ".join(parts)


def write_markdown(path, results, t, elapsed, max_samples):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    try:
        commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    lines = [
        "# OpInfo conformance report",
        "",
        "Generated by `python tools/opinfo_report.py` (do not edit by hand). Every op of the LLM op set in",
        "PyTorch's OpInfo database (`torch.testing._internal.common_methods_invocations.op_db`) runs on",
        "`tpu` and on the CPU, sample by sample, with the CPU fallback forbidden",
        "(`TORCH_TPU_FALLBACK=error`); `tests/test_opinfo.py` is the same check as a pytest suite.",
        "",
        f"- date: {now}; torch {torch.__version__}; commit {commit} (plus uncommitted work);"
        f" {len(torch_tpu.native_ops())} native ATen kernels",
        f"- samples: {'all' if max_samples is None else f'first {max_samples}'} per op/dtype;"
        f" run time {elapsed:.0f} s",
        "- forward: one row per op and dtype (float32, bfloat16, float16, int64, int32, bool, uint8:"
        " those the OpInfo declares for CPU); grad: float32, backward of the sum of the outputs,"
        " input grads compared",
        "- tolerances: torch.testing defaults per dtype; bfloat16/float16 rtol 1.6e-2, atol 1e-2;"
        " widened by an OpInfo's generic toleranceOverride; NaNs compare equal",
        "- fallback: the ATen ops that reached the CPU fallback (all of them, from a second run with"
        " the fallback allowed); fail: the first failing sample and its error",
        "",
        "## Totals",
        "",
        "| mode | cases | pass | fallback | fail | skipped | samples run | samples passed | samples skipped |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode in ("forward", "grad", "complex"):
        m = t[mode]
        lines.append(f"| {mode} | {m['total']} | {m['pass']} | {m['fallback']} | {m['fail']} | {m['skip']} |"
                     f" {m['samples']} | {m['samples_passed']} | {m['samples_skipped']} |")
    idx = fallback_index(results)
    lines += ["", "## ATen ops that fall back", ""]
    if idx:
        lines += ["| ATen op | OpInfo ops (dtypes; grad = float32 backward) |", "| --- | --- |"]
        for aten in sorted(idx):
            ops = "; ".join(f"{n} ({', '.join(w)})" for n, w in sorted(idx[aten].items()))
            lines.append(f"| `{aten}` | {_cell(ops)} |")
    else:
        lines.append("None.")
    fails = [r for r in results if r.status == "fail"]
    lines += ["", "## Failures", ""]
    if fails:
        lines += ["| op | dtype | mode | first error |", "| --- | --- | --- | --- |"]
        for r in fails:
            lines.append(f"| {r.name} | {r.dtype} | {r.mode} | {detail(r)} |")
    else:
        lines.append("None.")
    lines += ["", "## All cases", "", "| op | dtype | mode | result | detail |", "| --- | --- | --- | --- | --- |"]
    label = {"pass": "native pass", "fallback": "fallback", "fail": "FAIL", "skip": "skipped"}
    for r in results:
        lines.append(f"| {r.name} | {r.dtype} | {r.mode} | {label[r.status]} | {detail(r)} |")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# The block of the selected driver: KNOWN_GAPS (host), KNOWN_GAPS_PJRT.
GAPS_NAME = oc.known_gaps_name()
_GAPS_RE = re.compile(rf"(# BEGIN {GAPS_NAME} [^\n]*\n)(.*?)(\n# END {GAPS_NAME}\n)", re.S)


def current_known_gaps():
    with open(TEST_FILE) as f:
        m = _GAPS_RE.search(f.read())
    if not m:
        raise SystemExit(f"{TEST_FILE}: no BEGIN/END {GAPS_NAME} markers")
    return ast.literal_eval(m.group(2).split("=", 1)[1].strip())


def known_gaps_drift(results):
    """Lines describing where KNOWN_GAPS and this run disagree."""
    known = current_known_gaps()
    found = {n: gap_reason(e) for n, e in gaps_by_op(results).items()}
    ran = {r.name for r in results}
    out = []
    for n in sorted(set(known) | set(found)):
        if n not in ran:
            continue
        if n not in known:
            out.append(f"missing: {n}: {found[n]}")
        elif n not in found:
            out.append(f"stale (no longer falls back): {n}")
        elif known[n] != found[n]:
            out.append(f"changed: {n}: {found[n]}")
    return out


def update_known_gaps(results):
    gaps = gaps_by_op(results)
    body = [GAPS_NAME + " = {"]
    for name in sorted(gaps):
        body.append(f"    {name!r}: {gap_reason(gaps[name])!r},")
    body.append("}")
    with open(TEST_FILE) as f:
        src = f.read()
    if not _GAPS_RE.search(src):
        raise SystemExit(f"{TEST_FILE}: no BEGIN/END {GAPS_NAME} markers")
    src = _GAPS_RE.sub(lambda m: m.group(1) + "\n".join(body) + m.group(3), src)
    with open(TEST_FILE, "w") as f:
        f.write(src)
    return gaps


# ---- --all: the whole OpInfo database -----------------------------------------

CATEGORY_HELP = {
    "native": "passed; no decomposition ran, no CPU fallback",
    "decomposed": "passed; some ATen op ran by its torch._decomp decomposition on the device, no CPU fallback",
    "fallback": "some sample reached the CPU fallback (the ATen ops are named)",
    "mismatch": "some sample's result differs from the CPU's (the first one is shown)",
    "error": "the device raised where the CPU did not (the first one is shown)",
    "crash": "the process running the case died",
    "timeout": "no result within the time limit (killed)",
    "skipped": "nothing ran (the reason is shown)",
}


def run_db(ops_filter, max_samples, chunk, case_timeout, progress):
    cases = oc.all_cases()
    idx = [i for i, (name, _, _) in enumerate(cases)
           if not ops_filter or name in ops_filter or name.split(".")[0] in ops_filter]
    n = len(idx)
    done = [0]

    def report(r):
        done[0] += 1
        if progress:
            print(f"[{done[0]}/{n}] {r['name']} {r['dtype']} {r['mode']}: {r['category']} ({r['seconds']:.1f}s)",
                  file=sys.stderr, flush=True)

    return oc.run_db_chunked(idx, max_samples, len(cases), chunk=chunk, case_timeout=case_timeout,
                             progress=report)


def _db_detail(r):
    if r["category"] == "fallback":
        return _ops_list(r["fallback_ops"])
    if r["category"] in ("mismatch", "error", "crash", "timeout"):
        return r["error"]
    if r["category"] == "skipped":
        return r["reason"]
    if r["category"] == "decomposed":
        return "decomposed: " + _ops_list(r["decomposed"])
    return ""


def write_db_markdown(path, results, t, elapsed, max_samples, chunk):
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    good, ran = t["share_cases"]
    cgood, cran = t["complex_cases"]
    lines = [
        "# OpInfo conformance: the whole database",
        "",
        "Generated by `python tools/opinfo_report.py --all` (do not edit by hand). Every OpInfo of PyTorch's",
        "`op_db` (every variant) runs on `tpu` and on the CPU with the CPU fallback forbidden",
        "(`TORCH_TPU_FALLBACK=error`), each case in a child process (a chunk of cases per process,",
        "restarted after a crash); `docs/opinfo.md` is the LLM op set with all samples.",
        "",
        f"- date: {now}; torch {torch.__version__}; driver {oc.driver()}; commit {commit};"
        f" {len(torch_tpu.native_ops())} native ATen kernels",
        f"- samples: {'all' if max_samples is None else f'first {max_samples}'} per case;"
        f" {chunk} cases per child process; run time {elapsed:.0f} s",
        "- forward cases: each dtype of float32, bfloat16, float16, float64, int8, int16, int32, int64,"
        " uint8, bool that the OpInfo declares for CPU; grad: float32 backward of the sum of the"
        " outputs, input grads compared; complex: complex64 forward where the OpInfo declares it"
        " (counted apart)",
        "- random ops (those PyTorch's own test_compare_cpu skips for randomness) and the empty family"
        " (uninitialised memory): shapes and dtypes compared, not values",
        "- tolerances and comparisons as in `docs/opinfo.md`",
        "",
        "## Totals",
        "",
        f"Native or decomposed: **{good} of {ran}** real-dtype cases that ran ({100 * t['share']:.1f}%;"
        f" skipped cases are not counted); complex64: **{cgood} of {cran}** ({100 * t['complex_share']:.1f}%).",
        "",
        "| mode | cases | " + " | ".join(oc.CATEGORIES) + " |",
        "| --- | --- | " + " | ".join("---" for _ in oc.CATEGORIES) + " |",
    ]
    for mode in ("forward", "grad", "complex"):
        m = t[mode]
        lines.append(f"| {mode} | {m['total']} | " + " | ".join(str(m[c]) for c in oc.CATEGORIES) + " |")
    lines += ["", "| category | meaning |", "| --- | --- |"]
    lines += [f"| {c} | {CATEGORY_HELP[c]} |" for c in oc.CATEGORIES]
    fb = oc.db_fallback_index(results)
    lines += ["", "## ATen ops that fall back", "", "Sorted by the number of cases they block.", ""]
    if fb:
        lines += ["| ATen op | cases |", "| --- | --- |"]
        lines += [f"| `{a}` | {n} |" for a, n in fb.items()]
    else:
        lines.append("None.")
    bad = [r for r in results if r["category"] in ("crash", "timeout")]
    lines += ["", "## Crashes and timeouts", ""]
    if bad:
        lines += ["| op | dtype | mode | category | detail |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| {r['name']} | {r['dtype']} | {r['mode']} | {r['category']} | {_cell(r['error'])} |"
                  for r in bad]
    else:
        lines.append("None.")
    by_op = {}
    for r in results:
        by_op.setdefault(r["name"], []).append(r)
    lines += ["", "## Per op", "",
              "Dtypes by category (`grad` = float32 backward); details: the first case of each failing category.",
              "", "| op | " + " | ".join(oc.CATEGORIES) + " | details |",
              "| --- | " + " | ".join("---" for _ in oc.CATEGORIES) + " | --- |"]
    for name, rs in by_op.items():
        cells, details = [], []
        for c in oc.CATEGORIES:
            where = [r["dtype"] if r["mode"] == "forward" else "grad" for r in rs if r["category"] == c]
            cells.append(", ".join(where))
            first = next((r for r in rs if r["category"] == c), None)
            if first is not None and c != "native":
                d = _db_detail(first)
                if d:
                    details.append(f"{c} ({first['dtype'] if first['mode'] == 'forward' else 'grad'}): {d[:300]}")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {_cell('; '.join(details))} |")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main_all(a, ops_filter):
    t0 = time.perf_counter()
    results = run_db(ops_filter, a.max_samples, a.chunk, a.case_timeout, not a.quiet)
    elapsed = time.perf_counter() - t0
    t = oc.db_totals(results)
    out = a.out or os.path.join(ROOT, "docs", "opinfo_all.md")
    write_db_markdown(out, results, t, elapsed, a.max_samples, a.chunk)
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump(results, f)
    for mode in ("forward", "grad", "complex"):
        m = t[mode]
        print(f"{mode:8s} cases {m['total']}: " + ", ".join(f"{m[c]} {c}" for c in oc.CATEGORIES))
    good, ran = t["share_cases"]
    print(f"native or decomposed: {good}/{ran} ({100 * t['share']:.1f}%)")
    cgood, cran = t["complex_cases"]
    print(f"complex64 native or decomposed: {cgood}/{cran} ({100 * t['complex_share']:.1f}%)")
    fb = oc.db_fallback_index(results)
    if fb:
        print("falls back (cases):", ", ".join(f"{a_} {n}" for a_, n in list(fb.items())[:20]))
    for r in results:
        if r["category"] in ("crash", "timeout"):
            print(f"{r['category'].upper()} {r['name']} {r['dtype']} {r['mode']}: {r['error']}")
    print(f"wrote {os.path.relpath(out, os.getcwd())} in {elapsed:.0f} s")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_out = "opinfo.md" if GAPS_NAME == "KNOWN_GAPS" else f"opinfo_{oc.driver()}.md"
    p.add_argument("--out", default=None, help=f"default docs/{default_out}; with --all docs/opinfo_all.md")
    p.add_argument("--all", action="store_true",
                   help="every OpInfo of op_db and every dtype, in child processes; writes docs/opinfo_all.md")
    p.add_argument("--chunk", type=int, default=400, help="--all: cases per child process")
    p.add_argument("--case-timeout", type=float, default=120.0, help="--all: seconds before a case is killed")
    p.add_argument("--json", default="", help="--all: also write the results as JSON to this file")
    p.add_argument("--max-samples", type=int, default=None, help="samples per op/dtype (default: all)")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names or name.variant to run")
    p.add_argument("--update-known-gaps", action="store_true",
                   help="rewrite this driver's KNOWN_GAPS block in tests/test_opinfo.py from this run "
                        "(every op; all samples unless --max-samples, which then covers the default tests only)")
    p.add_argument("-q", "--quiet", action="store_true", help="no per-case progress on stderr")
    a = p.parse_args(argv)
    ops_filter = {s.strip() for s in a.ops.split(",") if s.strip()}
    if a.update_known_gaps and (ops_filter or a.all):
        p.error("--update-known-gaps needs every op of the LLM set (no --ops, no --all)")
    if a.all:
        return main_all(a, ops_filter)
    a.out = a.out or os.path.join(ROOT, "docs", default_out)

    t0 = time.perf_counter()
    results = run_all(ops_filter, a.max_samples, not a.quiet)
    elapsed = time.perf_counter() - t0
    t = totals(results)
    write_markdown(a.out, results, t, elapsed, a.max_samples)

    for mode in ("forward", "grad", "complex"):
        m = t[mode]
        print(f"{mode:8s} cases {m['total']}: {m['pass']} pass, {m['fallback']} fallback, {m['fail']} fail,"
              f" {m['skip']} skipped; samples {m['samples_passed']}/{m['samples']} passed,"
              f" {m['samples_skipped']} skipped")
    idx = fallback_index(results)
    if idx:
        print("falls back:", ", ".join(sorted(idx)))
    for r in results:
        if r.status == "fail":
            print(f"FAIL {r.name} {r.dtype} {r.mode}: {r.error}")
    print(f"wrote {os.path.relpath(a.out, os.getcwd())} in {elapsed:.0f} s")
    if a.update_known_gaps:
        gaps = update_known_gaps(results)
        print(f"{GAPS_NAME} in {os.path.relpath(TEST_FILE, os.getcwd())}: {len(gaps)} ops")
    else:
        drift = known_gaps_drift(results)
        if drift:
            print(f"{GAPS_NAME} in tests/test_opinfo.py differs from this run"
                  " (--update-known-gaps rewrites it):\n  " + "\n  ".join(drift))
    return 0


if __name__ == "__main__":
    sys.exit(main())
