"""The batch and sequence axes of a model's inputs, read from the module that consumes them.

Most models take ``(batch, seq)`` token ids; torch's own sequence layers default to
sequence-first (``batch_first=False``: ``nn.RNN``/``nn.LSTM``/``nn.GRU``,
``nn.MultiheadAttention``, ``nn.Transformer`` and its layers), and code written for them
(PyTorch's word-language-model example, seq2seq tutorials) feeds ``(seq, batch)``. Reading the
first axis as the batch there swaps samples and sequence length, and with them the attention
term of FLOPs per token.

So during discovery (before the first optimizer step, from the global pre-hook that already
sees every module call) the first call of such a layer is noted: its ``batch_first`` and its
input's ``(batch, seq)`` sizes. At the first step, the root model's input shape ``(d0, d1,
...)`` is sequence-first when ``d0`` is the layer's sequence length and ``d1`` its batch (and
they differ; when they are equal, either reading gives the same counts). No sequence layer
(most transformers, which use Linear layers and ``scaled_dot_product_attention``), an
unbatched input, or any other shape: batch-first. A ``PackedSequence`` gives its batch and
longest length from its ``batch_sizes`` (a CPU tensor: reading it is a host read).

Everything here reads metadata only (shapes, module attributes): never a tensor's value
(the no-device-sync invariant).
"""

from __future__ import annotations


class BatchAxes:
    """Finds the batch axis of the root model's inputs.

    Args:
        torch: the user's imported torch module.
    """

    def __init__(self, torch) -> None:
        nn = torch.nn
        names = ("RNNBase", "MultiheadAttention", "TransformerEncoderLayer",
                 "TransformerDecoderLayer", "Transformer")  # fmt: skip
        self.types = tuple(t for t in (getattr(nn, n, None) for n in names) if t is not None)
        self.tensor = torch.Tensor
        self.layer: tuple | None = None  # (layer class name, batch size, seq length)
        self.axis = 0

    def reset(self) -> None:
        """Forget what was seen (a new run: discovery starts again)."""
        self.layer, self.axis = None, 0

    def see(self, module, args: tuple) -> None:
        """A module call during discovery: note the first batched sequence layer's input."""
        if self.layer is not None or not isinstance(module, self.types):
            return
        x = args[0] if args else None
        sizes = getattr(x, "batch_sizes", None)
        if isinstance(sizes, self.tensor) and sizes.dim() == 1 and len(sizes):
            # a PackedSequence: its batch_sizes (always a CPU tensor) hold, per time step, the
            # sequences still running; the first is the batch, their number the longest length
            self.layer = (type(module).__name__, int(sizes[0]), len(sizes))
            return
        if not isinstance(x, self.tensor) or x.dim() < 3:
            return  # unbatched (seq, features), or no tensor
        first = batch_first(module)
        if first is None:
            return
        b, t = (x.shape[0], x.shape[1]) if first else (x.shape[1], x.shape[0])
        self.layer = (type(module).__name__, int(b), int(t))

    def decide(self, shape) -> int:
        """The batch axis of inputs shaped like ``shape`` (the root's first training input):
        1 when it is ``(seq, batch, ...)`` by the sequence layer seen, else 0."""
        self.axis = 0
        if self.layer is not None and len(shape) >= 2:
            _, b, t = self.layer
            if shape[0] == t and shape[1] == b and t != b:
                self.axis = 1
        return self.axis


def batch_first(module) -> bool | None:
    """A sequence layer's ``batch_first`` (a transformer layer's is its attention's), or None."""
    value = getattr(module, "batch_first", None)
    if value is None:
        value = getattr(getattr(module, "self_attn", None), "batch_first", None)
    return value if isinstance(value, bool) else None


class PackedShape(tuple):
    """The shape of a ``PackedSequence``'s data (``(total, ...)``: every sequence's positions
    one after another), with what :func:`count` needs of its ``batch_sizes`` (per time step,
    the sequences still running): ``samples``, the sequences (the first batch size), and
    ``seq_sq``, the sum over them of the squared length, ``sum over t of (2t + 1) x
    batch_sizes[t]`` (a length ``L`` is the sum of ``2t + 1`` for ``t < L``)."""

    samples: int
    seq_sq: int


class PackedInput:
    """A ``PackedSequence`` given to the root model, as the taps read an input tensor:
    ``shape`` (a :class:`PackedShape`), ``dtype``, ``element_size()`` and ``numel()`` of its
    data. Its ``batch_sizes`` is always a CPU tensor: reading it is a host read, no sync."""

    __slots__ = ("data", "shape")

    def __init__(self, packed) -> None:
        self.data = packed.data
        sizes = packed.batch_sizes.tolist()  # ints
        shape = PackedShape(packed.data.shape)
        shape.samples = sizes[0] if sizes else 0
        shape.seq_sq = sum((2 * t + 1) * b for t, b in enumerate(sizes))
        self.shape = shape

    @property
    def dtype(self):
        return self.data.dtype

    def element_size(self) -> int:
        return self.data.element_size()

    def numel(self) -> int:
        return self.data.numel()


def count(shape, tokens: bool, axis: int) -> tuple[int, int, int]:
    """``(tokens, samples, seq_sq)`` of one input of ``shape``: samples are the size of the
    batch ``axis`` (1 for a tensor with no such axis); when the input holds token ids
    (``tokens``), every position is a token and ``seq_sq`` = tokens x positions per sample
    (the sum over its sequences of the squared sequence length); else no tokens."""
    if isinstance(shape, PackedShape):  # its sequences, not its positions, are the samples
        return (shape[0], shape.samples, shape.seq_sq) if tokens else (0, shape.samples, 0)
    samples = shape[axis] if len(shape) > axis else 1
    if not tokens:
        return 0, samples, 0
    n = 1
    for d in shape:
        n *= d
    return n, samples, n * (n // samples) if samples else 0
