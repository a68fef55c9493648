"""Write the load benchmark's model files with the formats' own Python writers:
a safetensors file and a GGUF file of about SIZE_MIB each, shaped like an LLM's
weights (F32 norms, F16 and BF16 matrices, a large embedding; the GGUF also Q8_0
and Q4_K blocks), and the same weights as a sharded checkpoint (a directory of 4
safetensors files and their index). Values are finite, so `--check` passes. Kept
between runs when the size matches.

usage: python make_files.py DIR [SIZE_MIB]"""
import json
import os
import sys

import numpy as np


def tensors(total, rng):
    """(name, kind, shape) up to about `total` bytes: 2-byte matrices mostly."""
    out, used, layer = [], 0, 0
    emb = (32000, 2048)  # 125 MiB in 2-byte types
    out.append(("token_embd.weight", "f16", emb))
    used += emb[0] * emb[1] * 2
    while used < total:
        for name, shape, kind in [("attn_norm.weight", (2048,), "f32"),
                                  ("attn_q.weight", (2048, 2048), "f16"),
                                  ("attn_k.weight", (512, 2048), "bf16"),
                                  ("ffn_up.weight", (5632, 2048), "f16"),
                                  ("ffn_down.weight", (2048, 5632), "f16")]:
            out.append((f"blk.{layer}.{name}", kind, shape))
            used += int(np.prod(shape)) * (4 if kind == "f32" else 2)
        layer += 1
    return out


def values(kind, shape, rng):
    x = rng.standard_normal(size=shape, dtype=np.float32) * 0.02
    if kind == "f32":
        return x
    if kind == "f16":
        return x.astype(np.float16)
    return (x.view(np.uint32) >> 16).astype(np.uint16)  # bf16 bits


def write_safetensors(path, total):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(1)
    data = {}
    for name, kind, shape in tensors(total, rng):
        v = values(kind, shape, rng)
        data[name] = v  # bf16 is stored as U16 bits: numpy has no bfloat16
    save_file(data, path, metadata={"format": "pt", "source": "lockstep bench"})


def write_gguf(path, total):
    import gguf
    rng = np.random.default_rng(2)
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(4096)
    w.add_embedding_length(2048)
    for i, (name, kind, shape) in enumerate(tensors(total, rng)):
        v = values(kind, shape, rng)
        if kind == "bf16":
            w.add_tensor(name, v, raw_dtype=gguf.GGMLQuantizationType.BF16)
        elif kind == "f16" and i % 7 == 3:  # some quantized blocks, as real files have
            q = gguf.quants.quantize(v.astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(name, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SHARDS = 4


def write_shards(folder, total):
    """The same weights in SHARDS safetensors files, tensors dealt in turn, and their
    Hugging Face index; the index is written last, so its presence says all is there"""
    from safetensors.numpy import save_file
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(1)
    specs, weight_map = tensors(total, rng), {}
    for s in range(SHARDS):
        name = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        data = {n: values(kind, shape, rng) for i, (n, kind, shape) in enumerate(specs) if i % SHARDS == s}
        path = os.path.join(folder, name)
        save_file(data, path + ".tmp", metadata={"format": "pt"})
        synced(path)
        weight_map.update({n: name for n in data})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def synced(path):
    """path + ".tmp" flushed to the disk (dirty pages cannot be dropped for the cold
    runs), then renamed to path"""
    with open(path + ".tmp", "rb+") as f:
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def main():
    out = sys.argv[1]
    mib = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    os.makedirs(out, exist_ok=True)
    for ext, writer in [("safetensors", write_safetensors), ("gguf", write_gguf)]:
        path = os.path.join(out, f"model-{mib}m.{ext}")
        if os.path.exists(path) and os.path.getsize(path) >= mib * 0.95 * (1 << 20):
            print(path)
            continue
        writer(path + ".tmp", mib << 20)
        synced(path)
        print(path)
    folder = os.path.join(out, f"model-{mib}m-shards")
    if not os.path.exists(os.path.join(folder, "model.safetensors.index.json")):
        write_shards(folder, mib << 20)
    print(folder)


if __name__ == "__main__":
    main()
