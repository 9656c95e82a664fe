"""FP8 / FP4 block quantisation, as fake-quant (model forward) and as packed bytes (the cache).

Follows docs/design/equations.md §7. Three formats are part of the V4.1 model itself:

| tensor                      | element     | block | scale                          |
|-----------------------------|-------------|-------|--------------------------------|
| window K=V rows             | FP8 E4M3    | 32    | UE8M0: 2^ceil(log2(amax/448))  |
| compressed KV latents       | FP4 E2M1    | 16    | E4M3: fp8(amax/6)              |
| indexer queries and keys    | FP4 E2M1    | 32    | UE8M0: 2^ceil(log2(amax/6))    |

`fake_*` quantise then dequantise in fp32 (the value the model computes with); `pack_*` produce
the bytes a cache stores and `unpack_*` read them back to exactly the fake-quant values. A last
dimension the block does not divide is left unquantised, as in the reference.

Training uses a straight-through estimator: the forward sees the quantised value, the gradient
passes as if quantisation were the identity.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .fusion import fusable

FP8_MAX = 448.0
FP4_MAX = 6.0
FP4_VALUES = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                           -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=torch.float32)
# Midpoints between neighbouring E2M1 magnitudes. Round-half-to-even: a tie goes to the code with an
# even mantissa, so ties at 0.25, 1.25, 2.5, 5.0 round down and ties at 0.75, 1.75, 3.5 round up.
_FP4_MIDPOINTS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)
_FP4_TIE_UP = torch.tensor([False, True, False, True, False, True, False])

_LUT: dict[torch.device, torch.Tensor] = {}
_THR: dict[torch.device, torch.Tensor] = {}


def _lut(device: torch.device) -> torch.Tensor:
    if device not in _LUT:
        _LUT[device] = FP4_VALUES.to(device)
    return _LUT[device]


def _thresholds(device: torch.device) -> torch.Tensor:
    """A magnitude m gets code = number of thresholds <= m."""
    if device not in _THR:
        up = torch.nextafter(_FP4_MIDPOINTS, torch.full_like(_FP4_MIDPOINTS, float("inf")))
        _THR[device] = torch.where(_FP4_TIE_UP, _FP4_MIDPOINTS, up).to(device)
    return _THR[device]


def e2m1_codes(q: torch.Tensor) -> torch.Tensor:
    """Round pre-scaled values in [-6, 6] to E2M1 codes (uint8, sign in bit 3)."""
    mag = torch.bucketize(q.abs().contiguous(), _thresholds(q.device), right=True).to(torch.uint8)
    return mag | (torch.signbit(q).to(torch.uint8) << 3)


def pow2_ceil(t: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 t) for fp32 t > 0, from the IEEE-754 bits (the UE8M0 rounding)."""
    bits = t.float().contiguous().view(torch.int32)
    e = ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return torch.exp2(e.to(torch.float32))


def _ue8m0_byte(scale: torch.Tensor) -> torch.Tensor:
    """Exponent byte of a power-of-two fp32 scale: scale = 2^(byte - 127)."""
    return ((scale.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)


def _ue8m0_value(byte: torch.Tensor) -> torch.Tensor:
    return torch.exp2(byte.to(torch.float32) - 127.0)


# ------------------------------------------------------------------------------------------------
# Scales (shared by fake-quant and packing so both see the same numbers)
# ------------------------------------------------------------------------------------------------

def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)


def fp8_scale(blocks: torch.Tensor) -> torch.Tensor:
    return pow2_ceil(blocks.abs().amax(-1).clamp_min(1e-4) * (1.0 / FP8_MAX))


def fp4_scale(blocks: torch.Tensor, e4m3_scales: bool) -> torch.Tensor:
    amax = blocks.abs().amax(-1)
    if e4m3_scales:
        return (amax.clamp_min(FP4_MAX * 2.0 ** -9) / FP4_MAX).to(torch.float8_e4m3fn).float()
    return pow2_ceil(amax.clamp_min(FP4_MAX * 2.0 ** -126) * (1.0 / FP4_MAX))


