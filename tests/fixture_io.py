"""The safetensors writer the fixture scripts share (tests/make_*_fixtures.py), written here so that
only torch is needed: an 8-byte little-endian header size, the JSON header padded with spaces to a
multiple of 8, then each tensor's raw little-endian bytes, in name order.

Import it from a script in tests/ as `from fixture_io import save` (and `start` for the training-step
fixtures' command line)."""
import argparse
import json
import os
import struct

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def start(doc):
    """The command line of a script that records training steps (--device, --out, described by the first
    paragraph of doc), with TF32 off and torch.manual_seed(0): (torch.device, output directory)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default=os.path.join(HERE, "data"))
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    return torch.device(a.device), a.out

CODES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
         torch.int32: "I32", torch.uint8: "U8"}


def save(tensors, path):
    """tensors {name: tensor, any device} as a safetensors file at path; prints its size."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to("cpu").contiguous()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": CODES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print("wrote", path, os.path.getsize(path), "bytes")
