"""Issue 28, Inputs (items 9-12), beyond the one-line rows of tests/bad_cases_inputs.py: a grid over
the size limit is refused without being expanded, the limit can be moved, a link to a regular file
is written through, the memory estimates count what clustering and the theory allocate, and the
library refuses the same values the CLI does."""

import json
import math

import pytest

from depthscale.cli import main as cli
from depthscale.config.run import MAX_SIZE, MAX_STEPS, ConfigError, make_config
from depthscale.runs import sweeps
from depthscale.train.memory import cluster_bytes, pack_bytes, theory_bytes


def test_a_ten_million_run_grid_is_refused_without_expanding_it(tmp_path, capsys, monkeypatch):
    def never(*a, **k):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr(sweeps, "make_config", never)
    monkeypatch.setattr(sweeps.itertools, "product", never)
    grid = {"seed": list(range(10_000)), "L": list(range(1, 1_001))}
    with pytest.raises(ConfigError, match="the grid has 10,000,000 runs"):
        sweeps.expand_grid(grid, "smoke")
    path = tmp_path / "big.json"
    path.write_text(json.dumps(grid))
    capsys.readouterr()
    assert cli.main(["sweep", "--grid", str(path), "--preset", "smoke", "--store", str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10,000,000 runs" in err[0] and "limit of 100,000" in err[0]
    assert not (tmp_path / "s").exists()


def test_the_grid_limit_counts_every_table_and_can_be_moved(monkeypatch):
    grid = [{"seed": [0, 1, 2]}, {"seed": [0, 1, 2], "L": [1, 2]}]  # 3 + 6 runs as written
    assert len(sweeps.expand_grid(grid, "smoke", max_runs=9)) == 6  # (L = 1 twice: counted, then dropped)
    with pytest.raises(ConfigError, match="the grid has 9 runs .* summed over its tables"):
        sweeps.expand_grid(grid, "smoke", max_runs=8)
    monkeypatch.setenv(sweeps.MAX_GRID_ENV, "8")
    with pytest.raises(ConfigError, match="limit of 8"):
        sweeps.expand_grid(grid, "smoke")
    monkeypatch.setenv(sweeps.MAX_GRID_ENV, "many")
    with pytest.raises(ConfigError, match="DEPTHSCALE_MAX_GRID_RUNS must be a whole number"):
        sweeps.expand_grid(grid, "smoke")
    monkeypatch.delenv(sweeps.MAX_GRID_ENV)
    assert sweeps.max_grid_runs() == sweeps.MAX_GRID_RUNS == 100_000


@pytest.mark.parametrize("text, suffix", [("[" * 100_000 + "]" * 100_000, ".json"),
                                          ("a = " + "[" * 100_000 + "]" * 100_000, ".toml")])
def test_deeply_nested_grid_files_are_one_config_error(tmp_path, text, suffix):
    path = tmp_path / ("deep" + suffix)
    path.write_text(text)
    with pytest.raises(ConfigError, match="nested too deeply"):
        sweeps.load_grid(path)


@pytest.mark.parametrize("grid, key", [({"model": {"name": "linear"}}, "model"), ({"k": [[2]]}, "k"),
                                       ({"model": [["linear"]]}, "model"), ({"preset": [["smoke"]]}, "preset")])
def test_a_table_or_a_list_inside_a_grid_value_names_its_key(grid, key):
    with pytest.raises(ConfigError, match=f"grid key '{key}': each value must be a number, a string or true/false"):
        sweeps.expand_grid(grid, "smoke")


def test_make_config_refuses_unhashable_words_as_config_errors():
    for field in ("model", "task"):
        with pytest.raises(ConfigError, match=f"{field} must be one of"):
            make_config("smoke", **{field: ["linear"]})
    with pytest.raises(ConfigError, match="preset must be one of"):
        make_config(["smoke"])


@pytest.mark.parametrize("text", ["\uff10/\uff12", "\u0661/\u0662", "0/2 ", "+0/2"])
def test_a_shard_takes_ascii_digits_only(text):
    with pytest.raises(ConfigError, match="shard must look like i/n"):
        sweeps.parse_shard(text)
    assert sweeps.parse_shard("0/2") == (0, 2)


def test_numbers_are_bounded_in_the_config_itself():
    big = 10**400
    for field in ("max_steps", "warmup", "eval_every", "min_steps", "checkpoint_every", "patience"):
        make_config("smoke", **{field: MAX_STEPS})  # the bound itself is allowed
        with pytest.raises(ConfigError, match=f"{field} must be <= 1,000,000,000"):
            make_config("smoke", **{field: MAX_STEPS + 1})
    for field in ("clusters", "batch", "d", "N", "L", "eval_contexts", "monitor_contexts"):
        with pytest.raises(ConfigError, match=f"{field} must be <= 1,000,000,000,000, got 1.000e\\+400"):
            make_config("smoke", **{field: big})
    with pytest.raises(ConfigError, match="L must be <= "):  # (its step budget, L / 8, overflowed a float)
        make_config("cpu", model="linear", L=big)
    assert make_config("smoke", L=MAX_SIZE, N=MAX_SIZE).L == MAX_SIZE


def test_lr_depth_exp_must_keep_the_rate_finite_and_positive():
    from depthscale.train.schedule import base_lr

    for exp in (1e308, 2000.0, -1e308, -2000.0):
        with pytest.raises(ConfigError, match="lr_depth_exp must be such that lr \\* L\\^lr_depth_exp is finite"):
            make_config("smoke", L=2, lr_depth_exp=exp)
    assert base_lr(make_config("smoke", L=1, lr_depth_exp=1e308)) == pytest.approx(1e-2)  # 1^exp = 1
    cfg = make_config("smoke", L=4, loop=2, lr_depth_exp=-0.5)  # looped: the B distinct layers count
    assert math.isfinite(base_lr(cfg)) and base_lr(cfg) == pytest.approx(1e-2 / math.sqrt(2))


def test_no_failed_run_is_left_by_refused_numbers(tmp_path, capsys):
    store = tmp_path / "s"
    for flags in (["--lr_depth_exp", "1e308", "--depth", "2"], ["--clusters", "1" + "0" * 400]):
        assert cli.main(["train", "--preset", "smoke", "--store", str(store), *flags]) == 2
    assert not store.exists()  # refused before the store (and any run directory) was made
    assert capsys.readouterr().err.count("depthscale: error:") == 2


def test_the_memory_estimate_counts_clustering(monkeypatch):
    from depthscale.data import kernels
    from depthscale.train import memory

    cfg = make_config("cpu")
    assert cluster_bytes(0, 16) == 0
    monkeypatch.setattr(kernels, "expected", lambda: False)  # both sample through the cached draws
    assert pack_bytes([cfg.replace(clusters=4)]) - pack_bytes([cfg]) == cluster_bytes(4, 16) < 2**20
    # with the kernels on, the unclustered batch is made in one pass (no float64 draws held); a
    # clustered one is not (its rotations come from the classes)
    monkeypatch.setattr(kernels, "expected", lambda: True)
    draws = memory.FLOAT * cfg.batch * (memory._per_context(cfg) - memory.stored_floats(cfg))
    assert pack_bytes([cfg.replace(clusters=4)]) - pack_bytes([cfg]) == cluster_bytes(4, 16) + draws
    # clusters = 1e9 at cpu: 1e9 rotations of 16 x 16 in float64 are 2 TB before their QR
    assert pack_bytes([cfg.replace(clusters=10**9)]) > 1e9 * 16 * 16 * 8


def test_the_theory_estimate_counts_d_and_p():
    base = theory_bytes("floor", 32, 128, 2, 4096)
    assert theory_bytes("floor", 32, 10**8, 2, 4096) > 100 * 2**30 > base  # one context of P x d at once
    assert theory_bytes("softmax-floor", 16, 10**10, 2, 4096) > 10 * 2**40
    assert theory_bytes("curve", 10**12) > 1000 * 2**40  # the spectra alone: 24 TB
    assert theory_bytes("curve", 32, 10**8, samples=4096, finite_P=True) > theory_bytes("curve", 32, 10**8)
    assert theory_bytes("exponents", 10**12) == 0


def test_a_link_to_a_regular_file_is_written_through(tmp_path, capsys):
    from depthscale.store.store import Store

    store = Store(tmp_path / "s")
    cfg = make_config("smoke")
    store.write_config(cfg)
    store.finish(cfg.run_id, {"R": 1.0, "var_ystar": 2.0, "steps": 60, "stopped_because": "max_steps"}, {})
    target = tmp_path / "real.csv"
    target.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(target)
    assert cli.main(["collect", "--store", str(tmp_path / "s"), "--out", str(link)]) == 0
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert cfg.run_id in target.read_text()


def test_the_out_probe_leaves_nothing_behind(tmp_path):
    from depthscale.base.userpaths import out_dir, out_file

    assert out_dir(str(tmp_path / "a" / "b" / "c")) == tmp_path / "a" / "b" / "c"
    assert out_file(str(tmp_path / "x" / "t.csv")) == tmp_path / "x" / "t.csv"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_path_checks_accept_ordinary_paths_and_name_the_bad_part(tmp_path, monkeypatch):
    from depthscale.base.userpaths import UsageError, path_arg

    monkeypatch.setenv("HOME", str(tmp_path))
    assert path_arg("~/runs/x", "store") == tmp_path.__class__("~/runs/x")  # the Store expands it
    assert path_arg(str(tmp_path / ("a" * 255)), "store")  # exactly NAME_MAX bytes is allowed
    with pytest.raises(UsageError, match="is 256 bytes"):  # bytes count, not characters (128 of them)
        path_arg(str(tmp_path / ("é" * 128)), "store")
    with pytest.raises(UsageError, match="names no home directory"):
        path_arg("~no_such_user_depthscale", "out")
