"""Block-scaled formats in the reference lane: torchao 0.18.0's own casts on the CPU give the bytes of an
MXFP8 and an NVFP4 copy of a bf16 [rows, cols] tensor, against the per-element bytes shardplan charges for
them (simulator/lowering/units_blockfp.cpp fp8_copy_bytes_per_elem, pinned by tests/simulator/test_blockfp.cpp):
MXFP8 = 1 (float8_e4m3fn) + 1/32 (one float8_e8m0fnu scale per 32 along the last dim); NVFP4 = 1/2 (two e2m1
values per byte) + 1/16 (one float8_e4m3fn scale per 16) plus one fp32 per-tensor scale.

Only the bytes are compared: shardplan exposes these copies as workspace and cast traffic, not as a listed
tensor, so the comparison is against the constants those use. Needs the project's Python environment
(tools/pyenv.sh pins torchao); outside CI it skips when torchao is not importable, in CI (CI=true) its absence
is a failure.
"""
import unittest

from lane_env import have

HAVE_TORCHAO = have("torch", "torchao.prototype.mx_formats.mx_tensor", "torchao.prototype.mx_formats.nvfp4_tensor")
if HAVE_TORCHAO:
    import torch
    from torchao.prototype.mx_formats.mx_tensor import MXTensor
    from torchao.prototype.mx_formats.nvfp4_tensor import NVFP4Tensor

# shardplan's bytes per element of each copy (units_blockfp.cpp).
MXFP8_BYTES_PER_ELEM = 1.0 + 1.0 / 32.0
NVFP4_BYTES_PER_ELEM = 0.5 + 1.0 / 16.0


def nbytes(t):
    return t.numel() * t.element_size()


@unittest.skipUnless(HAVE_TORCHAO, "torchao not importable (tools/pyenv.sh pins it)")
class BlockScaledBytes(unittest.TestCase):
    # A Llama-3-8B MLP down projection's weight shape, [hidden, ffn] = [4096, 14336], cut to 256 rows to keep
    # the CPU cast quick: 256 x 14336 = 3,670,016 elements.
    SHAPE = (256, 14336)

    def setUp(self):
        torch.manual_seed(0)
        self.x = torch.randn(*self.SHAPE, dtype=torch.bfloat16)
        self.n = self.x.numel()

    def test_mxfp8(self):
        m = MXTensor.to_mx(self.x, torch.float8_e4m3fn, 32)
        self.assertEqual(m.qdata.dtype, torch.float8_e4m3fn)
        self.assertEqual(m.scale.dtype, torch.float8_e8m0fnu)
        self.assertEqual(nbytes(m.qdata), self.n)            # 3,670,016
        self.assertEqual(nbytes(m.scale), self.n // 32)      # 114,688
        self.assertEqual(nbytes(m.qdata) + nbytes(m.scale), self.n * MXFP8_BYTES_PER_ELEM)

    def test_nvfp4(self):
        amax = self.x.abs().max().float()
        n = NVFP4Tensor.to_nvfp4(self.x, per_tensor_scale=amax / (6.0 * 448.0))  # e2m1 max x e4m3 max
        self.assertEqual(n.scale.dtype, torch.float8_e4m3fn)
        self.assertEqual(nbytes(n.qdata), self.n // 2)       # 1,835,008
        self.assertEqual(nbytes(n.scale), self.n // 16)      # 229,376
        self.assertEqual(nbytes(n.per_tensor_scale), 4)      # one fp32 per tensor, left out per element
        self.assertEqual(nbytes(n.qdata) + nbytes(n.scale), self.n * NVFP4_BYTES_PER_ELEM)


if __name__ == "__main__":
    unittest.main()
