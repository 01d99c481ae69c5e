"""A fingerprint of a model's weights, to key caches on (the judge's result cache, the validation
callback's "same weights as last time" check): changes whenever any value changes, however written."""

from __future__ import annotations

import torch

_ROWS_PER_CHUNK = 4096
_PROBES: dict[tuple, torch.Tensor] = {}


def _probe(length: int, device: torch.device) -> torch.Tensor:
    """A fixed pseudo-random float32 vector in [0.5, 1.5) (cached per length and device)."""
    key = (length, str(device))
    if key not in _PROBES:
        generator = torch.Generator().manual_seed(length)
        _PROBES[key] = (torch.rand(length, generator=generator) + 0.5).to(device)
    return _PROBES[key]


def weights_digest(parameters: "list[tuple[str, torch.Tensor]]") -> torch.Tensor:
    """A fingerprint of the parameters' values: changes whenever any value changes, however it was written.

    Each parameter, seen as a (rows, columns) matrix, is multiplied by a fixed random vector in float32 (one
    read of the weights, on its device) and the row results are combined with a second one in float64.
    ``.data`` writes and replaced Parameters change it too; a move to another device does not (up to the
    last bits of float32 sums). Names, shapes and dtypes are part of it.

    Args:
        parameters: ``(name, tensor)`` pairs, e.g. ``model.named_parameters()``.

    Returns:
        A float64 CPU tensor; compare two digests with ``torch.equal``.

    Example:
        >>> p = torch.nn.Parameter(torch.ones(3, 2)); before = weights_digest([("w", p)])
        >>> _ = p.data.mul_(1.5)            # a .data write: invisible to version counters
        >>> torch.equal(weights_digest([("w", p)]), before)
        False
    """
    values = []
    with torch.no_grad():
        for _, tensor in parameters:
            matrix = tensor.detach().reshape(tensor.shape[0] if tensor.dim() > 1 else 1, -1)
            rows, columns = matrix.shape
            if rows == 0 or columns == 0:
                values.append(torch.zeros((), dtype=torch.float64, device=tensor.device))
                continue
            columns_probe = _probe(columns, matrix.device)
            row_sums = [
                torch.mv(matrix[start : start + _ROWS_PER_CHUNK].float(), columns_probe)
                for start in range(0, rows, _ROWS_PER_CHUNK)
            ]
            values.append(torch.dot(torch.cat(row_sums).double(), _probe(rows, matrix.device).double()))
    digest = torch.stack(values).cpu() if values else torch.zeros(0, dtype=torch.float64)
    layout = hash(tuple((name, tuple(t.shape), str(t.dtype)) for name, t in parameters))
    return torch.cat([digest, torch.tensor([float(layout % (1 << 52))], dtype=torch.float64)])
