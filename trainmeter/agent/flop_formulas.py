"""What trainmeter adds to torch's ``FlopCounterMode`` for the one counted step (docs/spec.md
"Counted FLOPs"): FLOP formulas for the recurrent kernels torch's registry lacks, the
``attention`` verdict from the ops actually counted, and the list of work not counted.
Standard library only: torch is passed in, never imported.

Recurrent layers: the ops the counter sees (torch 2.13, checked by dispatching nn.LSTM, nn.GRU
and nn.RNN (tanh, relu) single and 2-layer, bidirectional, batch_first both ways, forward and
backward, under a logging dispatch mode):

- CPU nn.LSTM (no ``proj_size``, not packed): one ``aten.mkldnn_rnn_layer`` per layer and
  direction, one ``aten.mkldnn_rnn_layer_backward`` each in the backward. Torch has no formula
  for either: without this module the LSTM counts 0 FLOP.
- CPU nn.GRU and nn.RNN, and nn.LSTM with ``proj_size`` or a packed sequence
  (``pack_padded_sequence`` sends the LSTM off oneDNN): torch's own cell loop, one ``addmm`` of
  the input projection of the whole sequence per layer and direction, one ``addmm`` per time step
  for the hidden projection, ``mm`` in the backward. Torch's formulas count these already, and
  count what runs: autograd skips the gradient of what needs none (an input without grad, the
  zero initial state: 2 B G H H FLOP less per layer and direction).
- CUDA cuDNN: one ``aten._cudnn_rnn`` for all layers and directions and its
  ``_cudnn_rnn_backward``; ROCm: ``miopen_rnn`` / ``miopen_rnn_backward`` (same arguments). No
  formula in torch. (Verified here against their schemas only: this project's tests run on CPU.)

FLOPs of a recurrent layer. PyTorch's nn.LSTM docs
(https://pytorch.org/docs/stable/generated/torch.nn.LSTM.html) give, per time step,
``i, f, g, o = act(W_i* x_t + b_i* + W_h* h_{t-1} + b_h*)`` (4 gates), stored stacked as
``weight_ih_l{k}`` (4H x I) and ``weight_hh_l{k}`` (4H x H); nn.GRU has 3 gates (r, z, n:
3H x I, 3H x H), nn.RNN 1 (H x I, H x H); with ``proj_size`` P, ``h_t = W_hr (o_t * tanh c_t)``
(P x H) and ``weight_hh`` is 4H x P. A matrix (m x n) times one vector is 2 m n FLOP (torch's
``mm_flop`` counts the same), so one layer and direction over the N rows of the sequence
(N = T B, or the sum of the batch sizes of a packed sequence: its input is N x I) costs
``2 N sum(numel(W))`` over its 2-D weights; for an LSTM ``2 N 4H (I + H)``. Gate activations,
the cell update and the biases are elementwise: torch counts no elementwise op, nor does this.
Backward: each product ``y = W x`` needs the gradient of x (``W^T dy``) and of W
(``dy x^T``), each 2 m n per row, so 2x the forward when both run:

- ``mkldnn_rnn_layer_backward`` always returns the gradients of the input, both weights, the
  biases and the initial states (PyTorch aten/src/ATen/native/mkldnn/RNN.cpp): 2x.
- ``_cudnn_rnn_backward`` / ``miopen_rnn_backward`` always run the input-gradient pass ("NB:
  unconditionally compute this gradient, because it mutates reserve", PyTorch
  aten/src/ATen/native/cudnn/RNN.cpp; miopen/RNN.cpp alike) and the weight-gradient pass when
  ``output_mask[3]``: (1 + output_mask[3]) x the forward; 0 when no gradient came in.

Each formula is registered only when the op exists, has no formula in torch, and its schema
names the arguments read; a formula that cannot read its arguments counts 0 and says so.

Attention: ``sdpa`` when an attention kernel was counted (an op named ``*attention*`` with
FLOPs), else ``matmul`` when a forward batched matmul (``bmm``, ``baddbmm``: what ``q @ k^T``
and ``att @ v`` of hand-written attention, nanoGPT's non-flash path or HF's eager and math SDPA
paths become) multiplied two activations, else ``none counted``. An operand is a weight when it
is a Parameter, a view of one (``_base``), or reached from one through views and casts only
(autograd's graph: autocast's bf16 copy of a weight); only forwards (grad mode on) are looked
at, since a weight's gradient is also a product of two activations.

Not counted: an op that ran in the step with no formula and whose name says it multiplies
matrices, convolves, attends or recurs (``_HEAVY``; ``_NO_PRODUCT`` does none of it: the
elementwise fused cells, weight packing) is listed in ``not_counted``.
"""

