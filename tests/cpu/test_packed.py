"""oneDNN-packed linear weights: inference equals F.linear, training and autocast bypass them, updates are seen."""

import copy

import pytest
import torch
import torch.nn.functional as F

from evolvekit.llm.packed import pack_linears, unpack_linears

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="oneDNN not built in")


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8, bias=False))


def reference(m, x):
    h = F.relu(F.linear(x, m[0].weight, m[0].bias))
    return F.linear(h, m[2].weight)


def test_packed_inference_matches_and_follows_in_place_updates():
    m = model()
    assert pack_linears(m) == 2 and pack_linears(m) == 0  # idempotent
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        assert torch.allclose(m(x), reference(m, x), atol=1e-5)
        assert m[0].__dict__["_packed_weight"].packed is not None  # the packed path ran
        m[0].weight.add_(0.5)  # an optimizer step: the packed copy is stale and must be rebuilt
        assert torch.allclose(m(x), reference(m, x), atol=1e-5)


def test_gradients_flow_through_the_real_parameters():
    m = model()
    pack_linears(m)
    x = torch.randn(4, 16)
    m(x).sum().backward()
    assert m[0].weight.grad is not None and m[2].weight.grad is not None
    assert m[0].__dict__["_packed_weight"].packed is None  # training never packs


def test_a_deep_copy_uses_its_own_weights():
    m = model()
    pack_linears(m)
    x = torch.randn(2, 16)
    with torch.no_grad():
        m(x)
        twin = copy.deepcopy(m)
        twin[2].weight.mul_(-1)
        assert torch.allclose(twin(x), reference(twin, x), atol=1e-5)
        assert torch.allclose(m(x), reference(m, x), atol=1e-5)


def test_unpack_restores_the_plain_forward():
    m = model()
    pack_linears(m)
    assert unpack_linears(m) == 2
    assert "forward" not in m[0].__dict__ and "_packed_weight" not in m[0].__dict__
