"""Fused CPU kernels (issue 15), built at first use with torch.utils.cpp_extension.

`csrc/fused.cpp` has four kernels of the ensemble pack's training step:
- the test row of every layer (scores, softmax, readout), two (context, layer) rows at a time with
  each row's P scores in vector registers, where the torch path (`kinds.ops.RowReadout`) writes
  the B x T x P scores and probabilities and reads them back in a dozen passes (`FusedTestRow`);
- the pre-norm scales r = 1/rms(W_x x) of G models as r = (xᵀ M_g x / N + eps)^(-1/2) with
  M_g = W_xᵀ W_x, without the B x P x G x N projections in memory, context and test-token scales
  multiplied and written in the layout the test row reads (`FusedTestScales`);
- the layers' score forms E_l = (W_q^l W_x)ᵀ (W_k^l W_x), one call each way where torch makes
  three (six backward) batched matmuls of T tiny matrices (`FusedLayerForms`);
- the Haar rotations Q of G = QR with diag R > 0 (`haar_q`; the old stream's, kept for the roofline
  benchmark).
`csrc/sampler.cpp` has the counter-based context sampler (issue 35): `sampler_draws` (Philox-4x32-10,
Box-Muller, Householder Haar rotations: the same numbers as `contexts.draws_torch`) and
`sampler_transform` (inputs, teacher, labels, cosines, top-k, targets: `contexts.transform_torch`),
both threaded over contexts, and `philox4x32_10` (for tests).
`csrc/forms.cpp` has the test tokens' products with the layers' forms, u_bt = E_tᵀ x_b and back
(`FusedForms`), threaded over contexts and over layers, in the order MKL's sgemm summed them.
`csrc/parallel.h` hands a kernel's contexts out in chunks to whichever thread is free (each context
computed by one thread alone: the same bits at any thread count); `csrc/vec.h` the vectors and the
lane-wise fused multiply-add the kernels share; `csrc/exact.h` turns the compiler's contraction off
in the files whose arithmetic is written out (the sampler's, the forms').
Training uses them on the CPU in float32 when nothing asks for the attention weights; the final
evaluation and the monitor too, reading the rows only through their layer sums by model
(`test_row_sums`: the mean row, the input weights); diagnostics that need each layer's row keep the
torch path. `exp_rate` times the test row's own exponential
(machine.transcendental_rates: the roofline's rate for the softmax's exponentials).

The build needs a C++ compiler (g++) and ninja (a dependency) and takes about half a minute of
one core once per install and machine. It lives in a directory of its own (`build_directory`),
under DEPTHSCALE_KERNEL_DIR if set, else torch's extension directory (TORCH_EXTENSIONS_DIR,
default ~/.cache/torch_extensions), named by a hash of the CPU model and flags (it is compiled for
this CPU, -march=native, and a home directory may be shared by different cluster nodes), the
source, the torch version and the installed package's path (two checkouts never rebuild each
other's kernel). One process builds it at a time: it holds `depthscale.lock` there (an flock, so
a holder that dies releases it at once; the file names the holder's pid, host and start time, and
a process that finds it held waits with a one-line note). The compiler runs in a child process
that dies with its parent (PR_SET_PDEATHSIG) and then kills everything it started, so a build
killed at any moment leaves no ninja or cc1plus behind (and the next builder kills any that a
harder kill left). Where the build fails, a one-line notice says why and the torch path runs.
DEPTHSCALE_FUSED=0 turns the kernel off.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import torch

from depthscale.base.errors import InputError

SOURCE = Path(__file__).parents[1] / "csrc" / "fused.cpp"  # depthscale/csrc
SOURCES = (SOURCE, SOURCE.with_name("sampler.cpp"), SOURCE.with_name("forms.cpp"))  # one library; ninja recompiles only the changed file
HEADERS = tuple(SOURCE.with_name(h) for h in ("parallel.h", "vec.h", "exact.h"))  # included by the sources: part of the build's hash
KERNEL_DIR_ENV = "DEPTHSCALE_KERNEL_DIR"  # the root of the build directories (default: torch's)
_BUILD_MARK = "DEPTHSCALE_KERNEL_BUILD"  # set in the build's environment: its compilers are found by it
_CFLAGS, _LDFLAGS = ["-O3", "-march=native", "-fopenmp", "-fno-math-errno"], ["-fopenmp"]  # (errno only: sqrt vectorises)
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
    h = hashlib.sha256((info + "".join(p.read_text() for p in SOURCES + HEADERS) + torch.__version__).encode()).hexdigest()
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


def extension_name() -> str:
    """The library's name (the .so), by CPU, source and torch version."""
    return f"depthscale_fused_{_cpu_tag()}"


def build_directory(package_dir: Path | str | None = None) -> Path:
    """Where this install (`package_dir`: the installed depthscale package, default this one)
    builds the kernel: <root>/<extension_name>_<hash of the package's path>."""
    root = os.environ.get(KERNEL_DIR_ENV)
    if not root:
        from torch.utils import cpp_extension

        root = os.path.join(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root(),
                            "depthscale")
    pkg = str(Path(package_dir or Path(__file__).parents[1]).resolve())  # the depthscale package
    return Path(root).expanduser() / f"{extension_name()}_{hashlib.sha256(pkg.encode()).hexdigest()[:10]}"