from __future__ import annotations

import math
import re

# op names that do matrix products, convolutions, attention or recurrence
_HEAVY = re.compile(r"rnn|lstm|gru|attention|conv(?!ert)|mm(_|$)")
# ... and those among them that do none: elementwise fused cells, weight layout, packing
_NO_PRODUCT = re.compile(r"_thnn_|_flatten_weight|_init_dropout|_convert_weight|_pack_|_pad_pack")
_PASS_THROUGH = frozenset({  # autograd nodes of views and casts (weight -> operand)
    "ViewBackward", "UnsafeViewBackward", "ReshapeAliasBackward", "TransposeBackward",
    "TBackward", "PermuteBackward", "ExpandBackward", "UnsqueezeBackward", "SqueezeBackward",
    "SliceBackward", "SelectBackward", "AliasBackward", "AsStridedBackward", "CloneBackward",
    "ToCopyBackward",
})  # fmt: skip
MAX_WALK = 16  # autograd nodes followed from an operand towards a weight
MAX_NOT_COUNTED = 16  # entries kept in not_counted


def _rows(x) -> int:
    """Rows a recurrent kernel runs its products on: T B (either layout) or, packed, the sum of
    the batch sizes; ``x`` the input tensor (..., features)."""
    shape = tuple(x.shape)
    if len(shape) < 2:
        raise ValueError(f"input of shape {shape}")
    return math.prod(shape[:-1])


def _products(x, weights) -> int:
    """Forward FLOP of a recurrent kernel: ``2 N sum(numel(W))`` over its 2-D weights."""
    mats = [tuple(w.shape) for w in weights if w is not None and len(w.shape) == 2]
    if not mats:
        raise ValueError("no 2-D weight")
    return 2 * _rows(x) * sum(m * n for m, n in mats)


def _stack_backward(a: dict) -> int:
    """cuDNN / MIOpen backward: input pass always, weight pass when ``output_mask[3]``."""
    if a["grad_output"] is None and a["grad_hy"] is None and a["grad_cy"] is None:
        return 0
    return (1 + bool(a["output_mask"][3])) * _products(a["input"], a["weight"])


def _w(a: dict, ih: int, hh: int) -> tuple:
    """oneDNN's layer weights W_ih, W_hh: arguments ``weight{ih}``, ``weight{hh}``."""
    return a[f"weight{ih}"], a[f"weight{hh}"]


_STACK_BWD_ARGS = ("input", "weight", "grad_output", "grad_hy", "grad_cy", "output_mask")
# op -> (schema arguments read, FLOP of one call from them)
RECURRENT = {
    # one layer and direction: weight0 / weight1 (backward: weight1 / weight2) are W_ih, W_hh
    "mkldnn_rnn_layer": (("input", "weight0", "weight1"),
                         lambda a: _products(a["input"], _w(a, 0, 1))),
    "mkldnn_rnn_layer_backward": (("input", "weight1", "weight2"),
                                  lambda a: 2 * _products(a["input"], _w(a, 1, 2))),
    "_cudnn_rnn": (("input", "weight"), lambda a: _products(a["input"], a["weight"])),
    "_cudnn_rnn_backward": (_STACK_BWD_ARGS, _stack_backward),
    "miopen_rnn": (("input", "weight"), lambda a: _products(a["input"], a["weight"])),
    "miopen_rnn_backward": (_STACK_BWD_ARGS, _stack_backward),
}  # fmt: skip


