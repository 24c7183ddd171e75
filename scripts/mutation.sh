#!/usr/bin/env bash
# Mutation testing of the claim engine, the claim functions and the modules that compute what they
# judge (certificates, power, fits, the convergence study's rule) with mutmut (issues 33 and 47).
# Not in CI: it is slow (see docs/mutation.md for the measured time, the score and the survivors).
#
#   bash scripts/mutation.sh [FILE ...]     # default: claims.py and every experiments module with claims
#   MUTATION_WORKDIR=/tmp/mut MUTATION_SECONDS=1800 bash scripts/mutation.sh src/depthscale/analysis/claims.py
#
# Runs in a temporary copy of the repository (src/, tests/, pyproject.toml with a [tool.mutmut]
# section appended there), so the working tree and its pyproject stay as they are; the results
# (mutmut results, one line per mutant) are written to mutation-results.txt in the current
# directory. Needs mutmut 3 (pip install mutmut) in the active environment.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(pwd)/mutation-results.txt"
command -v mutmut >/dev/null || { echo "mutation.sh: mutmut is not installed (pip install mutmut)" >&2; exit 2; }
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(src/depthscale/analysis/claims.py src/depthscale/experiments/linear_easy.py src/depthscale/experiments/nonlinear_easy.py
         src/depthscale/experiments/linear_difficult.py src/depthscale/experiments/inverse_depth.py
         src/depthscale/experiments/nonlinear_floor.py src/depthscale/experiments/modes.py
         src/depthscale/experiments/variants.py src/depthscale/experiments/selection.py
         src/depthscale/analysis/certificates.py src/depthscale/analysis/power.py src/depthscale/theory/fits.py
         src/depthscale/experiments/convergence.py)
fi
for f in "${files[@]}"; do
  [ -f "$root/$f" ] || { echo "mutation.sh: no such file: $f" >&2; exit 2; }
done
# MUTATION_WORKDIR: a directory kept between runs (mutmut resumes where it stopped); default a
# temporary one, removed at the end
if [ -n "${MUTATION_WORKDIR:-}" ]; then
  work="$MUTATION_WORKDIR"; mkdir -p "$work"
  rm -rf "$work/src" "$work/tests" "$work/pyproject.toml"
else
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
cp -r "$root/src" "$root/tests" "$root/pyproject.toml" "$work/"
find "$work" -name __pycache__ -prune -exec rm -rf {} +
{
  echo
  echo "[tool.mutmut]"
  echo 'source_paths = ["src/"]'
  printf 'only_mutate = [%s]\n' "$(printf '"%s", ' "${files[@]}" | sed 's/, $//')"
  # the claim tests only: every other test would be selected by mutmut's coverage too, and is slow
  echo 'pytest_add_cli_args_test_selection = ["tests/test_claims.py", "tests/test_claims_verdicts.py", "tests/test_claims_rules.py", "tests/test_certificates.py", "tests/test_power.py", "tests/test_fits.py", "tests/test_convergence.py", "-m", "not slow"]'
  echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]'
} >> "$work/pyproject.toml"
cd "$work"
start=$(date +%s)
# MUTATION_SECONDS: stop the run after this long (the results so far are still listed)
PYTHONPATH="$work/tests" timeout "${MUTATION_SECONDS:-0}" mutmut run --max-children "${MUTMUT_CHILDREN:-2}" || true
mutmut results --all true > "$out" 2>&1 || mutmut results > "$out" 2>&1 || true
end=$(date +%s)
echo "mutation.sh: $(( end - start )) s; results in $out"
grep -c ": killed" "$out" | sed 's/^/killed: /' || true
grep -c ": survived" "$out" | sed 's/^/survived: /' || true
grep -c ": no tests" "$out" | sed 's/^/no tests: /' || true
