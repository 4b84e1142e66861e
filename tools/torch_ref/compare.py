#!/usr/bin/python3
"""Compares two safetensors files tensor by tensor (e.g. C++ gradients vs the PyTorch reference).

For each name: rel = ||a - b|| / max(||b||, 1e-30) (Frobenius norms, in float64). A tensor passes
when rel <= --rtol. The one exception is a tensor whose exact value is zero (--zero-names, a
regular expression): rounding noise on both sides makes its relative error meaningless, so it
passes when ||a|| <= --atol and ||b|| <= --atol. Prints the worst --top as a table, then one JSON
summary line with every tensor's relative error. Exit status: 0 all pass, 1 any failure (including
differing name sets or shapes), 2 unreadable input.

For BERT gradients: d loss / d attention.self.key.bias is zero in exact arithmetic (softmax is
invariant to a per-query constant), so the default --zero-names names those tensors; give --atol
(for example 1e-9) when comparing a float32 implementation against the float64 reference. Every
other tensor, however small its gradient, is held to --rtol.

--min-cosine C adds a second bound for reduced-precision runs (bf16 products): every tensor not
in --zero-names must also have cosine(a, b) >= C (printed as `cos`).

--loss-a / --loss-b take the JSON lines printed by `bert_torch.py grad` (or any flat JSON objects
of numbers / nested lists of numbers) and compare each key the same way (--loss-rtol, default rtol).
String values (such as bertps's "precision") are labels, not compared.
"""

import argparse
import json
import math
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

TINY = 1e-30


