#!/usr/bin/env python3
"""The dtype fixture of tests/test_safetensors.c: tensors of every dtype cgrad reads and writes,
with values chosen to catch a wrong bit (signed zeros, subnormals, infinities, NaN, the extremes of
each integer type), plus a float64 tensor that cgrad converts only when asked.

    python3 tests/make_torch_dtype_fixtures.py              # write tests/data/torch_dtypes.safetensors
                                                            # with PyTorch (safetensors.torch.save_file)
    python3 tests/make_torch_dtype_fixtures.py --no-torch   # write the same tensors by hand (struct and
                                                            # json: where PyTorch is not installed)
    python3 tests/make_torch_dtype_fixtures.py --check FILE # PyTorch loads FILE, a file cgrad wrote
                                                            # (test_safetensors with CG_TEST_OUT_DIR set
                                                            # writes cgrad_dtypes.safetensors there): every
                                                            # tensor of SPEC but "f64", bit for bit

SPEC is the specification: test_safetensors.c holds the same values, written out. Each value is
given as its bits (little-endian, the element's size), so that nothing here rounds. With PyTorch,
the script also checks that PyTorch converts "f64" to float32, bfloat16 and float16 as the C test
expects cgrad to (through float32: 1 + 2^-8 + 2^-40 becomes bfloat16 1.0, not 1 + 2^-7)."""
import json
import os
import struct
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "torch_dtypes.safetensors")

# name: (safetensors dtype, shape, struct format of one element, the elements' bits or values)
SPEC = {
    "f32": ("F32", [3, 3], "<I", [0x00000000, 0x80000000, 0x3F800000, 0xC0200000, 0x00000001,  # 0 -0 1 -2.5 2^-149
                                  0x007FFFFF, 0x7F7FFFFF, 0x7F800000, 0xFF800000]),  # max subnormal, max, inf, -inf
    "bf16": ("BF16", [3, 4], "<H", [0x0000, 0x8000, 0x3F80, 0xC020, 0x0001, 0x007F,  # 0 -0 1 -2.5 subnormals
                                    0x7F7F, 0x7F80, 0xFF80, 0x7FC0, 0x3F81, 0x4049]),  # max inf -inf nan 1+2^-7 3.140625
    "f16": ("F16", [2, 6], "<H", [0x0000, 0x8000, 0x3C00, 0xC100, 0x0001, 0x03FF,  # 0 -0 1 -2.5 subnormals
                                  0x0400, 0x7BFF, 0x7C00, 0xFC00, 0x7E00, 0x3555]),  # 2^-14 65504 inf -inf nan ~1/3
    "i64": ("I64", [8], "<q", [-(2**63), 2**63 - 1, -1, 0, 1, 2**53 + 1, -(2**53 + 1), 0x0102030405060708]),
    "i32": ("I32", [2, 3], "<i", [-(2**31), 2**31 - 1, -1, 0, 1, 2**24 + 1]),
    "u8": ("U8", [6], "<B", [0, 1, 127, 128, 254, 255]),
    "bool": ("BOOL", [5], "<B", [1, 0, 0, 1, 1]),
    "scalar_f32": ("F32", [], "<I", [0x80000001]),  # 0-dim: -2^-149
    "scalar_bf16": ("BF16", [], "<H", [0xBF80]),    # 0-dim: -1
    "empty_i64": ("I64", [0, 3], "<q", []),
    # cgrad has no float64 tensors: 1 + 2^-8 + 2^-40, -0, 1e300, 2^-149, NaN, 0.1
    "f64": ("F64", [6], "<Q", [0x3FF0100000001000, 0x8000000000000000, 0x7E37E43C8800759C, 0x36A0000000000000,
                               0x7FF8000000000000, 0x3FB999999999999A]),
}
# "f64" converted through float32, as cgrad's cg_safetensors_tensor_as and PyTorch's .to() convert it.
F64_AS = {
    "F32": ("<I", [0x3F808000, 0x80000000, 0x7F800000, 0x00000001, 0x7FC00000, 0x3DCCCCCD]),
    "BF16": ("<H", [0x3F80, 0x8000, 0x7F80, 0x0000, 0x7FC0, 0x3DCD]),
    "F16": ("<H", [0x3C04, 0x8000, 0x7C00, 0x0000, 0x7E00, 0x2E66]),
}


def raw(fmt, values):
    return b"".join(struct.pack(fmt, v) for v in values)


def write_by_hand(path):
    """The safetensors format written out: an 8-byte little-endian header length, the JSON header
    (padded with spaces to a multiple of 8), then every tensor's bytes packed in header order."""
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dtype, shape, fmt, values) in SPEC.items():
        b = raw(fmt, values)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)
    print("wrote", path, "(by hand, without PyTorch)")


def torch_dtypes():
    import torch
    return {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64,
            "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool, "F64": torch.float64}


def as_torch(dtype, shape, fmt, values):
    import torch
    dt = torch_dtypes()[dtype]
    if not values:
        return torch.empty(shape, dtype=dt)
    return torch.frombuffer(bytearray(raw(fmt, values)), dtype=dt).reshape(shape).clone()


def tensor_bytes(t):
    import torch
    return bytes(t.contiguous().reshape(-1).view(torch.uint8).tolist())


def write_with_torch(path):
    from safetensors.torch import save_file
    tensors = {name: as_torch(*spec) for name, spec in SPEC.items()}
    for dtype, (fmt, bits) in F64_AS.items():  # PyTorch rounds float64 as cgrad does
        got = tensor_bytes(tensors["f64"].to(torch_dtypes()[dtype]))
        assert got == raw(fmt, bits), ("f64 to", dtype, got.hex(), raw(fmt, bits).hex())
    save_file(tensors, path, metadata={"format": "pt"})
    print("wrote", path, "(with PyTorch)")


def check(path):
    from safetensors.torch import load_file
    got = load_file(path)
    expected = {name: spec for name, spec in SPEC.items() if spec[0] != "F64"}
    bad = sorted(set(got) ^ set(expected))
    for name, spec in expected.items():
        if name not in got:
            continue
        want = as_torch(*spec)
        t = got[name]
        if t.dtype != want.dtype or list(t.shape) != spec[1] or tensor_bytes(t) != tensor_bytes(want):
            print("mismatch:", name, t.dtype, list(t.shape), tensor_bytes(t).hex(), "expected", want.dtype, spec[1],
                  tensor_bytes(want).hex())
            bad.append(name)
    if bad:
        print("FAILED:", path, "differs in", bad)
        sys.exit(1)
    print("PyTorch loads", path, "(cgrad-written):", len(expected), "tensors, bit for bit")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--check"] and len(args) == 2:
        check(args[1])
    elif args == ["--no-torch"]:
        write_by_hand(OUT)
    elif not args:
        write_with_torch(OUT)
    else:
        sys.exit(__doc__)
