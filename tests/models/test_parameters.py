"""Constrained parameters (ssa_hf/models/parameters.py)."""

import torch

from ssa_hf.models.parameters import ConstrainedParameter


def test_constrained_parameter_reset_restores_init():
    p = ConstrainedParameter(2.0, 3, 3, True, "softplus", floor=1.0)
    with torch.no_grad():
        p.raw.fill_(5.0)
    p.reset(2.0)
    torch.testing.assert_close(p(), torch.full((3,), 2.0))