# ---- one builder at a time, none left behind ----

def _holder(lock: Path) -> str:
    """The lock file's holder, in words."""
    try:
        h = json.loads(lock.read_text())
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(h["started"])))
        return f"pid {int(h['pid'])} on {h['host']} (since {started})"
    except Exception:  # being written, or not ours
        return "another process"


def acquire_build_lock(build_dir: Path, poll: float = 0.5) -> int:
    """Hold `<build_dir>/depthscale.lock` (an flock: released when its holder dies, however it
    dies) and return its descriptor; while a live process holds it, wait, with one line on stderr
    naming it. Holding it, the leftovers of a dead build are cleared: torch's own `lock` (which
    makes torch wait forever) and any compiler a killed build left running."""
    build_dir.mkdir(parents=True, exist_ok=True)
    lock = build_dir / "depthscale.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    noted = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not noted:
                print(f"depthscale: waiting for the fused kernel's build by {_holder(lock)} in {build_dir}",
                      file=sys.stderr, flush=True)
                noted = True
            time.sleep(poll)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode(), 0)
    (build_dir / "lock").unlink(missing_ok=True)  # torch's: every builder here holds ours first
    _kill(_marked(str(build_dir)))
    return fd


def _proc_table() -> dict[int, int]:
    """pid -> parent pid of every process (/proc; empty where there is none)."""
    table = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            table[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError, IndexError):
            pass
    return table


def _descendants(pid: int) -> list[int]:
    table, found, todo = _proc_table(), [], [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in table.items() if pp == p]
        found += kids
        todo += kids
    return found


def _marked(build_dir: str) -> list[int]:
    """Processes whose environment marks them as a build of `build_dir` (a dead build's leftovers
    when nobody holds the lock)."""
    mark = f"{_BUILD_MARK}={build_dir}".encode()
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if mark in (d / "environ").read_bytes().split(b"\0"):
                pids.append(int(d.name))
        except (OSError, ValueError):
            pass
    return [p for p in pids if p != os.getpid()]


def _kill(pids) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _kill_descendants_and_exit(signum, frame) -> None:
    """The build child's handler of SIGTERM (its parent died: PR_SET_PDEATHSIG), SIGINT and SIGHUP:
    kill every process it started (it is their subreaper: orphans come back to it) and exit."""
    for _ in range(50):
        kids = _descendants(os.getpid())
        if not kids:
            break
        _kill(kids)
        time.sleep(0.02)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
    raise SystemExit(128 + signum)


def _child_build(name: str, build_dir: str, parent: int) -> None:
    """The build, in a child process of the one that needs the kernel (`_build`)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _kill_descendants_and_exit)
    libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the build's orphans stay ours to kill
    libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG: told when the parent dies
    if os.getppid() != parent:  # it died before that
        _kill_descendants_and_exit(signal.SIGTERM, None)
    os.environ[_BUILD_MARK] = build_dir
    # one compiler per core (ninja's default is cores + 2): no faster, and each compiler of these
    # sources holds ~0.8 GB (the main job's footprint peaked at 3.5 GB while three compiled; issue 51)
    os.environ.setdefault("MAX_JOBS", str(max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                                else os.cpu_count() or 1)))
    _ninja_on_path()
    try:
        from torch.utils import cpp_extension

        cpp_extension.load(name=name, sources=[str(p) for p in SOURCES], extra_cflags=_CFLAGS, extra_ldflags=_LDFLAGS,
                           build_directory=build_dir, is_python_module=False, verbose=False)
    except Exception as e:
        msg = " ".join(str(e).split())[:300] or type(e).__name__
        print(f"{type(e).__name__}: {msg}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _build(name: str, build_dir: Path) -> Path:
    """The library, built if not yet (under the build lock, in a child process that takes its
    compilers with it if this process dies). Raises RuntimeError with the build's error."""
    lib = build_dir / f"{name}.so"
    stamp = build_dir / "built"  # written after a whole build: a directory's library never changes then
    if lib.exists() and stamp.exists() and stamp.read_text() == name:
        return lib
    fd = acquire_build_lock(build_dir)
    try:
        if not (lib.exists() and stamp.exists() and stamp.read_text() == name):
            stamp.unlink(missing_ok=True)
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                [str(Path(__file__).resolve().parents[2])] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
            code = "import sys; from depthscale.data.kernels import _child_build; _child_build(*sys.argv[1:3], int(sys.argv[3]))"
            proc = subprocess.Popen([sys.executable, "-c", code, name, str(build_dir), str(os.getpid())], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, pass_fds=(fd,))
            try:
                _, err = proc.communicate()
            except BaseException:  # interrupted: the child kills its compilers before it exits
                proc.terminate()
                proc.wait()
                raise
            if proc.returncode != 0:
                lines = [ln for ln in err.splitlines() if ln.strip()]
                raise RuntimeError(lines[-1] if lines else f"the build exited with {proc.returncode}")
            stamp.write_text(name)
    finally:
        os.close(fd)
    return lib


