"""The test tokens' products with the layers' forms (csrc/forms.cpp, kernels.FusedForms): the sums in
the order the file writes down, bit for bit, at any thread count; gradients against float64."""

import pytest
import torch

from depthscale.data import kernels

needs_kernel = pytest.mark.skipif(not kernels.enabled(), reason="DEPTHSCALE_FUSED=0 turns the kernel off")


def _fma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """a b + c rounded once to float32 (the product is exact in float64; the sum's rounding to
    float64 first can differ from one rounding only at a float32 tie, which these seeds do not meet)."""
    return (a.double() * b.double() + c.double()).float()


def _forward_reference(xq, E):
    """u[b, t, j] = sum_a xq[b, a] E[k, t, a, j], a in order from the first rounded product."""
    K, T, d, _ = E.shape
    Ek = E.repeat_interleave(xq.shape[0] // K, dim=0)  # B x T x d x d: each context's block's forms
    u = (xq[:, None, 0, None].double() * Ek[:, :, 0, :].double()).float()
    for a in range(1, d):
        u = _fma(xq[:, None, a, None], Ek[:, :, a, :], u)
    return u


def _runs(n: int) -> list[int]:
    if n <= 192:
        return [n]
    if n <= 384:
        return [(n + 1) // 2, n - (n + 1) // 2]
    return [192] * (n // 192) + ([n % 192] if n % 192 else [])


def _backward_reference(du, xq, K):
    """dE[k, t, a, j]: the block's contexts in runs, each run by fused multiply-adds in order from
    its first rounded product, the runs' sums added in order."""
    B, T, d = du.shape
    Bk, out = B // K, []
    for k in range(K):
        total, b = None, k * Bk
        for n in _runs(Bk):
            part = (xq[b, None, :, None].double() * du[b, :, None, :].double()).float()
            for c in range(b + 1, b + n):
                part = _fma(xq[c, None, :, None], du[c, :, None, :], part)
            total = part if total is None else total + part
            b += n
        out.append(total)
    return torch.stack(out)


@needs_kernel
@pytest.mark.parametrize("K,Bk,T,d", [(3, 64, 9, 16), (2, 200, 3, 16), (1, 400, 2, 16), (2, 7, 5, 16),
                                      (3, 10, 4, 5), (1, 390, 2, 3)])
def test_forms_are_the_sums_in_the_written_order(K, Bk, T, d):
    # (2, 200): two runs of 100; (1, 400): 192 + 192 + 16; (2, 7): contexts not in fours; d = 5, 3:
    # the scalar path
    g = torch.Generator().manual_seed(5)
    xq, E = torch.randn(K * Bk, d, generator=g), torch.randn(K, T, d, d, generator=g)
    du = torch.randn(K * Bk, T, d, generator=g)
    ops = kernels.fused_ops()
    assert torch.equal(ops.forms_forward(xq, E), _forward_reference(xq, E))
    assert torch.equal(ops.forms_backward(du, xq, K), _backward_reference(du, xq, K))


@needs_kernel
def test_the_runs_matter():
    # the backward's runs are not a plain sum in order: at 256 contexts (two runs of 128) the two
    # differ in some entries, so the test above can tell the rule from a sequential sum
    g = torch.Generator().manual_seed(6)
    xq, du = torch.randn(256, 16, generator=g), torch.randn(256, 4, 16, generator=g)
    plain = (xq[0, None, :, None].double() * du[0, :, None, :].double()).float()
    for c in range(1, 256):
        plain = _fma(xq[c, None, :, None], du[c, :, None, :], plain)
    assert not torch.equal(kernels.fused_ops().forms_backward(du, xq, 1)[0], plain)


@needs_kernel
def test_forms_are_the_same_bits_at_any_thread_count():
    g = torch.Generator().manual_seed(7)
    K, Bk, T, d = 3, 256, 127, 16
    xq, E = torch.randn(K * Bk, d, generator=g), torch.randn(K, T, d, d, generator=g)
    du = torch.randn(K * Bk, T, d, generator=g)
    ops, before, runs = kernels.fused_ops(), torch.get_num_threads(), []
    try:
        for threads in (1, 2, 3):
            torch.set_num_threads(threads)
            runs.append((ops.forms_forward(xq, E), ops.forms_backward(du, xq, K)))
    finally:
        torch.set_num_threads(before)
    for u, dE in runs[1:]:
        assert torch.equal(u, runs[0][0]) and torch.equal(dE, runs[0][1])


@needs_kernel
def test_fused_forms_gradient_matches_float64_and_refuses_a_differentiable_query():
    g = torch.Generator().manual_seed(8)
    K, Bk, T, d = 2, 12, 5, 16
    xq = torch.randn(K * Bk, d, generator=g)
    E32 = torch.randn(K, T, d, d, generator=g).requires_grad_()
    E64 = E32.detach().double().requires_grad_()
    u32 = kernels.FusedForms.apply(xq, E32)
    u64 = torch.einsum("kbi,ktij->kbtj", xq.double().view(K, Bk, d), E64).reshape(K * Bk, T, d)
    eps = torch.finfo(torch.float32).eps
    assert (u32.double() - u64).abs().max().item() <= 16 * eps * u64.abs().max().item()
    w = torch.randn(u64.shape, generator=g, dtype=torch.float64)
    (u32 * w.float()).sum().backward()
    (u64 * w).sum().backward()
    assert (E32.grad.double() - E64.grad).abs().max().item() <= 64 * eps * E64.grad.abs().max().item()
    with pytest.raises(ValueError, match="x_test"):
        kernels.FusedForms.apply(xq.clone().requires_grad_(), E32)


@needs_kernel
def test_forms_refuse_bad_shapes():
    ops = kernels.fused_ops()
    with pytest.raises(RuntimeError, match="K equal blocks"):
        ops.forms_forward(torch.zeros(7, 16), torch.zeros(2, 3, 16, 16))
    with pytest.raises(RuntimeError, match="d = xq's"):
        ops.forms_forward(torch.zeros(8, 16), torch.zeros(2, 3, 8, 8))
    with pytest.raises(RuntimeError, match="B x T x d"):
        ops.forms_backward(torch.zeros(8, 3, 8), torch.zeros(8, 16), 2)
    with pytest.raises(RuntimeError, match="xq must be"):
        ops.forms_backward(torch.zeros(8, 3, 16), torch.zeros(8, 16, dtype=torch.float64), 2)


@needs_kernel
def test_forms_of_no_contexts():
    # an empty batch: no forms forward, and a gradient of zeros (nothing summed) backward
    ops = kernels.fused_ops()
    assert ops.forms_forward(torch.zeros(0, 16), torch.ones(2, 3, 16, 16)).shape == (0, 3, 16)
    dE = ops.forms_backward(torch.zeros(0, 3, 16), torch.zeros(0, 16), 2)
    assert dE.shape == (2, 3, 16, 16) and torch.equal(dE, torch.zeros(2, 3, 16, 16))
