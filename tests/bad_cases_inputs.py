"""Issue 28, Inputs (items 9-12): grid files, paths, numbers and theory arguments that got a
traceback, a hang or an allocation of terabytes. Each gets one line and exit code 2 and changes
nothing (rows of tests/test_cli.py's bad-input table, written to docs/bad_inputs.md)."""

import json
import os
from pathlib import Path

BIG = "1" + "0" * 400  # 10^400: Python reads it; a float, a tensor size or a C int cannot hold it
DEEP = 100_000  # nested brackets: json and tomllib recurse once per level

GRIDS = {
    "table.toml": '[model]\nname = "linear"\n',  # a TOML table where a value belongs
    "listk.json": '{"k": [[2]]}',
    "listmodel.json": '{"model": [["linear"]]}',
    "listpreset.json": '{"preset": [["smoke"]]}',
    "deep.json": "[" * DEEP + "]" * DEEP,
    "deep.toml": "a = " + "[" * DEEP + "]" * DEEP + "\n",
    # 10,000 seeds x 1,000 depths: 10^7 runs (expanding them took minutes)
    "tenmillion.json": json.dumps({"seed": list(range(10_000)), "L": list(range(1, 1_001))}),
    # two tables of 60,000 runs each: 120,000 runs in all
    "union.json": json.dumps([{"seed": list(range(60_000))}, {"seed": list(range(60_000)), "L": 2}]),
}

LONG_NAME = "a" * 300  # one path component over NAME_MAX (255 bytes)
LONG_PATH = "/".join(["b" * 200] * 25)  # 5,000 bytes: over PATH_MAX (4,096)


def prepare(tmp_path: Path) -> dict:
    """{link_full}, {link_full_png}: a .csv and a .png symlink to /dev/full; {link_dir}: a .csv
    symlink to a directory; {fifo}: a FIFO named .csv; {long_name}, {long_path}: a path with a
    300-byte component, one of 5,025 bytes (not created); {big}: the number 10^400 (placeholders
    keep docs/bad_inputs.md's rows short)."""
    (tmp_path / "full.csv").symlink_to("/dev/full")
    (tmp_path / "full.png").symlink_to("/dev/full")
    (tmp_path / "adir").mkdir()
    (tmp_path / "todir.csv").symlink_to(tmp_path / "adir")
    os.mkfifo(tmp_path / "fifo.csv")
    # the long paths are absolute and outside tmp_path, so that the lengths in their messages (and
    # docs/bad_inputs.md) do not change with the test's directory; they are refused before anything is made
    return {"big": BIG, "long_name": "/" + LONG_NAME + "/store", "long_path": "/" + LONG_PATH,
            "link_full": tmp_path / "full.csv", "link_full_png": tmp_path / "full.png", "link_dir": tmp_path / "todir.csv", "fifo": tmp_path / "fifo.csv"}


TRAIN = ("train", "--preset", "smoke", "--store", "{store}")
SWEEP = ("sweep", "--preset", "smoke", "--store", "{store}")
TH = ("theory",)
COLLECT = ("collect", "--store", "{store}", "--out")

