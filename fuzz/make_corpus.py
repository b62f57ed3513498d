#!/usr/bin/env python3
"""Writes the seed corpus of the file readers' fuzz targets into fuzz/corpus/<target>/: a few small
valid files and edge cases (standard library only), plus copies of the tests' small safetensors
fixtures, written by PyTorch (tests/data). fuzz_checkpoint's seeds are checkpoints cgrad writes:
make_checkpoint_corpus.c (built with the fuzz targets) makes them."""
import gzip
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = ["st_linear.safetensors", "st_linear_f64.safetensors", "st_linear_io.safetensors", "st_mlp_io.safetensors"]


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors ----------------------------------------------------------------------------------
DSIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "BOOL": 1, "F64": 8, "I32": 4}


def safetensors(tensors, meta=None, pad=True):
    """tensors: [(name, dtype, shape)], data 0, 1, 2, ... packed in order."""
    header, at = {}, 0
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape in tensors:
        n = DSIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(i % 251 for i in range(at))


write("fuzz_safetensors", "empty_object", safetensors([]))
write("fuzz_safetensors", "metadata_only", safetensors([], {"format": "pt", "note": "é"}))
write("fuzz_safetensors", "f32_2d", safetensors([("w", "F32", [2, 3]), ("b", "F32", [2])], {"format": "pt"}))
write("fuzz_safetensors", "scalar_and_empty", safetensors([("s", "F32", []), ("e", "F32", [0, 5])], pad=False))
write("fuzz_safetensors", "dtypes", safetensors([("h", "F16", [3]), ("bf", "BF16", [1, 2]), ("i", "I64", [2]),
                                                 ("u", "U8", [5]), ("ok", "BOOL", [1]), ("d", "F64", [1])]))
write("fuzz_safetensors", "eight_dims", safetensors([("x", "F32", [1, 2, 1, 2, 1, 1, 2, 1])]))
write("fuzz_safetensors", "zero_dim_huge", safetensors([("z", "F32", [0, 4294967296, 4294967296])]))
UNSORTED = b'{"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
write("fuzz_safetensors", "unsorted_offsets", struct.pack("<Q", len(UNSORTED)) + UNSORTED + bytes(range(8)))

for name in FIXTURES:
    shutil.copyfile(os.path.join(HERE, "..", "tests", "data", name), os.path.join(HERE, "corpus", "fuzz_safetensors", name))

# ---- IDX ------------------------------------------------------------------------------------------
def idx(dims, data_len=None, type_=0x08, extra=b""):
    n = 1
    for d in dims:
        n *= d
    n = n if data_len is None else data_len
    return bytes([0, 0, type_, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + \
        bytes(i % 251 for i in range(n)) + extra


write("fuzz_idx", "labels", idx([10]))
write("fuzz_idx", "images", idx([2, 3, 3]))
write("fuzz_idx", "two_dims", idx([3, 4]))
write("fuzz_idx", "four_dims", idx([1, 2, 2, 2]))
write("fuzz_idx", "truncated", idx([2, 28, 28], data_len=100))
write("fuzz_idx", "oversized", idx([4], extra=b"xyz"))
write("fuzz_idx", "float32", idx([2], data_len=8, type_=0x0D))
write("fuzz_idx", "huge_dims", idx([0xFFFFFFFF, 0xFFFFFFFF, 2], data_len=16))
write("fuzz_idx", "images.gz", gzip.compress(idx([2, 5, 5]), mtime=0))
write("fuzz_idx", "two_members.gz", gzip.compress(idx([6])[:5], mtime=0) + gzip.compress(idx([6])[5:], mtime=0))
write("fuzz_idx", "zeros.gz", gzip.compress(idx([64, 64]), compresslevel=9, mtime=0))