class Extras:
    """Formulas and observations for one counted step.

    Args:
        torch: the user's torch module.
        registry: the counter's own ``flop_registry`` (a copy torch makes per
            ``FlopCounterMode``: what is added here counts for this step only).
    """

    def __init__(self, torch, registry: dict) -> None:
        self.torch = torch
        self.registry = registry
        self.not_counted: list[str] = []  # work that ran and no formula counts
        self.matmul = False  # a forward batched matmul of two activations was counted
        aten = torch.ops.aten
        # batched matmuls -> positions of their two operands
        self._bmm = {aten.bmm: (0, 1), aten.baddbmm: (1, 2)}
        self._looked: set = set()  # ops without a formula already looked at

    def register(self) -> list[str]:
        """Give the recurrent kernels (``RECURRENT``) their formula; returns the names added
        (none for an op torch already counts, or one missing or with other arguments)."""
        added = []
        for name, (reads, flops) in RECURRENT.items():
            packet = getattr(self.torch.ops.aten, name, None)
            if packet is None or packet in self.registry:
                continue
            try:
                names = [arg.name for arg in packet.default._schema.arguments]
            except AttributeError:
                continue
            if all(n in names for n in reads):
                where = {n: names.index(n) for n in reads}
                self.registry[packet] = self._formula(name, where, flops)
                added.append(name)
        return added

    def _formula(self, name: str, where: dict, flops):
        """The registry entry: FlopCounterMode calls it as ``f(*args, **kwargs, out_val=out)``;
        an argument it cannot read counts 0 FLOP and is listed in ``not_counted``."""

        def formula(*args, out_val=None, **kwargs) -> int:
            try:
                a = {n: args[i] if i < len(args) else kwargs.get(n) for n, i in where.items()}
                return int(flops(a))
            except (AttributeError, TypeError, IndexError, KeyError, ValueError):
                self._miss(f"aten.{name} (unexpected arguments)")
                return 0

        return formula

    def see(self, packet, args) -> None:
        """One op as it is counted (from the guarded ``_count_flops``): a forward batched
        matmul of two activations sets ``matmul``; an op with no formula whose name says it
        does products is listed in ``not_counted``."""
        where = self._bmm.get(packet)
        if where is not None:
            if not self.matmul and self.torch.is_grad_enabled():
                self.matmul = not any(self._weight(args[i]) for i in where)
            return
        if packet in self.registry or packet in self._looked:
            return
        self._looked.add(packet)
        name = str(packet)
        if _HEAVY.search(name) and not _NO_PRODUCT.search(name):
            self._miss(f"{name} (no FLOP formula)")

    def _weight(self, t) -> bool:
        """Whether operand ``t`` is a weight: a Parameter, a view of one, or reached from one
        through views and casts in autograd's graph (autocast's copy)."""
        parameter = self.torch.nn.Parameter
        if isinstance(t, parameter) or isinstance(getattr(t, "_base", None), parameter):
            return True
        node = getattr(t, "grad_fn", None)
        for _ in range(MAX_WALK):
            if node is None:
                return False
            kind = type(node).__name__.rstrip("0123456789")
            if kind == "AccumulateGrad":
                return isinstance(getattr(node, "variable", None), parameter)
            inputs = [n for n, _ in node.next_functions if n is not None]
            if kind not in _PASS_THROUGH or len(inputs) != 1:
                return False
            node = inputs[0]
        return False

    def _miss(self, what: str) -> None:
        if what not in self.not_counted and len(self.not_counted) < MAX_NOT_COUNTED:
            self.not_counted.append(what)

    def attention(self, by_op: dict) -> str:
        """The record's ``attention``: ``sdpa``, ``matmul`` or ``none counted`` (module
        docstring); ``by_op`` the step's FLOP by op."""
        if any("attention" in str(op) and flops > 0 for op, flops in by_op.items()):
            return "sdpa"
        return "matmul" if self.matmul else "none counted"