FUSED_ENV = "DEPTHSCALE_FUSED"  # "0": the torch path; "1" (or unset): the fused kernels where they build


def enabled() -> bool:
    """Whether $DEPTHSCALE_FUSED lets the fused kernels run: "1" or unset (or empty) yes, "0" no;
    any other value (false, no, 2, ' 0') is an InputError naming it, never a silent "on"."""
    text = os.environ.get(FUSED_ENV, "")
    if text not in ("", "0", "1"):
        raise InputError(f"{FUSED_ENV} must be 0 (the torch path) or 1 (the fused kernels), got {text[:40]!r}")
    return text != "0"


def fused_ops():
    """torch.ops.depthscale_fused (test_row_forward/backward, test_scales_forward/backward,
    layer_forms_forward/backward, haar_q, lanes, exp_rate, sampler_draws, sampler_transform,
    sampler_contexts_keys, philox4x32_10),
    built or loaded on the first call; None where the kernels are turned off or cannot be built (the
    reason in `status()`)."""
    if not enabled():
        return None
    if not _STATE["tried"]:
        _STATE["tried"] = True
        try:
            torch.ops.load_library(str(_build(extension_name(), build_directory())))
            _STATE["ops"] = torch.ops.depthscale_fused
        except Exception as e:  # no compiler, no ninja, a failed build: the torch path runs
            msg = " ".join(str(e).split())[:300] or type(e).__name__
            _STATE["error"] = f"{type(e).__name__}: {msg}"
            print(f"depthscale: the fused CPU kernel is not available ({_STATE['error']}); "
                  "the torch path runs instead (slower; the same numbers to float rounding)", file=sys.stderr)
    return _STATE["ops"]


def expected() -> bool:
    """Whether a run here will use the fused kernels: they are on and have not failed to build or
    load in this process. Starts no build (what a memory estimate assumes, before any training)."""
    return enabled() and not (_STATE["tried"] and _STATE["ops"] is None)


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
    `kinds.ops.RowReadout` when p is not needed; its backward recomputes each row. Gradients
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


@torch.no_grad()
def test_row_sums(u_BxTxd, X_BxPxd, rc_BxGxP, y_BxP, owner_T, coef_CxT):
    """(py_BxT, S_BxCxGxP) without gradients: `FusedTestRow`'s readout py and, for each row c of
    coef, the layer sums of the attention rows by model, S[b, c, g] = sum_{t of model g} coef[c, t] p_bt
    (csrc/fused.cpp, test_row_weights: the rows recomputed from the forward's log-normaliser, never
    held as B x T x P). The evaluation's mean rows and input weights (issue 50)."""
    ops = fused_ops()
    u, rc, y, coef = (t.contiguous() for t in (u_BxTxd, rc_BxGxP, y_BxP, coef_CxT))
    X = _rows(X_BxPxd)
    owner = owner_T.contiguous()
    py, lse = ops.test_row_forward(u, X, rc, y, owner)
    return py, ops.test_row_weights(u, X, rc, y, owner, lse, coef)


class FusedForms(torch.autograd.Function):
    """u_BxTxd[b, t] = E_kt^T xq_b for K equal blocks of contexts (block k = b // (B / K) meets only
    E_KxTxdxd[k]): the batched product x_test @ [E_1 .. E_T] of `Nonlinear.ensemble_forward`
    without E's transpose, split evenly over threads (csrc/forms.cpp; the same sums in the same
    order as MKL's). Gradient for E only (x_test is data)."""

    @staticmethod
    def forward(ctx, xq_Bxd, E_KxTxdxd):
        if ctx.needs_input_grad[0]:
            raise ValueError("FusedForms: x_test must not require a gradient (it is data)")
        xq, E = _rows(xq_Bxd), E_KxTxdxd.contiguous()
        ctx.save_for_backward(xq)
        ctx.K = E.size(0)
        return fused_ops().forms_forward(xq, E)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, du_BxTxd):
        (xq,) = ctx.saved_tensors
        return None, fused_ops().forms_backward(du_BxTxd.contiguous(), xq, ctx.K)


class FusedTestScales(torch.autograd.Function):
    """rcq_BxGxP = rc_bgi rq_bg, the product of the pre-norm scales of context token i and of the
    test token under model g, r = 1/sqrt(xᵀ M_g x / N + eps) with M_g = W_x^gᵀ W_x^g: the scales
    of `kinds.ops.RmsScale` (1/rms of the projections) without the projections, written in the
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


__all__ = ["FusedTestRow", "test_row_sums", "FusedForms", "FusedTestScales", "FusedLayerForms", "fused_ops", "status", "use_fused", "enabled", "SOURCE", "SOURCES",
           "build_directory", "extension_name", "acquire_build_lock", "KERNEL_DIR_ENV"]
