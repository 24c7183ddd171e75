"""Fused CPU kernels (issue 15), built at first use with torch.utils.cpp_extension.

`csrc/fused.cpp` has four kernels of the ensemble pack's training step:
- the test row of every layer (scores, softmax, readout), two (context, layer) rows at a time with
  each row's P scores in vector registers, where the torch path (`kinds.ops._TestRowReadout`) writes
  the B x T x P scores and probabilities and reads them back in a dozen passes (`FusedTestRow`);
- the pre-norm scales r = 1/rms(W_x x) of G models as r = (xᵀ M_g x / N + eps)^(-1/2) with
  M_g = W_xᵀ W_x, without the B x P x G x N projections in memory, context and test-token scales
  multiplied and written in the layout the test row reads (`FusedTestScales`);
- the layers' score forms E_l = (W_q^l W_x)ᵀ (W_k^l W_x), one call each way where torch makes
  three (six backward) batched matmuls of T tiny matrices (`FusedLayerForms`);
- the Haar rotations of context sampling, Q of G = QR with diag R > 0 (`haar_q`, called by
  `contexts.haar_orthogonal`).
Training uses them on the CPU in float32 when nothing asks for the attention weights; evaluation
and diagnostics keep the torch path (they need p).

The build needs a C++ compiler (g++) and ninja (a dependency) and takes about half a minute of
one core once per machine; the library is
cached under torch's extension directory (TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions)
with a name that includes the CPU model and flags, because it is compiled for this CPU
(-march=native) and a home directory may be shared by different cluster nodes. Where the build
fails, a one-line notice says why and the torch path runs. DEPTHSCALE_FUSED=0 turns the kernel off.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import time
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("csrc") / "fused.cpp"
_STATE: dict = {"ops": None, "tried": False, "error": None}


def _cpu_tag() -> str:
    """What the -march=native build depends on: the CPU model and flags, and the source."""
    info = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
        info += "".join(lines)
    except OSError:
        pass
    h = hashlib.sha256((info + SOURCE.read_text() + torch.__version__).encode()).hexdigest()
    return h[:12]


def _ninja_on_path() -> None:
    """torch's extension builder runs `ninja` from PATH; the `ninja` wheel (a dependency) puts it in
    the environment's bin directory, which is not on PATH when the venv is not activated."""
    if shutil.which("ninja") is None:
        try:
            import ninja

            os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
        except ImportError:
            pass


STALE_LOCK_SECONDS = 900  # a build takes ~30 s of one core; far longer only on a crowded machine


def _clear_stale_lock(build_dir: Path) -> None:
    """torch's builder holds `<build dir>/lock` while it compiles and every other process waits for
    it, forever: a build that was killed leaves it behind. One older than STALE_LOCK_SECONDS is
    taken for such a leftover and removed (with a notice)."""
    lock = build_dir / "lock"
    try:
        age = time.time() - lock.stat().st_mtime
    except OSError:
        return
    if age > STALE_LOCK_SECONDS:
        print(f"depthscale: removing a stale build lock of the fused kernel ({lock}, {age:.0f} s old)",
              file=sys.stderr)
        lock.unlink(missing_ok=True)


def enabled() -> bool:
    return os.environ.get("DEPTHSCALE_FUSED", "1") != "0"


