"""Compile _awq_planes_kernel for sm_90 on the CPU (as test_sm90_compile does) and report per-K-tile
SASS metrics. Usage: .venv/bin/python reports/kernels/data/call15/planes_sass.py [module_path] [--dump DIR] [--cfg BN,BK,W,S ...]"""

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)
ROOT = Path(__file__).resolve().parents[4]  # the repository
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kernels_tuning"))
import triton  # noqa
from kernels_tuning.space import KernelConfig as C

BIN = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
N, K = 5120, 6144


def load(path):
    spec = importlib.util.spec_from_file_location("planes_variant", path)
    m = importlib.util.module_from_spec(spec)
    sys.modules["planes_variant"] = m
    spec.loader.exec_module(m)
    return m


def compile_(mod, cfg, act):
    from test_sm90_compile import _compile

    fn = mod._awq_planes_kernel
    vals = dict(
        A=f"*{act}",
        QW="*i32",
        QZ="*i32",
        S32="*i32",
        C=f"*{act}",
        WS="*fp32",
        LOCKS="*i32",
        M=16,
        N=N,
        K=K,
        group_size=128,
        stride_am=K,
        stride_qk=N // 8,
        stride_zg=N // 8,
        stride_sg=N // 2,
        stride_cm=N,
        GROUP_SIZE_M=1,
        SPLIT_K=1,
    )
    consts = dict(
        BLOCK_SIZE_M=16, BLOCK_SIZE_N=cfg.BLOCK_SIZE_N, BLOCK_SIZE_K=cfg.BLOCK_SIZE_K, USE_ASM=True
    )
    extra = getattr(mod, "EXTRA_CONSTS", None)
    if extra:
        consts.update(extra(cfg))
    consts = {k: v for k, v in consts.items() if k in fn.arg_names}
    vals = {k: v for k, v in vals.items() if k in fn.arg_names}
    for n in fn.arg_names:
        if n not in vals and n not in consts:
            raise SystemExit(f"unknown arg {n}")
    return _compile(fn, vals, consts, cfg)


CATS = {
    "LOP3": r"^LOP3",
    "PRMT": r"^PRMT",
    "SHF": r"^SHF|^SHL|^SHR",
    "HFMA2": r"^HFMA2",
    "HMUL2": r"^HMUL2",
    "HADD2": r"^HADD2",
    "HMMA": r"^HMMA",
    "LDS": r"^LDS(?!M)",
    "LDSM": r"^LDSM",
    "STS": r"^STS",
    "BAR": r"^BAR",
    "LDG": r"^LDG(?!STS)",
    "LDGSTS": r"^LDGSTS",
    "LDGDEPBAR/DEPBAR": r"^LDGDEPBAR|^DEPBAR",
    "SHFL": r"^SHFL",
    "MOV": r"^MOV|^IMAD.MOV",
    "IMAD/IADD": r"^IMAD|^IADD|^LEA",
    "F2F/I2F": r"^F2F|^I2F|^F2I",
}


def sass_lines(cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run(
            [str(BIN / "nvdisasm"), "-c", "-g", "-hex", f.name], capture_output=True, text=True
        ).stdout
        if not out.strip():
            out = subprocess.run(
                [str(BIN / "cuobjdump"), "-sass", f.name], capture_output=True, text=True
            ).stdout
        use = subprocess.run(
            [str(BIN / "cuobjdump"), "--dump-resource-usage", f.name],
            capture_output=True,
            text=True,
        ).stdout
    return out, use


def parse(out):
    """list of (addr, label_or_None, opcode, text)"""
    ins, labels = [], {}
    cur_label = None
    for ln in out.splitlines():
        m = re.match(r"^\s*(\.L_x_\d+|\.L\w+):", ln)
        if m:
            cur_label = m.group(1)
            continue
        m = re.match(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);", ln)
        if m:
            addr = int(m.group(1), 16)
            text = m.group(2).strip()
            if cur_label:
                labels[cur_label] = addr
                cur_label = None
            body = re.sub(r"^@!?U?P\w+\s+", "", text)
            ins.append((addr, body.split()[0], text))
    return ins, labels


def main_loop(ins, labels):
    """The loop with the most HMMA: a backward branch whose target..branch range has the most HMMA."""
    best = None
    for _i, (addr, op, text) in enumerate(ins):
        if op.startswith("BRA"):
            m = re.search(r"(\.L_x_\d+|0x[0-9a-f]+)", text)
            if not m:
                continue
            t = m.group(1)
            tgt = labels.get(t) if t.startswith(".L") else int(t, 16)
            if tgt is None or tgt > addr:
                continue
            body = [x for x in ins if tgt <= x[0] <= addr]
            h = sum(1 for x in body if x[1].startswith("HMMA"))
            if best is None or h > best[0]:
                best = (h, body)
    return best[1] if best else []


def metrics(k):
    out, use = sass_lines(k.asm["cubin"])
    ins, labels = parse(out)
    body = main_loop(ins, labels)
    c = Counter()
    for _, op, _ in body:
        for cat, rx in CATS.items():
            if re.match(rx, op):
                c[cat] += 1
    fields = dict(kv.split(":") for kv in use.split() if kv.count(":") == 1)
    tt = k.asm["ttgir"]
    loop = tt.split("scf.for")[1].split("scf.yield")[0] if "scf.for" in tt else ""
    r = {
        "loop_ins": len(body),
        "total_ins": len(ins),
        **{k2: c[k2] for k2 in CATS},
        "REG": int(fields.get("REG", -1)),
        "STACK": int(fields.get("STACK", -1)),
        "smem": int(k.metadata.shared),
        "ttgir_loop_cvt": loop.count("ttg.convert_layout"),
        "ttgir_loop_local_alloc": loop.count("ttg.local_alloc"),
        "ttgir_loop_local_load": loop.count("ttg.local_load"),
        "ttgir_loop_dot": loop.count("tt.dot"),
    }
    return r, out, body


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "module",
        nargs="?",
        default=str(ROOT / "kernels_tuning" / "kernels" / "int4_awq_planes.py"),
    )
    ap.add_argument("--dump")
    ap.add_argument("--act", default="bf16")
    ap.add_argument("--cfg", nargs="*", default=["256,128,4,3", "256,128,8,3", "128,128,4,3"])
    a = ap.parse_args()
    mod = load(a.module)
    res = {}
    for spec in a.cfg:
        bn, bk, w, s = map(int, spec.split(","))
        cfg = C(16, bn, bk, 1, w, s)
        k = compile_(mod, cfg, a.act)
        r, out, body = metrics(k)
        res[f"BN{bn}_BK{bk}_w{w}_s{s}"] = r
        if a.dump:
            d = Path(a.dump)
            d.mkdir(parents=True, exist_ok=True)
            tag = f"BN{bn}_BK{bk}_w{w}_s{s}_{a.act}"
            (d / f"{tag}.ttgir").write_text(k.asm["ttgir"])
            (d / f"{tag}.ptx").write_text(k.asm["ptx"])
            (d / f"{tag}.sass").write_text(out)
            (d / f"{tag}.loop.sass").write_text("\n".join(f"{x[0]:05x} {x[2]}" for x in body))
    for kk, r in res.items():
        print(kk, json.dumps(r))