# ------------------------------------------------------------------------------------------------
# Fake quantisation (quantise -> dequantise), with a straight-through gradient
# ------------------------------------------------------------------------------------------------

@fusable
def _fake_fp8_values(x: torch.Tensor, block: int) -> torch.Tensor:
    b = _blocks(x, block)
    s = fp8_scale(b).unsqueeze(-1)
    q = (b / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * s
    return q.reshape(x.shape)


@fusable
def _fake_fp4_values(x: torch.Tensor, block: int, e4m3_scales: bool) -> torch.Tensor:
    b = _blocks(x, block)
    s = fp4_scale(b, e4m3_scales).unsqueeze(-1)
    codes = e2m1_codes((b / s).clamp(-FP4_MAX, FP4_MAX))
    return (_lut(x.device)[codes.long()] * s).reshape(x.shape)


_FAKE_QUANT = [True]  # experiments only: `fake_quant_disabled()` turns the model's fake quantisation off


class fake_quant_disabled:
    """Context manager for diagnostics: inside it, fake_fp8 / fake_fp4 return their input unchanged
    (the model as if it computed in fp32). Never used by the model itself; default is on."""

    def __enter__(self):
        self._old = _FAKE_QUANT[0]
        _FAKE_QUANT[0] = False
        return self

    def __exit__(self, *exc):
        _FAKE_QUANT[0] = self._old
        return False


def _ste(x: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    q = q.to(x.dtype)
    if x.requires_grad:
        return x + (q - x).detach()
    return q


def fake_fp8(x: torch.Tensor, block: int = 32) -> torch.Tensor:
    """Window K=V rows: FP8 E4M3 with a UE8M0 scale per `block` values."""
    if x.shape[-1] % block or not _FAKE_QUANT[0]:
        return x
    return _ste(x, _fake_fp8_values(x.detach(), block))


def fake_fp4(x: torch.Tensor, block: int, e4m3_scales: bool = False) -> torch.Tensor:
    """FP4 E2M1: latents use block 16 with E4M3 scales, indexer q/k block 32 with UE8M0 scales."""
    if x.shape[-1] % block or not _FAKE_QUANT[0]:
        return x
    return _ste(x, _fake_fp4_values(x.detach(), block, e4m3_scales))


def fake_latent(x: torch.Tensor) -> torch.Tensor:
    return fake_fp4(x, 16, e4m3_scales=True)


def fake_index(x: torch.Tensor) -> torch.Tensor:
    return fake_fp4(x, 32, e4m3_scales=False)


# ------------------------------------------------------------------------------------------------
# Packed storage: the bytes a cache holds
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Format:
    """A storage format for rows of `dim` numbers: element bits, block size, scale bytes per block."""

    name: str
    element_bits: int
    block: int
    scale_bits: int

    def row_bytes(self, dim: int) -> int:
        """Bytes one row of `dim` numbers occupies (values + block scales); fp32 when unblockable."""
        if not self.quantizes(dim):
            return 4 * dim
        return dim * self.element_bits // 8 + (dim // self.block) * self.scale_bits // 8

    def quantizes(self, dim: int) -> bool:
        return dim % self.block == 0 and (dim * self.element_bits) % 8 == 0


WINDOW_FMT = Format("fp8_e4m3/ue8m0x32", 8, 32, 8)
LATENT_FMT = Format("fp4_e2m1/e4m3x16", 4, 16, 8)
INDEX_FMT = Format("fp4_e2m1/ue8m0x32", 4, 32, 8)


def pack(x: torch.Tensor, fmt: Format) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows [..., dim] -> (values uint8 [..., dim*bits/8], scales uint8 [..., dim/block]).

    Unblockable dims are stored as raw fp32 bytes with an empty scale tensor.
    """
    dim = x.shape[-1]
    if not fmt.quantizes(dim):
        v = x.detach().float().contiguous()
        return v.view(torch.uint8).reshape(*x.shape[:-1], dim * 4), x.new_zeros((*x.shape[:-1], 0), dtype=torch.uint8)
    b = _blocks(x.detach(), fmt.block)
    if fmt is WINDOW_FMT:
        s = fp8_scale(b)
        q = (b / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        return q.view(torch.uint8).reshape(*x.shape[:-1], dim), _ue8m0_byte(s)
    e4m3 = fmt is LATENT_FMT
    s = fp4_scale(b, e4m3)
    codes = e2m1_codes((b / s.unsqueeze(-1)).clamp(-FP4_MAX, FP4_MAX)).reshape(*x.shape[:-1], dim)
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)  # even element in the low nibble
    sbytes = s.to(torch.float8_e4m3fn).view(torch.uint8) if e4m3 else _ue8m0_byte(s)
    return packed, sbytes


def unpack(values: torch.Tensor, scales: torch.Tensor, fmt: Format, dim: int) -> torch.Tensor:
    """Inverse of `pack`: fp32 rows [..., dim] equal to the fake-quant values."""
    lead = values.shape[:-1]
    if not fmt.quantizes(dim):
        return values.contiguous().view(torch.float32).reshape(*lead, dim)
    if fmt is WINDOW_FMT:
        v = values.contiguous().view(torch.float8_e4m3fn).float().reshape(*lead, dim // fmt.block, fmt.block)
        return (v * _ue8m0_value(scales).unsqueeze(-1)).reshape(*lead, dim)
    codes = torch.stack([values & 0xF, values >> 4], dim=-1).reshape(*lead, dim)
    v = _lut(values.device)[codes.long()].reshape(*lead, dim // fmt.block, fmt.block)
    if fmt is LATENT_FMT:
        s = scales.contiguous().view(torch.float8_e4m3fn).float()
    else:
        s = _ue8m0_value(scales)
    return (v * s.unsqueeze(-1)).reshape(*lead, dim)


# ------------------------------------------------------------------------------------------------
# Weight formats of released checkpoints (docs/design/checkpoints.md): FP8 128x128 blocks, MXFP4 experts
# ------------------------------------------------------------------------------------------------

def quantize_fp8_weight(w: torch.Tensor, block: int = 128, ue8m0: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """[out, in] -> (fp8 e4m3 weight, scale [ceil(out/128), ceil(in/128)]), scale fp32 or ue8m0-rounded fp32."""
    out_f, in_f = w.shape
    po, pi = (-out_f) % block, (-in_f) % block
    wp = torch.nn.functional.pad(w.float(), (0, pi, 0, po))
    b = wp.reshape(wp.shape[0] // block, block, wp.shape[1] // block, block).permute(0, 2, 1, 3)
    amax = b.abs().amax((-1, -2)).clamp_min(1e-12)
    s = pow2_ceil(amax / FP8_MAX) if ue8m0 else amax / FP8_MAX
    q = (b / s[..., None, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    q = q.permute(0, 2, 1, 3).reshape(wp.shape)[:out_f, :in_f].contiguous()
    return q, s


def dequantize_fp8_weight(q: torch.Tensor, scale: torch.Tensor, block: int = 128) -> torch.Tensor:
    s = scale.float().repeat_interleave(block, 0).repeat_interleave(block, 1)[: q.shape[0], : q.shape[1]]
    return q.float() * s


def quantize_mxfp4_weight(w: torch.Tensor, block: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """[out, in] -> (uint8 [out, in/2] two E2M1 codes per byte, uint8 E8M0 exponents [out, in/32])."""
    if w.shape[-1] % block:
        raise ValueError(f"MXFP4 needs the input dimension divisible by {block}, got {w.shape[-1]}")
    b = _blocks(w, block)
    s = fp4_scale(b, e4m3_scales=False)
    codes = e2m1_codes((b / s.unsqueeze(-1)).clamp(-FP4_MAX, FP4_MAX)).reshape(w.shape)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), _ue8m0_byte(s)


def dequantize_mxfp4_weight(packed: torch.Tensor, scales: torch.Tensor, block: int = 32) -> torch.Tensor:
    codes = torch.stack([packed & 0xF, packed >> 4], dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)
    v = _lut(packed.device)[codes.long()].reshape(*codes.shape[:-1], codes.shape[-1] // block, block)
    return (v * _ue8m0_value(scales).unsqueeze(-1)).reshape(codes.shape)
