"""The trainer's checkpoint format, in one place: what a checkpoint holds (`build`), its bytes
(`to_bytes`), and those bytes read back and checked (`parse`, `read`). The storage keeps the
bytes as an opaque file (storage.RunStorage.save_checkpoint / load_checkpoint).

A checkpoint is a torch file of a dict: step, params and Adam's moments (names -> tensors),
Adam's step count t, the run's bookkeeping (RunState's fields), its config, its pack (the
configs of all members, in order: a resume rebuilds it) and the intra-op thread count it trained
at (float sums depend on it: a resume uses it again). It is read as data only
(atomic.load_torch_bytes: a pickle that would import or call anything is refused unread, and a
file whose records declare more bytes than it holds is refused before anything is decompressed).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import torch

from depthscale.base.atomic import RefusedPickle, load_torch_bytes

# a checkpoint's entries and what each must be
FIELDS = {"step": int, "params": dict, "adam": dict, "state": dict, "config": dict, "pack": list}


def build(step: int, params: dict, adam: dict, state: dict, config: dict, pack: list[dict]) -> dict:
    """A run's checkpoint after `step` steps (tensors on the CPU; `adam`: m, v, t)."""
    return {"step": step, "params": params, "adam": {"m": adam["m"], "v": adam["v"], "t": adam["t"]},
            "state": state, "config": config, "pack": pack, "threads": torch.get_num_threads()}


def to_bytes(ck: dict) -> bytes:
    """The checkpoint as the bytes of a torch file."""
    buf = io.BytesIO()
    torch.save(ck, buf)
    return buf.getvalue()


def problem(ck: Any) -> str | None:
    """What keeps `ck` (a checkpoint as loaded) from being a checkpoint, or None. Any checkpoint
    is a dict; one that names a config (the trainer resumes only those: training.run_pack) must
    hold every entry of FIELDS: step >= 0, named tensors for params and Adam's m and v, a number
    for Adam's t and string keys in state."""
    if not isinstance(ck, dict):
        return f"it holds {type(ck).__name__}, not a checkpoint"
    if "config" not in ck:
        return None
    for key, kind in FIELDS.items():
        if not isinstance(ck.get(key), kind) or isinstance(ck.get(key), bool):
            return f"its {key!r} is missing or not {kind.__name__}"
    if ck["step"] < 0:
        return f"its step {ck['step']} is negative"
    adam = ck["adam"]
    for name, tensors in (("params", ck["params"]), ("adam m", adam.get("m")), ("adam v", adam.get("v"))):
        if not isinstance(tensors, dict) or not all(isinstance(k, str) and isinstance(t, torch.Tensor)
                                                    for k, t in tensors.items()):
            return f"its {name} are not named tensors"
    if isinstance(adam.get("t"), bool) or not isinstance(adam.get("t"), (int, float)):
        return "its adam t is not a number"
    if not all(isinstance(k, str) for k in ck["state"]):
        return "its state has a key that is not a string"
    return None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else ""


def parse(blob: bytes) -> tuple[dict | None, str | None]:
    """(the checkpoint in `blob`, None), or (None, why it is none: one line) for bytes that are
    refused (a pickle naming code), unreadable (truncated, corrupt, of another layout) or not a
    checkpoint (`problem`)."""
    try:
        ck = load_torch_bytes(blob, "cpu")
    except RefusedPickle as e:  # "<name>: refused to load: ..."
        return None, str(e).partition(": ")[2]
    except Exception as e:  # noqa: BLE001 - truncated, corrupt, or from an incompatible version
        return None, f"{type(e).__name__}: {_first_line(e)}"
    why = problem(ck)
    return (ck, None) if why is None else (None, why)


def read(storage, rid: str) -> dict | None:
    """Run `rid`'s checkpoint from `storage` (a RunStorage), or None: none stored, or one that
    `parse` turns away, with one warning saying why (the run then starts again from step 0)."""
    blob = storage.load_checkpoint(rid)
    if blob is None:
        return None
    ck, why = parse(blob)
    if why is not None:
        warnings.warn(f"ignoring unreadable checkpoint of run {rid}: {why}; the run starts again", stacklevel=2)
    return ck


__all__ = ["FIELDS", "build", "to_bytes", "problem", "parse", "read"]
