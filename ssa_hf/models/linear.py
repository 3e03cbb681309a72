"""Linear attention and CosFormer: attention mechanisms that are not a row-wise function of the scores.

Both replace exp(q.k) by a product of non-negative feature maps, so the weights factorise and the output can be
computed in time and memory linear in the sequence length:

    a_ij = phi(q_i) . phi(k_j) * r(i, j)            for every key j the query i may attend (else 0)
    w_ij = a_ij / (sum_j a_ij + eps)                 (a row with no key to attend to gets all-zero weights)
    out_i = sum_j w_ij v_j

- `linear` (Katharopoulos et al. 2020): phi(x) = elu(x) + 1, r = 1.
- `cosformer` (Qin et al. 2022): phi(x) = relu(x), r(i, j) = cos(pi/2 * (i - j) / m), decomposed as
  cos(a i) cos(a j) + sin(a i) sin(a j) (a = pi / 2m) into the features [phi(x) cos(a pos), phi(x) sin(a pos)],
  so it is again a product of features. `m` is a per-head length scale: the paper uses the sequence length; in
  the models it is fixed (`cosformer_length`, default `max_position_embeddings`) so that a token's weights do not
  change when the sequence grows, which keeps causal training, chunked prefill and cached decoding consistent.
  Only differences of positions enter, so left padding does not change the result. Every |i - j| must stay
  below m (else the cosine turns negative): longer inputs are refused.

The score scale (1/sqrt(d)) is not used: the features are applied to q and k as given (as in both papers).

Masks. The forms supported are "bidirectional" and "causal" (query i attends keys j <= i + offset), each combined
with key padding; `LinearMask` holds that structure, `linear_mask()` derives it from a boolean mask (the
[B, 1, Lq, Lk] mask transformers builds, with Lq < Lk and bottom-right alignment under a KV cache) and refuses any
other pattern with an error. Causal attention runs in chunks: a running state sum_j phi(k_j) [v_j, 1]^T carries the
past, each chunk adds its own lower-triangular part, so memory is O(chunk^2 + d^2) per head, never O(L^2).

Each entry has a plain quadratic float64 reference (`reference_attention`) that materialises the weights from
the definition; the fast path and the materialised path (`dense_weights`, used when attention weights are asked
for or attention dropout is on) are tested against it.

Part of the remote-code unit: imports only torch and the standard library.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .parameters import ParameterSpec, max_positions

EPS = 1e-6
CHUNK = 64

Params = dict[str, Tensor]


# --------------------------------------------------------------------------------------------------
# Mask structure
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearMask:
    """What linear attention can honour: key padding [B or 1, Lk] (True = may be attended; None = no padding)
    and a causal offset (None = bidirectional; o = query i attends keys j <= i + o)."""

    key_padding: Tensor | None = None
    causal_offset: int | None = None

    def query_positions(self, q_len: int, kv_len: int, device) -> Tensor:
        """Position of each query on the key axis: i + offset when causal, else the last Lq positions."""
        shift = self.causal_offset if self.causal_offset is not None else kv_len - q_len
        return torch.arange(q_len, device=device) + shift

    def dense(self, q_len: int, kv_len: int, device) -> Tensor | None:
        """The equivalent boolean mask [B|1, 1, Lq, Lk] (None when nothing is masked)."""
        mask = None
        if self.causal_offset is not None:
            i = torch.arange(q_len, device=device)[:, None]
            j = torch.arange(kv_len, device=device)[None, :]
            mask = (j <= i + self.causal_offset)[None, None]
        if self.key_padding is not None:
            padding = self.key_padding[:, None, None, :]
            mask = padding if mask is None else mask & padding
        return mask


def as_4d(mask: Tensor) -> Tensor:
    """A mask broadcastable to [B, H, Lq, Lk] with leading dimensions of size 1 added up to 4-D."""
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape)) if mask.dim() < 4 else mask


def _refuse(detail: str) -> ValueError:
    return ValueError(
        "linear attention (linear, cosformer) supports only a causal mask and/or key padding; " + detail + ". "
        "Pass key padding as a boolean [B, 1, 1, Lk] mask with is_causal=True/False, or use a row-wise scoring "
        "function for arbitrary masks."
    )


def _trusted_mask(mask: Tensor | None, q_len: int, kv_len: int, causal: bool) -> LinearMask:
    """The structure of transformers' causal (bottom-right) or bidirectional mask plus key padding, read without
    Python-level data-dependent checks (used under torch.compile, where those break the graph). The mask is still
    verified, by an in-graph assertion (e.g. a static cache, whose queries are not the last positions, fails it)."""
    offset = kv_len - q_len if causal else None
    if mask is None:
        return LinearMask(None, offset)
    mask = as_4d(mask)
    # the last query row sees every unpadded key in both forms
    structure = LinearMask(mask[:, 0, -1, :].expand(mask.shape[0], kv_len), offset)
    expected = structure.dense(q_len, kv_len, mask.device)
    torch._assert_async(
        ~torch.logical_xor(mask, expected).any(),  # (not `==`: inductor 2.13 fails on == of two index-built masks)
        "linear attention (linear, cosformer) under torch.compile expects transformers' causal mask with the queries "
        "as the last positions (or a bidirectional mask), plus key padding; run this model without torch.compile.",
    )
    return structure


def linear_mask(
    mask: Tensor | LinearMask | None, q_len: int, kv_len: int, is_causal: bool = False, expect_causal: bool | None = None
) -> LinearMask:
    """Derive the structure of a boolean mask broadcastable to [B, H, Lq, Lk] (True = attend), or raise.

    `is_causal` adds a top-left aligned causal mask (query i attends keys j <= i), as in
    `F.scaled_dot_product_attention`. `expect_causal` (the attention module's `is_causal`) is used only under
    torch.compile: the mask is then read as transformers builds it, without the checks.
    """
    if isinstance(mask, LinearMask):
        structure = mask
    elif expect_causal is not None and torch.compiler.is_compiling():
        structure = _trusted_mask(mask, q_len, kv_len, expect_causal)
    elif mask is None:
        structure = LinearMask()
    else:
        if mask.dtype != torch.bool:
            raise _refuse(f"got a {mask.dtype} mask (it must be boolean, True = attend)")
        mask = as_4d(mask)
        if mask.dim() > 4:
            raise _refuse(f"got a {mask.dim()}-D mask")
        if mask.shape[1] > 1:
            if not torch.equal(mask, mask[:, :1].expand_as(mask)):
                raise _refuse("the mask differs between heads")
            mask = mask[:, :1]
        if mask.shape[2] == 1:  # key padding only
            structure = LinearMask(mask[:, 0, 0, :].expand(mask.shape[0], kv_len), None)
        else:
            rows = mask[:, 0].expand(mask.shape[0], q_len, kv_len)
            padding = rows.any(1)  # [B, Lk]: keys that some query attends
            if torch.equal(rows, padding[:, None, :].expand_as(rows)):
                structure = LinearMask(padding, None)
            else:
                keys = torch.arange(kv_len, device=mask.device)
                queries = torch.arange(q_len, device=mask.device)
                last = torch.where(rows, keys, -1).amax(-1)  # [B, Lq], last key each row attends
                reach = torch.where(last >= 0, last - queries, torch.full_like(last, -(q_len + kv_len)))
                offset = int(reach.max())
                expected = padding[:, None, :] & (keys[None, None, :] <= queries[None, :, None] + offset)
                if not torch.equal(rows, expected):
                    raise _refuse("got a mask that is neither bidirectional nor causal (plus key padding)")
                structure = LinearMask(padding, offset)
    if is_causal:
        offset = 0 if structure.causal_offset is None else min(structure.causal_offset, 0)
        structure = LinearMask(structure.key_padding, offset)
    return structure


# --------------------------------------------------------------------------------------------------
# The entries
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearAttention:
    """A registry entry for a linear-attention mechanism (`kind == "linear"`).

    It carries the same descriptive fields as a row-wise `ScoringFunction` (name, description, parameters,
    logits=None, ...) so that backends can inspect it and refuse it; it has no row-wise `weights`.
    """

    name: str
    description: str
    feature_map: str  # "elu+1" or "relu"
    cos_reweighting: bool = False
    parameters: tuple[ParameterSpec, ...] = ()
    kind: str = "linear"
    normalised: bool = True
    logits: None = None
    needs_row_count: bool = False
    extra_zero_logit: bool = False
    notes: str = ""

    def weights(self, *args, **kwargs):
        raise ValueError(
            f"{self.name!r} is linear attention, not a row-wise function of the scores: its weights need the "
            f"queries and keys (see ssa_hf.models.linear.LinearAttention.dense_weights)."
        )

    reference = weights

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def default_params(self, q_len: int, kv_len: int) -> dict[str, float]:
        """Values used by the functional API when a parameter is not given (CosFormer: m = sequence length)."""
        return {"m": float(max(q_len, kv_len))} if self.cos_reweighting else {}

    # ---- features -------------------------------------------------------------------------------

    def _phi(self, x: Tensor) -> Tensor:
        return F.elu(x) + 1.0 if self.feature_map == "elu+1" else F.relu(x)

    def _angle(self, params: Params, positions: Tensor, dtype) -> Tensor:
        """a * pos for every head: [H, L] with a = pi / (2 m)."""
        m = params["m"].to(dtype=dtype, device=positions.device)
        return (math.pi / 2.0) / m.reshape(-1, 1) * positions.to(dtype)[None, :]

    def features(self, x: Tensor, positions: Tensor, params: Params) -> Tensor:
        """phi(x) [B, H, L, D], or for CosFormer [phi(x) cos(a pos), phi(x) sin(a pos)] [B, H, L, 2D]."""
        phi = self._phi(x)
        if not self.cos_reweighting:
            return phi
        angle = self._angle(params, positions, x.dtype)[None, :, :, None]
        return torch.cat([phi * torch.cos(angle), phi * torch.sin(angle)], dim=-1)

    def check_length(self, params: Params, q_len: int, kv_len: int, structure: LinearMask) -> None:
        if not self.cos_reweighting or torch.compiler.is_compiling():
            return
        positions = structure.query_positions(q_len, kv_len, "cpu")
        span = max(kv_len - 1, int(positions.max())) - min(0, int(positions.min())) if q_len else 0
        m = float(params["m"].detach().min())
        if span >= m:
            raise ValueError(
                f"cosformer: positions span {span + 1} tokens but the length scale m is {m:g}; the cos re-weighting "
                f"turns negative beyond m. Use a larger `cosformer_length` (model config) or params['m']."
            )

    # ---- the linear-time path ----------------------------------------------------------------

    def attend(self, query: Tensor, key: Tensor, value: Tensor, params: Params, structure: LinearMask, chunk: int = CHUNK) -> Tensor:
        """out [B, H, Lq, D] in O(L) memory; query/key/value [B, H, L, D] (heads already matched)."""
        q_len, kv_len = query.shape[2], key.shape[2]
        self.check_length(params, q_len, kv_len, structure)
        fq = self.features(query, structure.query_positions(q_len, kv_len, query.device), params)
        fk = self.features(key, torch.arange(kv_len, device=key.device), params)
        if structure.key_padding is not None:
            fk = fk * structure.key_padding[:, None, :, None].to(fk.dtype)
        # one extra value column of ones: numerator and denominator in the same products
        v1 = torch.cat([value, value.new_ones(value.shape[:-1] + (1,))], dim=-1)
        if structure.causal_offset is None:
            num = torch.matmul(fq, torch.matmul(fk.transpose(-1, -2), v1))
        else:
            num = _causal_products(fq, fk, v1, structure.causal_offset, chunk)
        return num[..., :-1] / (num[..., -1:] + EPS)

    # ---- materialised weights ----------------------------------------------------------------

    def dense_weights(self, query: Tensor, key: Tensor, params: Params, structure: LinearMask) -> Tensor:
        """The weights [B, H, Lq, Lk], materialised from the definition (for attention maps and dropout)."""
        q_len, kv_len = query.shape[2], key.shape[2]
        self.check_length(params, q_len, kv_len, structure)
        scores = torch.matmul(self._phi(query), self._phi(key).transpose(-1, -2))
        if self.cos_reweighting:
            qpos = structure.query_positions(q_len, kv_len, query.device)
            kpos = torch.arange(kv_len, device=key.device)
            distance = (qpos[:, None] - kpos[None, :]).to(scores.dtype)
            m = params["m"].to(dtype=scores.dtype, device=scores.device).reshape(-1, 1, 1)
            scores = scores * torch.cos((math.pi / 2.0) * distance / m)
        mask = structure.dense(q_len, kv_len, query.device)
        if mask is not None:
            scores = torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
        return scores / (scores.sum(-1, keepdim=True) + EPS)

    # ---- the float64 oracle ------------------------------------------------------------------

    def reference_attention(
        self, query: Tensor, key: Tensor, value: Tensor, params: Params, attn_mask: Tensor | None = None,
        query_positions: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Quadratic float64 reference: (out [B, H, Lq, D], weights [B, H, Lq, Lk]), row by row from the definition.

        `attn_mask`: boolean, broadcastable to [B, H, Lq, Lk]; `query_positions`: default the last Lq positions.
        Key/value heads are repeated to the query heads (GQA).
        """
        q, k, v = query.double(), key.double(), value.double()
        batch, heads, q_len, _ = q.shape
        kv_len = k.shape[2]
        k = k.repeat_interleave(heads // k.shape[1], dim=1)
        v = v.repeat_interleave(heads // v.shape[1], dim=1)
        allowed = torch.ones(batch, heads, q_len, kv_len, dtype=torch.bool)
        if attn_mask is not None:
            allowed = allowed & attn_mask.cpu()
        if query_positions is None:
            query_positions = torch.arange(q_len) + (kv_len - q_len)
        out = torch.zeros(batch, heads, q_len, v.shape[-1], dtype=torch.float64)
        weights = torch.zeros(batch, heads, q_len, kv_len, dtype=torch.float64)
        scales = torch.as_tensor(params["m"], dtype=torch.float64).reshape(-1) if self.cos_reweighting else None
        for bi in range(batch):
            for h in range(heads):
                m = float(scales[h % scales.numel()]) if self.cos_reweighting else None
                for i in range(q_len):
                    keys = allowed[bi, h, i].nonzero().flatten()
                    if keys.numel() == 0:
                        continue
                    if self.feature_map == "elu+1":
                        fq, fk = F.elu(q[bi, h, i]) + 1, F.elu(k[bi, h, keys]) + 1
                    else:
                        fq, fk = q[bi, h, i].clamp_min(0), k[bi, h, keys].clamp_min(0)
                    a = fk @ fq
                    if self.cos_reweighting:
                        a = a * torch.cos(math.pi / 2 * (float(query_positions[i]) - keys.double()) / m)
                    w = a / (a.sum() + EPS)
                    weights[bi, h, i, keys] = w
                    out[bi, h, i] = w @ v[bi, h, keys]
        return out, weights


def _causal_products(fq: Tensor, fk: Tensor, v1: Tensor, offset: int, chunk: int) -> Tensor:
    """sum_{j <= i + offset} (fq_i . fk_j) v1_j for every query i, chunk by chunk with a running state.

    The inputs are cut once with `split` (whose backward is one concatenation), never sliced per chunk: a slice's
    backward writes into a zero tensor of the full size, which would cost O(L^2 / chunk) memory traffic.
    """
    batch, heads, q_len, _ = fq.shape
    kv_len = fk.shape[2]
    start = min(max(-offset, 0), q_len)  # queries before `start` see no key
    stop = min(max(kv_len - offset, start), q_len)  # queries from `stop` on see every key
    _, q_mid, q_all = fq.split([start, stop - start, q_len - stop], dim=2)
    pieces = [fq.new_zeros(batch, heads, start, v1.shape[-1])] if start else []
    if stop > start:
        first, last = start + offset, stop + offset
        k_before, k_mid, _ = fk.split([first, last - first, kv_len - last], dim=2)
        v_before, v_mid, _ = v1.split([first, last - first, kv_len - last], dim=2)
        state = torch.matmul(k_before.transpose(-1, -2), v_before)
        chunks = zip(q_mid.split(chunk, dim=2), k_mid.split(chunk, dim=2), v_mid.split(chunk, dim=2))
        for q_c, k_c, v_c in chunks:
            scores = torch.matmul(q_c, k_c.transpose(-1, -2)).tril()
            pieces.append(torch.matmul(q_c, state) + torch.matmul(scores, v_c))
            state = state + torch.matmul(k_c.transpose(-1, -2), v_c)
        total = state  # when some queries see every key, the middle part ends at the last key (last == kv_len)
    else:
        total = torch.matmul(fk.transpose(-1, -2), v1)
    if stop < q_len:
        pieces.append(torch.matmul(q_all, total))
    return torch.cat(pieces, dim=2)


COSFORMER_LENGTH = ParameterSpec(
    "m", "cosformer_length", "CosFormer's length scale m in cos(pi/2 * (i - j) / m), fixed; defaults to "
    "`max_position_embeddings`. Longer inputs are refused (the re-weighting would turn negative).", low=0.0,
    low_open=True, derive=max_positions,
    required="cosformer needs cosformer_length (its length scale m; models default it to max_position_embeddings)",
)

LINEAR_ATTENTIONS: dict[str, LinearAttention] = {
    a.name: a
    for a in [
        LinearAttention(
            "linear",
            "linear attention (Katharopoulos et al. 2020): phi(q).phi(k) / sum, phi(x) = elu(x) + 1",
            feature_map="elu+1",
        ),
        LinearAttention(
            "cosformer",
            "CosFormer (Qin et al. 2022): relu(q).relu(k) cos(pi/2 (i - j) / m) / sum, linear via cos/sin features",
            feature_map="relu",
            cos_reweighting=True,
            parameters=(COSFORMER_LENGTH,),
        ),
    ]
}


def expand_heads(tensor: Tensor, heads: int) -> Tensor:
    groups = heads // tensor.shape[1]
    return tensor if groups == 1 else tensor.repeat_interleave(groups, dim=1)


def run_linear(
    query: Tensor, key: Tensor, value: Tensor, spec: LinearAttention, params: Params, mask, dropout: float = 0.0,
    training: bool = False, need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """The eager backend's path for linear attention: (out [B, H, Lq, D] in value's dtype, weights or None).

    Linear time unless the weights are needed (`need_weights`, or attention dropout while training), in which
    case they are materialised. Half-precision inputs are computed in float32. `mask`: a boolean tensor or a
    `LinearMask` (see `linear_mask`).
    """
    heads, q_len, kv_len = query.shape[1], query.shape[2], key.shape[2]
    structure = linear_mask(mask, q_len, kv_len)
    compute = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q = query.to(compute)
    k = expand_heads(key, heads).to(compute)
    v = expand_heads(value, heads).to(compute)
    if need_weights or (dropout > 0.0 and training):
        weights = spec.dense_weights(q, k, params, structure)
        dropped = F.dropout(weights, p=dropout, training=True) if dropout > 0.0 and training else weights
        return torch.matmul(dropped, v).to(value.dtype), weights
    return spec.attend(q, k, v, params, structure).to(value.dtype), None