def fused_ops():
    """torch.ops.depthscale_fused (test_row_forward/backward, test_scales_forward/backward,
    layer_forms_forward/backward, haar_q),
    built or loaded on the first call; None where the kernels are turned off or cannot be built (the
    reason in `status()`)."""
    if not enabled():
        return None
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            from torch.utils import cpp_extension

            _ninja_on_path()
            name = f"depthscale_fused_{_cpu_tag()}"
            _clear_stale_lock(Path(cpp_extension._get_build_directory(name, verbose=False)))
            cpp_extension.load(name=name, sources=[str(SOURCE)],
                               extra_cflags=["-O3", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"],
                               is_python_module=False, verbose=False)
            _STATE["ops"] = torch.ops.depthscale_fused
        except Exception as e:  # no compiler, no ninja, a failed build: the torch path runs
            msg = " ".join(str(e).split())[:300] or type(e).__name__
            _STATE["error"] = f"{type(e).__name__}: {msg}"
            print(f"depthscale: the fused CPU kernel is not available ({_STATE['error']}); "
                  "the torch path runs instead (slower; the same numbers to float rounding)", file=sys.stderr)
    return _STATE["ops"]


def status() -> dict:
    """Whether the fused kernel is in use: {enabled, available, error} (builds it if not tried)."""
    ops = fused_ops()
    return {"enabled": enabled(), "available": ops is not None, "error": _STATE["error"]}


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t itself where its rows (last dimension) are contiguous and, for three dimensions, each
    batch entry's rows follow one another (the kernels take the batch stride: sampling's X and
    x_test are slices of one tensor); a contiguous copy otherwise."""
    ok = t.stride(-1) == 1 and (t.dim() < 3 or t.size(1) <= 1 or t.stride(1) == t.size(2)) and (
        t.dim() < 3 or t.size(0) <= 1 or t.stride(0) >= t.size(1) * t.size(2))
    return t if ok else t.contiguous()


class FusedTestRow(torch.autograd.Function):
    """py_BxT = sum_i softmax_i(rc_{owner(t), i} u_t . x_i) y_i for every context b and layer t,
    without the B x T x P scores in memory (csrc/fused.cpp). Same maths as
    `kinds.ops._TestRowReadout` when p is not needed; its backward recomputes each row. Gradients
    for u and rc always, for X and y when they require them."""

    @staticmethod
    def forward(ctx, u_BxTxd, X_BxPxd, rc_BxGxP, y_BxP, owner_T):
        ops = fused_ops()
        u, rc, y = (t.contiguous() for t in (u_BxTxd, rc_BxGxP, y_BxP))
        X = _rows(X_BxPxd)
        owner = owner_T.contiguous()
        py, lse = ops.test_row_forward(u, X, rc, y, owner)
        ctx.save_for_backward(u, X, rc, y, owner, py, lse)
        return py

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dpy_BxT):
        u, X, rc, y, owner, py, lse = ctx.saved_tensors
        need_dX, need_dy = ctx.needs_input_grad[1], ctx.needs_input_grad[3]
        du, dX, drc, dy = fused_ops().test_row_backward(dpy_BxT.contiguous(), u, X, rc, y, owner, py, lse,
                                                           need_dX, need_dy)
        return du, dX if need_dX else None, drc, dy if need_dy else None, None


class FusedTestScales(torch.autograd.Function):
    """rcq_BxGxP = rc_bgi rq_bg, the product of the pre-norm scales of context token i and of the
    test token under model g, r = 1/sqrt(xᵀ M_g x / N + eps) with M_g = W_x^gᵀ W_x^g: the scales
    of `kinds.ops._RmsScale` (1/rms of the projections) without the projections, written in the
    layout the test row reads. Gradient for M only (X and x_test are data).

    M may be K x G x d x d: the B contexts are then K equal blocks (the seed groups of a pack,
    `Nonlinear.ensemble_forward` with groups = K), block k scaled by its own G models M_k."""

    @staticmethod
    def forward(ctx, X_BxPxd, xq_Bxd, M_Gxdxd, N: int, eps: float):
        X, xq, M = _rows(X_BxPxd), _rows(xq_Bxd), M_Gxdxd.contiguous()
        rcq, rc, rq = fused_ops().test_scales_forward(X, xq, M, int(N), float(eps))
        ctx.save_for_backward(X, xq, rc, rq)
        ctx.N, ctx.K = int(N), (M.size(0) if M.dim() == 4 else 1)
        return rcq

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, drcq_BxGxP):
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:  # ensemble_forward: fused only for data X
            raise RuntimeError("FusedTestScales gives no gradient for X or x_test: call it on inputs that do "
                               "not require grad")
        X, xq, rc, rq = ctx.saved_tensors
        return None, None, fused_ops().test_scales_backward(drcq_BxGxP.contiguous(), X, xq, rc, rq, ctx.N, ctx.K), None, None


class FusedLayerForms(torch.autograd.Function):
    """E_t = (W_q^t W_x^g)ᵀ (W_k^t W_x^g), g = owner[t], for every layer t (T x d x d): the three
    batched matmuls of `Nonlinear.ensemble_forward` (and their six backward) in one call each
    way. Gradients for W_q, W_k and W_x."""

    @staticmethod
    def forward(ctx, Wq_TxNxN, Wk_TxNxN, Wx_GxNxd, owner_T):
        Wq, Wk, Wx, owner = (t.contiguous() for t in (Wq_TxNxN, Wk_TxNxN, Wx_GxNxd, owner_T))
        ctx.save_for_backward(Wq, Wk, Wx, owner)
        return fused_ops().layer_forms_forward(Wq, Wk, Wx, owner)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dE_Txdxd):
        Wq, Wk, Wx, owner = ctx.saved_tensors
        dWq, dWk, dWx = fused_ops().layer_forms_backward(dE_Txdxd.contiguous(), Wq, Wk, Wx, owner)
        return dWq, dWk, dWx, None


def use_fused(X: torch.Tensor) -> bool:
    """Whether a training forward on X can take the fused kernel: CPU, float32, no autocast, and
    the kernel built."""
    return (X.device.type == "cpu" and X.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
            and fused_ops() is not None)


__all__ = ["FusedTestRow", "FusedTestScales", "FusedLayerForms", "fused_ops", "status", "use_fused", "enabled", "SOURCE"]
