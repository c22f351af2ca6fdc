"""The traffic a serving unit sees, reduced to the few moments the capacity figures need.

A request with I prompt tokens and O output tokens reads, at its k-th decode step, a context of
I + k tokens. Averaged over every decode step of every request (a step belongs to one request, so
requests weigh in by their O), the context a decode step reads is

    E[O * (I + O/2)] / E[O]  =  E[I] + E[O^2] / (2 E[O])        (I and O independent)

and that is what bounds the KV bytes a decode step streams. A request also holds KV blocks for as
long as it runs; under GUARANTEED_NO_EVICT the scheduler reserves its whole length I + O at
admission, so the blocks held per running sequence average E[I] + E[O^2] / E[O] over time, and
under MAX_UTILIZATION blocks are taken as tokens are produced, the decode context above.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

Lengths = Union[int, Sequence[tuple[int, float]]]  # an average, or (tokens, share) with shares summing to 1


@dataclass(frozen=True)
class TrafficShape:
    mean_input: float
    mean_output: float
    mean_output_sq: float  # E[O^2]
    distribution: bool  # given as a distribution rather than averages

    @property
    def decode_context(self) -> float:
        """Mean context a decode step reads (tokens per sequence)."""
        return self.mean_input + self.mean_output_sq / (2 * self.mean_output)

    def held_tokens(self, reserves_whole_request: bool) -> float:
        """Mean KV tokens a running sequence holds: its whole length when the scheduler reserves it
        at admission (GUARANTEED_NO_EVICT), else what it has produced so far."""
        if reserves_whole_request:
            return self.mean_input + self.mean_output_sq / self.mean_output
        return self.decode_context

    def describe(self) -> str:
        how = "mean of the distribution" if self.distribution else "average"
        return f"{self.mean_input:,.0f} in / {self.mean_output:,.0f} out ({how})"


def _moments(value: Lengths) -> tuple[float, float]:
    if isinstance(value, int):
        return float(value), float(value) ** 2
    mean = sum(t * s for t, s in value)
    return mean, sum(t * t * s for t, s in value)


def traffic_shape(input_tokens: Lengths, output_tokens: Lengths) -> TrafficShape:
    mean_in, _ = _moments(input_tokens)
    mean_out, out_sq = _moments(output_tokens)
    return TrafficShape(mean_in, mean_out, out_sq,
                        distribution=not (isinstance(input_tokens, int) and isinstance(output_tokens, int)))