CASES = [
    # 9. grid files
    ("grid file: a TOML table as a value", SWEEP + ("--grid", "{grid:table.toml}"),
     "grid key 'model': each value must be a number, a string or true/false, got a table"),
    ("grid file: a list of lists (k)", SWEEP + ("--grid", "{grid:listk.json}"), "grid key 'k': each value must be"),
    ("grid file: a list of lists (model)", SWEEP + ("--grid", "{grid:listmodel.json}"),
     "grid key 'model': each value must be a number, a string or true/false, got a list: [['linear']]"),
    ("grid file: a list of lists (preset)", SWEEP + ("--grid", "{grid:listpreset.json}"),
     "grid key 'preset': each value must be"),
    ("grid file: 100,000 nested brackets (JSON)", SWEEP + ("--grid", "{grid:deep.json}"), "is nested too deeply"),
    ("grid file: 100,000 nested brackets (TOML)", SWEEP + ("--grid", "{grid:deep.toml}"), "is nested too deeply"),
    ("grid file: 10^7 runs (over the limit)", SWEEP + ("--grid", "{grid:tenmillion.json}"),
     "the grid has 10,000,000 runs (the product of its lists' lengths), more than the limit of 100,000"),
    ("grid file: two tables, 120,000 runs in all", SWEEP + ("--grid", "{grid:union.json}"),
     "the grid has 120,000 runs (the product of its lists' lengths, summed over its tables)"),
    ("--shard with full-width digits", SWEEP + ("--grid", "{grid:ok.json}", "--shard", "\uff10/\uff12"),
     "shard must look like i/n with 0 <= i < n (digits 0-9)"),
    # 10. paths
    ("--store component over NAME_MAX", ("train", "--preset", "smoke", "--store", "{long_name}"),
     "is 300 bytes, longer than the 255 this filesystem allows"),
    ("--store over PATH_MAX", ("train", "--preset", "smoke", "--store", "{long_path}"),
     "this system allows 4,096"),
    ("status --store over PATH_MAX", ("status", "--store", "{long_path}"), "this system allows 4,096"),
    ("--store of an unknown user", ("train", "--preset", "smoke", "--store", "~nouser_depthscale/x"),
     "'~nouser_depthscale' names no home directory"),
    ("report --out under /proc", ("report", "--store", "{store}", "--out", "/proc/depthscale_x"),
     "--out '/proc/depthscale_x': cannot write there: No such file or directory"),
    ("collect --out under /proc", COLLECT + ("/proc/depthscale_x.csv",), "cannot write there"),
    ("collect --out a symlink to /dev/full", COLLECT + ("{link_full}",),
     "(a link to /dev/full) is a character device, not a regular file to write"),
    ("collect --out a symlink to a directory", COLLECT + ("{link_dir}",), "is a directory"),
    ("collect --out a FIFO", COLLECT + ("{fifo}",), "is a FIFO, not a regular file to write"),
    ("plot --out a symlink to /dev/full", ("plot", "curves", "--store", "{store}", "--out", "{link_full_png}"),
     "(a link to /dev/full) is a character device"),
    # 11. numbers
    ("--clusters 10^400", TRAIN + ("--clusters", "{big}"), "clusters must be <= 1,000,000,000,000, got 1.000e+400"),
    ("--clusters 10^9 at cpu (memory: the rotations)", ("train", "--store", "{store}", "--clusters", "1000000000"),
     "is available on cpu"),
    ("--lr_depth_exp 1e308 (lr * L^exp overflows)", TRAIN + ("--depth", "2", "--lr_depth_exp", "1e308"),
     "lr_depth_exp must be such that lr * L^lr_depth_exp is finite and > 0"),
    ("--lr_depth_exp -1e308 (lr * L^exp is 0)", TRAIN + ("--depth", "2", "--lr_depth_exp=-1e308"),
     "lr_depth_exp must be such that lr * L^lr_depth_exp is finite and > 0"),
    ("--lr_depth_exp 1e308 in a grid", SWEEP + ("--grid", "{grid:lrexp.json}"), "lr_depth_exp must be such that"),
    ("--batch 10^400", TRAIN + ("--batch", "{big}"), "batch must be <= 1,000,000,000,000"),
    ("--d 10^400", TRAIN + ("--d", "{big}"), "d must be <= 1,000,000,000,000"),
    ("--N 10^400", TRAIN + ("--N", "{big}"), "N must be <= 1,000,000,000,000"),
    ("--depth 10^400 (linear: the depth's step budget)", ("train", "--store", "{store}", "--model", "linear",
                                                         "--depth", "{big}"), "L must be <= 1,000,000,000,000"),
    ("--eval_contexts 10^400", TRAIN + ("--eval_contexts", "{big}"), "eval_contexts must be <= 1,000,000,000,000"),
    ("--warmup 10^400", TRAIN + ("--warmup", "{big}"), "warmup must be <= 1,000,000,000 (steps)"),
    ("--eval_every 10^400", TRAIN + ("--eval_every", "{big}"), "eval_every must be <= 1,000,000,000 (steps)"),
    ("--max_steps 10^400", TRAIN + ("--max_steps", "{big}"), "max_steps must be <= 1,000,000,000 (steps)"),
    ("--max_steps 10^9 + 1", TRAIN + ("--max_steps", "1000000001"), "max_steps must be <= 1,000,000,000"),
    ("--checkpoint_every 10^400", TRAIN + ("--checkpoint_every", "{big}"), "checkpoint_every must be <= 1,000,000,000"),
    ("sweep --workers 10^400", SWEEP + ("--grid", "{grid:ok.json}", "--executor", "process", "--workers", "{big}"),
     "--workers must be <= 10,000"),
    ("reproduce --workers 10^400", ("reproduce", "fig6", "--preset", "smoke", "--store", "{store}", "--out", "{tmp}/o",
                                    "--executor", "process", "--workers", "{big}"), "--workers must be <= 10,000"),
    ("--pack-memory 1e308 (GB: infinite bytes)", SWEEP + ("--grid", "{grid:ok.json}", "--pack-memory", "1e308"),
     "--pack-memory must be a finite number > 0"),
    # 12. theory: d and P count in the memory check
    ("curve --d 1e12 (memory)", TH + ("curve", "--a", "1", "--b", "1", "--d", "1000000000000"),
     "theory curve with --d 1,000,000,000,000 needs about"),
    ("curve --d 10^400", TH + ("curve", "--a", "1", "--b", "1", "--d", "{big}"), "--d must be <= 1,000,000,000,000"),
    ("floor --P 1e8 (memory)", TH + ("floor", "--a", "0", "--b", "0", "--P", "100000000"), "of memory (estimate)"),
    ("floor --P 1e10 (memory)", TH + ("floor", "--a", "0", "--b", "0", "--P", "10000000000"), "of memory (estimate)"),
    ("softmax-floor --P 1e8 (memory)", TH + ("softmax-floor", "--a", "0", "--b", "0", "--P", "100000000"),
     "of memory (estimate)"),
    ("softmax-floor --P 1e10 (memory)", TH + ("softmax-floor", "--a", "0", "--b", "0", "--P", "10000000000"),
     "of memory (estimate)"),
    ("curve --finite-P --P 1e8 (memory)", TH + ("curve", "--a", "1", "--b", "1", "--finite-P", "--P", "100000000"),
     "of memory (estimate)"),
    ("curve --finite-P --P 1e10 (memory)", TH + ("curve", "--a", "1", "--b", "1", "--finite-P", "--P",
                                                 "10000000000"), "of memory (estimate)"),
    ("curve --depths 1e300", TH + ("curve", "--a", "1", "--b", "1", "--depths", "1,1e300"),
     "--depths must be integers >= 1 and <= 10,000, got 1e+300"),
    ("softmax-floor --depths 1e8 (its best-stack search)", TH + ("softmax-floor", "--a", "0", "--b", "0", "--depths",
                                                               "100000000"), "--depths must be integers >= 1 and <= 10,000"),
    ("softmax-floor --d 1e9 (memory)", TH + ("softmax-floor", "--a", "0", "--b", "0", "--d", "1000000000"),
     "of memory (estimate)"),
]

GRIDS["lrexp.json"] = '{"L": 2, "lr_depth_exp": 1e308}'
