"""What an LLM plan reports (issue 23): tokens per second per request and in aggregate, the time to
the first token of a prefill, and the largest context the wafer's SRAM can hold. Pure rules on
numbers, applied by the builder to the solvers' plan and by the verifier to its own recomputation.

* A **decode** step makes one token for each of the ``batch`` requests decoded together; a
  **prefill** processes the prompt's ``tokens`` at once. The time of one pass through the kernels is
  the token path (``rules.objective_value`` under ``latency``: kernel stage times along the longest
  path; regions one after another).
* ``tokens_per_s_per_request``: a decode step's one token per request over the pass time; a prefill's
  prompt tokens over it (as WaferLLM's prefill table counts it); with several requests in flight,
  each one's share of the aggregate.
* With ``requests`` sequences in flight, interleaved through the kernels, a new pass can enter every
  ``slowest`` cycles (the slowest stage or region: a region is busy for all its kernels), so passes
  complete at ``min(requests / path, 1 / slowest)`` per cycle; aggregate tokens/s is that times the
  tokens of a pass, and each request gets its share.
* The largest context: the wafer's usable SRAM (every core) minus the weights and the buffers of the
  plan's kernels, over the KV cache bytes one token adds at this batch (the cache grows with the
  context; weights and buffers do not).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LlmShape:
    """What an LLM export is, read from its graph: the phase, the requests decoded together, the new
    tokens of a pass per request, the context (past length, or the prompt), the cache bytes per token."""

    phase: str  # "decode" or "prefill"
    batch: int
    tokens: int  # per request per pass: 1 for a decode step, the prompt's length for a prefill
    context: int  # decode: the past length; prefill: the prompt's length
    kv_bytes_per_token: int  # the cache bytes one more token of context adds (all layers, the whole batch)


def tokens_per_s_per_request(shape: LlmShape, clock_hz: float, path_cycles: int, slowest_cycles: int, requests: int) -> float:
    """One request's tokens per second: its tokens of a pass over the pass time (with one request in
    flight); with several, its share of the aggregate (the slowest stage may hold passes back)."""
    return aggregate_tokens_per_s(shape, clock_hz, path_cycles, slowest_cycles, requests) / (requests * shape.batch)


def aggregate_tokens_per_s(shape: LlmShape, clock_hz: float, path_cycles: int, slowest_cycles: int, requests: int) -> float:
    """Every request's tokens per second with ``requests`` sequences in flight (module docstring)."""
    passes_per_cycle = min(requests / max(path_cycles, 1), 1.0 / max(slowest_cycles, 1))
    return passes_per_cycle * clock_hz * shape.tokens * shape.batch


def largest_context(shape: LlmShape, sram_bytes: int, weight_bytes: int, buffer_bytes: int) -> int:
    """The longest context whose KV cache fits beside the weights and buffers in ``sram_bytes``."""
    if shape.kv_bytes_per_token <= 0:
        return 0
    return max(0, (sram_bytes - weight_bytes - buffer_bytes) // shape.kv_bytes_per_token)