def rel_err(a, b):
    """Returns (rel, abs) errors in float64; inf when shapes differ or values are not finite."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return math.inf, math.inf
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf, math.inf
    diff = float(np.linalg.norm((a - b).ravel()))
    return diff / max(float(np.linalg.norm(b.ravel())), TINY), diff


def compare_tensors(ta, tb, names_from="both"):
    """Returns (rows, problems). rows: dicts with name/shape/norm_b/abs/rel/max_abs."""
    problems = []
    na, nb = set(ta), set(tb)
    if names_from == "a":
        names = [n for n in ta]
        missing = sorted(na - nb)
        if missing:
            problems.append(f"B lacks {len(missing)} tensor(s) of A: {missing}")
    elif names_from == "b":
        names = [n for n in tb]
        missing = sorted(nb - na)
        if missing:
            problems.append(f"A lacks {len(missing)} tensor(s) of B: {missing}")
    else:
        names = [n for n in ta]
        if na != nb:
            problems.append(f"name sets differ: only in A {sorted(na - nb)}; only in B {sorted(nb - na)}")
    rows = []
    for n in names:
        if n not in ta or n not in tb:
            continue
        a, b = ta[n], tb[n]
        if a.shape != b.shape:
            problems.append(f"'{n}': shape {list(a.shape)} vs {list(b.shape)}")
        rel, diff = rel_err(a, b)
        max_abs = (float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                   if a.shape == b.shape and a.size else (0.0 if a.shape == b.shape else math.inf))
        rows.append({"name": n, "shape": list(b.shape), "norm_b": float(np.linalg.norm(
            np.asarray(b, np.float64).ravel())), "abs": diff, "rel": rel, "max_abs": max_abs})
    return rows, problems


def cosine(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    if a.shape != b.shape or not (np.isfinite(a).all() and np.isfinite(b).all()):
        return -math.inf
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return float(np.dot(a, b)) / (na * nb)


def compare_losses(la, lb):
    """Returns (rows, problems) for two dicts of numbers / nested number lists."""
    la = {k: v for k, v in la.items() if not isinstance(v, str)}
    lb = {k: v for k, v in lb.items() if not isinstance(v, str)}
    problems = []
    if set(la) != set(lb):
        problems.append(f"loss keys differ: only in A {sorted(set(la) - set(lb))}; "
                        f"only in B {sorted(set(lb) - set(la))}")
    rows = []
    for k in la:
        if k not in lb:
            continue
        try:
            rel, diff = rel_err(np.asarray(la[k], np.float64), np.asarray(lb[k], np.float64))
        except (TypeError, ValueError):
            problems.append(f"loss key '{k}': not numeric")
            continue
        rows.append({"name": k, "a": la[k], "b": lb[k], "abs": diff, "rel": rel})
    return rows, problems


def _parse_json_arg(text, what):
    if text.startswith("@"):
        with open(text[1:]) as f:
            text = f.read()
    # Accept the last non-empty line (so a whole stdout capture works).
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    obj = json.loads(lines[-1] if lines else "")
    if not isinstance(obj, dict):
        raise ValueError(f"{what} is not a JSON object")
    return obj


def main(argv=None):
    ap = argparse.ArgumentParser(prog="compare.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="safetensors file A (e.g. the implementation under test)")
    ap.add_argument("b", help="safetensors file B (the reference; its norms are the denominators)")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=0.0,
                    help="the bound on ||a|| and ||b|| of the --zero-names tensors (default 0)")
    ap.add_argument("--zero-names", default=r"attention\.self\.key\.bias$",
                    help="regular expression of the tensors whose exact value is zero "
                         "(default: BERT's attention key biases)")
    ap.add_argument("--names-from", type=str.lower, choices=("a", "b", "both"), default="both",
                    help="both (default): name sets must be identical; A (or B): compare that "
                         "file's names, the other file must hold them and may hold more")
    ap.add_argument("--min-cosine", type=float, default=None,
                    help="also require cosine(a, b) >= this of every tensor not in --zero-names")
    ap.add_argument("--loss-a", help="JSON loss line of A (or @file)")
    ap.add_argument("--loss-b", help="JSON loss line of B (or @file)")
    ap.add_argument("--loss-rtol", type=float, default=None, help="default: --rtol")
    ap.add_argument("--top", type=int, default=10, help="rows in the worst-first table")
    args = ap.parse_args(argv)

    try:
        ta, _ = safetensors_io.load(args.a)
        tb, _ = safetensors_io.load(args.b)
    except (OSError, ValueError) as e:
        print(f"compare.py: error: {e}", file=sys.stderr)
        return 2

    rows, problems = compare_tensors(ta, tb, args.names_from)
    zero = re.compile(args.zero_names) if args.zero_names else None
    for r in rows:
        r["zero"] = bool(zero and zero.search(r["name"]))
        norm_a = float(np.linalg.norm(np.asarray(ta[r["name"]], np.float64).ravel()))
        r["cos"] = cosine(ta[r["name"]], tb[r["name"]])
        r["ok"] = ((norm_a <= args.atol and r["norm_b"] <= args.atol) if r["zero"]
                   else r["rel"] <= args.rtol and
                   (args.min_cosine is None or r["cos"] >= args.min_cosine))
    failed = [r for r in rows if not r["ok"]]
    rows.sort(key=lambda r: (r["zero"], -r["rel"]))

    print(f"{'tensor':<56} {'shape':<14} {'||b||':>10} {'||a-b||':>10} {'rel':>10} {'max|a-b|':>10} "
          f"{'cos':>10}")
    for r in rows[:args.top]:
        flag = ("" if r["ok"] else "  FAIL") + ("  (exact value 0: |a|,|b| <= atol)" if r["zero"] else "")
        print(f"{r['name']:<56} {str(r['shape']):<14} {r['norm_b']:>10.3e} {r['abs']:>10.3e} "
              f"{r['rel']:>10.3e} {r['max_abs']:>10.3e} {r['cos']:>10.7f}{flag}")
    for p in problems:
        print(f"PROBLEM: {p}")

    summary = {
        "ok": not failed and not problems, "tensors": len(rows), "failed": len(failed),
        "failed_names": [r["name"] for r in failed][:20], "rtol": args.rtol, "atol": args.atol,
        "worst": rows[0]["name"] if rows else None,
        "worst_rel": (rows[0]["rel"] if rows and math.isfinite(rows[0]["rel"]) else
                      (None if not rows else "inf")),
        "zero_names": [r["name"] for r in rows if r["zero"]],
        "rel": {r["name"]: (r["rel"] if math.isfinite(r["rel"]) else "inf")
                for r in rows if not r["zero"]},
        "min_cosine": args.min_cosine,
        "worst_cos": min((r["cos"] for r in rows if not r["zero"]), default=None),
        "problems": problems,
    }

    if args.loss_a is not None or args.loss_b is not None:
        if args.loss_a is None or args.loss_b is None:
            print("compare.py: error: give both --loss-a and --loss-b", file=sys.stderr)
            return 2
        try:
            la = _parse_json_arg(args.loss_a, "--loss-a")
            lb = _parse_json_arg(args.loss_b, "--loss-b")
        except (OSError, ValueError) as e:
            print(f"compare.py: error: bad loss JSON: {e}", file=sys.stderr)
            return 2
        lrtol = args.rtol if args.loss_rtol is None else args.loss_rtol
        lrows, lproblems = compare_losses(la, lb)
        lfailed = [r for r in lrows if not r["rel"] <= lrtol]
        for r in lrows:
            a, b = r["a"], r["b"]
            shown = (f"{a!r:>22} {b!r:>22}" if not isinstance(a, list) else f"{'[list]':>22} {'[list]':>22}")
            print(f"loss {r['name']:<12} {shown} rel {r['rel']:.3e}{'  FAIL' if r in lfailed else ''}")
        for p in lproblems:
            print(f"PROBLEM: {p}")
        summary["loss"] = {r["name"]: (r["rel"] if math.isfinite(r["rel"]) else "inf") for r in lrows}
        summary["loss_rtol"] = lrtol
        summary["problems"] = problems + lproblems
        summary["ok"] = summary["ok"] and not lfailed and not lproblems
        summary["failed"] += len(lfailed)
        summary["failed_names"] += [f"loss:{r['name']}" for r in lfailed]

    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
