"""The report in a real browser (issue 13, item 6): report.html rendered by headless Chromium.

A report is built from test_report's synthetic store (a TEST FIXTURE of made-up metrics) for
experiments that need no slow theory; then Chromium loads it with every host name resolving to
nothing, and a script injected into a copy of the page writes into document.title, after load,
how many images and tables there are, how many are displayed (non-zero size, images decoded) and
which resources the page fetched other than data: URIs. A screenshot of the page is taken and
checked to be an image with content; set DEPTHSCALE_SCREENSHOT_DIR to keep it.

Skips, with the reason, where no Chromium is installed (.ci/run installs Debian's `chromium`).
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from depthscale.analysis.results import Theory
from depthscale.report.reproduce import report
from depthscale.store.store import Store

from test_report import fabricate

IDS = ["fig4", "fig10", "fig13", "table4", "table5"]  # figures and tables without slow theory

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome", "chrome")
                 if shutil.which(n)), None)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium on PATH (Debian: apt-get install "
                                                          "chromium; .ci/run does it where it can)")

# after load: counts and the non-data resources fetched, as JSON in the title
PROBE = """<script>
window.addEventListener("load", function () {
  var imgs = Array.from(document.images), tables = Array.from(document.querySelectorAll("table"));
  var shown = function (e) { var r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0; };
  var fetched = performance.getEntriesByType("resource").map(function (e) { return e.name; })
    .filter(function (n) { return n.indexOf("data:") !== 0; });
  document.title = JSON.stringify({
    images: imgs.length,
    images_shown: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0 && shown(i); }).length,
    broken: imgs.filter(function (i) { return !i.complete || i.naturalWidth === 0; }).map(function (i) { return i.alt; }),
    tables: tables.length,
    tables_shown: tables.filter(function (t) { return shown(t) && t.rows.length > 1; }).length,
    fetched: fetched});
});
</script>"""


def chromium(*args: str, tmp, timeout: int = 90) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={tmp / 'chromium-profile'}",
           "--host-resolver-rules=MAP * ~NOTFOUND", *args]  # no host resolves: nothing external loads
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        th = Theory("smoke", cache=root / "out" / "smoke" / "theory.json")
        fabricate(Store(root / "store"), th, IDS)
        r = report(root / "store", root / "out", ids=IDS)
    finally:
        torch.set_num_threads(n)
    assert not r["errors"]
    return root, root / "out" / "report.html"


def test_no_external_reference_in_the_html(built):
    _, page = built
    text = page.read_text()
    refs = re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]+)""", text) + re.findall(r"url\(([^)]*)\)", text)
    external = [r for r in refs if not r.startswith(("data:", "#"))]
    assert not external, external[:5]


def test_every_figure_and_table_is_displayed_in_chromium(built, tmp_path):
    root, page = built
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    out = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), tmp=tmp_path)
    m = re.search(r"<title>(.*?)</title>", out.stdout, re.S)
    assert m and m.group(1).startswith("{"), (out.returncode, out.stdout[:300], out.stderr[-2000:])
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    html = page.read_text()
    n_img, n_tab = html.count("<img "), html.count("<table")
    assert n_img == len([i for i in IDS if i.startswith("fig")]) and n_tab >= 3  # claims + 2 tables
    assert got["images"] == n_img and got["images_shown"] == n_img and got["broken"] == [], got
    assert got["tables"] == n_tab and got["tables_shown"] == n_tab, got
    assert got["fetched"] == [], got  # no request beyond the page itself


def test_screenshot_of_the_report(built, tmp_path):
    from matplotlib.image import imread

    _, page = built
    shot = tmp_path / "report.png"
    out = chromium(f"--screenshot={shot}", "--window-size=1280,2000", "--virtual-time-budget=10000",
                   page.as_uri(), tmp=tmp_path)
    assert shot.exists(), (out.returncode, out.stderr[-2000:])
    img = imread(shot)
    assert img.shape[:2] == (2000, 1280)
    assert img[..., :3].std() > 0.05  # text, tables and figures, not a blank page
    keep = os.environ.get("DEPTHSCALE_SCREENSHOT_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(shot, os.path.join(keep, "report.png"))


def test_the_probe_sees_a_broken_image_and_an_external_request(built, tmp_path):
    """Negative control: the check above would catch what it claims to."""
    _, page = built
    bad = page.read_text().replace("data:image/png;base64,", "data:image/png;base64,AAAA", 1)
    bad = bad.replace("</body>", '<img alt="ext" src="http://example.invalid/x.png">' + PROBE + "</body>")
    probe = tmp_path / "bad.html"
    probe.write_text(bad)
    out = chromium("--virtual-time-budget=10000", "--dump-dom", probe.as_uri(), tmp=tmp_path)
    got = json.loads(re.search(r"<title>(.*?)</title>", out.stdout, re.S).group(1).replace("&quot;", '"'))
    assert len(got["broken"]) == 2 and "ext" in got["broken"], got
    assert any("example.invalid" in f for f in got["fetched"]), got


COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "report" / "cpu" / "report.html"


def test_the_committed_cpu_report_loads_every_image(tmp_path):
    """A fresh clone can look without running: the committed cpu report (scripts/snapshot_report.py)
    shows every figure in Chromium, and fetches nothing but its own files."""
    probe = COMMITTED.with_name("probe_for_test.html")
    try:
        probe.write_text(COMMITTED.read_text().replace("</body>", PROBE + "</body>"))
        out = chromium("--virtual-time-budget=15000", "--allow-file-access-from-files", "--dump-dom",
                       probe.as_uri(), tmp=tmp_path)
    finally:
        probe.unlink(missing_ok=True)
    m = re.search(r"<title>(.*?)</title>", out.stdout, re.S)
    assert m and m.group(1).startswith("{"), (out.returncode, out.stdout[:300], out.stderr[-2000:])
    got = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    n_img = COMMITTED.read_text().count("<img ")
    assert n_img >= 10 and got["images"] == n_img and got["images_shown"] == n_img and got["broken"] == [], got
    base = COMMITTED.parent.as_uri()
    assert all(u.startswith(base) for u in got["fetched"]), got["fetched"]
