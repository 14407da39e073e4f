"""``--pad-tokens skip``: a training forward's tokens are its non-pad positions (docs/spec.md
"Tokens and padding").

By default every position of the token tensor is a token (pad included): metadata only. With
``tm --pad-tokens skip`` (``TRAINMETER_PAD_TOKENS=skip`` in the child's environment), a root
forward called with an ``attention_mask`` keyword counts the mask's nonzero positions instead,
when that mask can be read without breaking the no-device-sync invariant:

- a CPU tensor of an integer or bool dtype, shaped like the token ids: counted with
  ``count_nonzero`` (a CPU op; nonzero rather than ``== 1``, so packed-sequence masks that number
  their documents 1, 2, ... count every real token);
- anything else (a mask on an accelerator, a float additive mask, another shape, no mask):
  every position, and the agent says why in a ``tokens_counting`` record (a note on screen).

A mask on an accelerator is refused rather than copied: reading it would take a device-to-host
copy queued on the user's stream (plus pinned host memory and an event to poll), a transfer
trainmeter does not own and one that would be captured into a CUDA graph; the no-device-sync
invariant allows the agent only Python numbers and 0-d CPU tensors.

The count runs where the token tensors are counted (the sender thread, or the step hook when
the queue is long), up to 0.1 s after the forward: a mask buffer the loop rewrites in place
within that time would be read after the rewrite.
"""

from __future__ import annotations

from trainmeter.agent import guard

NAME = "pad-token count"
ALL, NON_PAD = "all positions", "non-pad"
MAX_REPORTS = 8  # tokens_counting records per process (one per change of what is counted)


def pad_counter(agent, torch) -> PadCounter | None:
    """A :class:`PadCounter` when the run asked for ``--pad-tokens skip``, else None (the
    default: every position counts, and the forward wrapper keeps its fast path)."""
    return PadCounter(agent, torch) if getattr(agent, "pad_skip", False) else None


class PadCounter:
    """Non-pad tokens of one forward from its ``attention_mask``.

    Args:
        agent: the agent whose ``put`` receives ``tokens_counting`` records.
        torch: the imported torch module.
    """

    def __init__(self, agent, torch) -> None:
        self.agent = agent
        self.tensor = torch.Tensor
        self.ids = (torch.int64, torch.int32)
        self.masks = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
        self.last: tuple | None = None
        self.reports = 0

    @staticmethod
    def mask(kwargs) -> object:
        """The forward's ``attention_mask`` keyword (None without one): kept beside the ids."""
        return kwargs.get("attention_mask") if kwargs else None

    def tokens(self, ids, mask) -> int:
        """Tokens of one forward: ``mask``'s nonzero positions when it is readable, else every
        position of ``ids`` (0 when ``ids`` is not an integer tensor, as without the option)."""
        if ids.dtype not in self.ids:
            return 0
        if not guard.is_off(NAME):
            try:
                reason = self._refusal(ids, mask)
                n = ids.numel() if reason else int(mask.count_nonzero())  # a 0-d CPU tensor
                self._report(reason)
                return n
            except Exception as exc:  # all positions from now on; the sender goes on
                guard.failed(NAME, exc)
                self.last = None
                try:
                    self._report("the count stopped after an internal error")
                except Exception:
                    pass
        return ids.numel()

    def _refusal(self, ids, mask) -> str | None:
        """Why ``mask`` cannot give the non-pad count (None: it can)."""
        if not isinstance(mask, self.tensor):
            return "no attention_mask argument"
        if mask.device.type != "cpu":
            return (f"attention_mask on {mask.device.type}: the agent never reads an "
                    "accelerator tensor's values")  # fmt: skip
        if mask.dtype not in self.masks:
            return f"attention_mask of dtype {str(mask.dtype).removeprefix('torch.')}, not 0/1"
        if mask.shape != ids.shape:
            return "attention_mask not shaped like the token ids"
        return None

    def _report(self, reason: str | None) -> None:
        """A ``tokens_counting`` record each time what is counted changes (at most
        ``MAX_REPORTS``); the engine turns a refusal into a note."""
        key = (NON_PAD, None) if reason is None else (ALL, reason)
        if key == self.last or self.reports >= MAX_REPORTS:
            return
        self.last, self.reports = key, self.reports + 1
        put = getattr(self.agent, "put", None)
        if put is not None:
            put("tokens_counting", rank=getattr(self.agent, "rank", 0), counting=key[0],
                reason=reason)  # fmt: skip
