#!/usr/bin/env python3
"""The promotion table of tests/test_promotion.c: for every pair of cgrad's dtypes, each operand
dimensioned (shape (2,)) or 0-dim, torch.result_type of the two tensors and torch.promote_types of
their dtypes ("error" where PyTorch refuses).

    python3 tests/make_promotion_fixtures.py              # ask PyTorch (writes tests/data/promotion.txt)
    python3 tests/make_promotion_fixtures.py --no-torch   # the same table from PyTorch's documented
                                                          # rules, written out below by hand

Line format: <a dtype> <a: 1d|0d> <b dtype> <b: 1d|0d> <result_type> <promote_types>.
The hand-written rules share nothing with cgrad's src/dtype.c: promote_types is a table typed in
from PyTorch's documentation, result_type the documentation's wording (operands of the highest
category among the dimensioned ones decide; 0-dim operands decide only from a higher category)."""
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "promotion.txt")
DTYPES = ["float32", "bfloat16", "float16", "int64", "int32", "uint8", "bool"]

# torch.promote_types, row by column in the order of DTYPES.
HAND_PROMOTE = """
          float32  bfloat16 float16  int64    int32    uint8    bool
float32   float32  float32  float32  float32  float32  float32  float32
bfloat16  float32  bfloat16 float32  bfloat16 bfloat16 bfloat16 bfloat16
float16   float32  float32  float16  float16  float16  float16  float16
int64     float32  bfloat16 float16  int64    int64    int64    int64
int32     float32  bfloat16 float16  int64    int32    int32    int32
uint8     float32  bfloat16 float16  int64    int32    uint8    uint8
bool      float32  bfloat16 float16  int64    int32    uint8    bool
"""


def hand_promote(a, b):
    rows = [line.split() for line in HAND_PROMOTE.strip().splitlines()]
    header = rows[0]
    table = {row[0]: dict(zip(header, row[1:])) for row in rows[1:]}
    return table[a][b]


def hand_category(dt):
    return "bool" if dt == "bool" else "float" if dt in ("float32", "bfloat16", "float16") else "int"


def hand_result_type(operands):
    """operands: (dtype, is_0dim) pairs. Dimensioned operands take priority over 0-dim ones; a 0-dim
    operand counts only when its category is above every dimensioned operand's, and then the 0-dim
    operands of that highest category decide."""
    order = ["bool", "int", "float"]
    dimmed = [dt for dt, zero in operands if not zero]
    zeros = [dt for dt, zero in operands if zero]
    group = dimmed
    if zeros:
        top_zero = max(order.index(hand_category(dt)) for dt in zeros)
        top_dim = max((order.index(hand_category(dt)) for dt in dimmed), default=-1)
        if top_zero > top_dim:
            group = [dt for dt in zeros if order.index(hand_category(dt)) == top_zero]
    result = group[0]
    for dt in group[1:]:
        result = hand_promote(result, dt)
    return result


def hand_rows():
    for a in DTYPES:
        for a0 in (False, True):
            for b in DTYPES:
                for b0 in (False, True):
                    yield a, a0, b, b0, hand_result_type([(a, a0), (b, b0)]), hand_promote(a, b)


def torch_rows():
    import torch

    def name(dt):
        return str(dt).replace("torch.", "")

    dt = {name(getattr(torch, n)): getattr(torch, n) for n in DTYPES}
    for a in DTYPES:
        for a0 in (False, True):
            for b in DTYPES:
                for b0 in (False, True):
                    ta = torch.zeros(() if a0 else (2,), dtype=dt[a])
                    tb = torch.zeros(() if b0 else (2,), dtype=dt[b])
                    try:
                        r = name(torch.result_type(ta, tb))
                    except RuntimeError:
                        r = "error"
                    try:
                        p = name(torch.promote_types(dt[a], dt[b]))
                    except RuntimeError:
                        p = "error"
                    yield a, a0, b, b0, r, p


def write(rows, source):
    with open(OUT, "w") as f:
        f.write("# tests/make_promotion_fixtures.py (%s): a a_dims b b_dims result_type promote_types\n" % source)
        for a, a0, b, b0, r, p in rows:
            f.write("%s %s %s %s %s %s\n" % (a, "0d" if a0 else "1d", b, "0d" if b0 else "1d", r, p))
    print("wrote", OUT, "(%s)" % source)


if __name__ == "__main__":
    if sys.argv[1:] == ["--no-torch"]:
        write(hand_rows(), "by hand, from PyTorch's documented rules")
    elif not sys.argv[1:]:
        write(torch_rows(), "PyTorch " + __import__("torch").__version__)
    else:
        sys.exit(__doc__)
