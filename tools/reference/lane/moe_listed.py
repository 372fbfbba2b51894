"""shardplan's saved tensors per transformer block (`shardplan show model SPEC --graph`, the layers' activation
lists; simulator/model/moe_tensors.cpp and layer_builders.cpp) at T tokens and, on the expert side of an MoE
layer, the R rows the rank's experts received; each tensor one allocation rounded up to 512 B (the lane's
tracker rounds every allocation so)."""
import json
import subprocess
import tempfile

from lane.tracker import round_alloc
# The CPU's router dtypes and the list's dtype sizes (tools/reference/moe_tensors.py), the expert side's tensors
# (tools/reference/moe_ep.py): one place each.
from moe_ep import expert_side
from moe_tensors import BYTES, CPU_BF16, IMPL_ONLY

# torchtitan's grouped experts under EP; eager, no fp32 norm, no TP
ONLY = ("", *IMPL_ONLY["moe_grouped"], "moe_ep")
# Hugging Face transformers' decoders (tools/reference/hf_moe_gloo.py): the Python fp32 RMSNorm (--fp32-norm) and
# the MoE implementation (--moe-impl) of the comparison, no EP; their routers compute in fp32 on the CPU as well.
HF_ONLY = {impl: ("", "fp32_norm", *IMPL_ONLY["moe_" + impl.replace("-", "_")])
           for impl in ("grouped", "loop", "hf-grouped-mm", "hf-eager")}


def graph(bin_, spec):
    with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
        json.dump(spec, fh)
        fh.flush()
        return json.loads(subprocess.run([bin_, "show", "model", fh.name, "--graph"], check=True,
                                          capture_output=True, text=True).stdout)


def listed_blocks(bin_, spec, tokens, received, top_k=None, only=ONLY, cpu_bf16=CPU_BF16, per_tensor=None):
    """{block index: bytes} of the tensors each block's layers save (eager, the `only` conditions of `only`);
    `received`: {block index: R} for the MoE blocks. Per-token sizes are elements per token; an expert-side
    tensor's per-token size counts top_k rows per token, so its bytes are per_token / top_k · R · dtype. `spec`
    may be a Hugging Face config.json (then top_k is given); `per_tensor` (a dict) gets {block: {layer.tensor:
    bytes}}."""
    k = top_k or spec["moe"]["top_k"]
    out = {}
    layers = graph(bin_, spec)["layers"]
    for layer in layers:
        name = layer.get("name", "")
        if not name.startswith("blocks."):
            continue
        routed = expert_side(layer, {a["name"] for a in layer["activations"]})  # the graph's expert_rows
        block = name.split(".")[1]
        for a in layer["activations"]:
            if not a["eager"] or a.get("only", "") not in only:
                continue
            b = 2 if layer["kind"] == "moe" and a["name"] in cpu_bf16 else BYTES[a["dtype"]]
            rows = received[block] / k if layer["kind"] == "moe" and a["name"] in routed else tokens
            nbytes = round_alloc(int(round(a["per_token"] * rows * b)))
            out[block] = out.get(block, 0) + nbytes
            if per_tensor is not None:
                per_tensor.setdefault(block, {})[name.split(".", 2)[-1] + "." + a["name"]] = nbytes
    return out
