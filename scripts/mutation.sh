#!/usr/bin/env bash
# Mutation testing of the claim engine, the claim functions and the modules that compute what they
# judge (certificates, power, fits, the convergence study's rule) with mutmut (issues 33 and 47).
# Not in CI: it is slow (see docs/mutation.md for the measured time, the scores and the survivors).
#
#   bash scripts/mutation.sh [FILE ...]     # default: every module below, one mutmut run each
#   MUTATION_WORKDIR=/tmp/mut MUTATION_SECONDS=1800 bash scripts/mutation.sh src/depthscale/analysis/power.py
#
# Each module is mutated on its own, against its own tests (the map below): run against every claim
# test, a mutant of fits.py re-ran 470 s of tests (the first run, issue 47, measured a mean of 137 s of
# covering tests per function: 12,097 mutants would take days on 2 cores). mutmut runs, for each mutant,
# only those of the module's tests that cover the mutated function. Each run is in a copy of the
# repository (src/, tests/, pyproject.toml with a [tool.mutmut] section appended there) under
# $MUTATION_WORKDIR/<module> (default: a temporary directory, removed at the end), so the working tree
# stays as it is; results (mutmut results, one line per mutant) go to mutation-results-<module>.txt in
# the current directory, and one score line per module to mutation-scores.txt.
# Only each module's verdict functions are run and scored (scripts/mutation_scope.py: the checks its Claim
# entries name and every function they reach; the whole module for claims, certificates, power, fits; the
# decision for the convergence study): the figure and table functions beside them are not judged by claim tests.
# An experiments module's own tests, tests/test_verdicts_<module>.py, join its claim tests where they exist.
# Needs mutmut 3 (pip install mutmut) in the active environment.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
here="$(pwd)"
command -v mutmut >/dev/null || { echo "mutation.sh: mutmut is not installed (pip install mutmut)" >&2; exit 2; }

claims_tests="tests/test_claims.py tests/test_claims_rules.py"
all_claims_tests="$claims_tests tests/test_claims_beyond.py tests/test_claims_verdicts.py"
own_tests() {  # a module's own verdict tests, where it has them: tests/test_verdicts_<module>[_*].py
  local m t
  m="$(basename "$1" .py)"
  for t in "$root"/tests/test_verdicts_"$m".py "$root"/tests/test_verdicts_"$m"_*.py; do
    [ -f "$t" ] && echo "tests/$(basename "$t")"
  done
  true
}
tests_of() {  # the tests that judge a module's mutants
  case "$1" in
    src/depthscale/analysis/claims.py) echo "tests/test_claims_verdicts.py $claims_tests" ;;
    src/depthscale/analysis/certificates.py) echo "tests/test_certificates.py tests/test_claims_verdicts.py" ;;
    src/depthscale/analysis/power.py) echo "tests/test_power.py tests/test_power_mutants.py" ;;
    src/depthscale/theory/fits.py) echo "tests/test_fits.py" ;;
    src/depthscale/experiments/convergence.py) echo "tests/test_convergence.py $(own_tests "$1")" ;;
    src/depthscale/experiments/selection.py) echo "tests/test_selection.py $all_claims_tests $(own_tests "$1")" ;;
    src/depthscale/experiments/*.py) echo "$all_claims_tests $(own_tests "$1")" ;;
    *) echo "" ;;
  esac
}

files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  files=(src/depthscale/analysis/certificates.py src/depthscale/theory/fits.py src/depthscale/analysis/power.py
         src/depthscale/analysis/claims.py src/depthscale/experiments/convergence.py
         src/depthscale/experiments/linear_easy.py src/depthscale/experiments/nonlinear_easy.py
         src/depthscale/experiments/linear_difficult.py src/depthscale/experiments/inverse_depth.py
         src/depthscale/experiments/nonlinear_floor.py src/depthscale/experiments/modes.py
         src/depthscale/experiments/variants.py src/depthscale/experiments/selection.py)
fi
for f in "${files[@]}"; do
  [ -f "$root/$f" ] || { echo "mutation.sh: no such file: $f" >&2; exit 2; }
  [ -n "$(tests_of "$f")" ] || { echo "mutation.sh: no tests are mapped to $f (add it to tests_of)" >&2; exit 2; }
done

if [ -n "${MUTATION_WORKDIR:-}" ]; then
  base="$MUTATION_WORKDIR"; mkdir -p "$base"
else
  base="$(mktemp -d)"
  trap 'rm -rf "$base"' EXIT
fi

count() { grep -c ": $1\$" "$2" || true; }

for f in "${files[@]}"; do
  name="$(basename "$f" .py)"
  work="$base/$name"; mkdir -p "$work"
  # a kept work directory resumes: mutmut keeps its results in mutants/ and re-runs only changed functions
  rm -rf "$work/src" "$work/tests" "$work/pyproject.toml"
  cp -r "$root/src" "$root/tests" "$root/pyproject.toml" "$work/"
  find "$work" -name __pycache__ -prune -exec rm -rf {} +
  selection="$(tests_of "$f" | xargs | sed 's/[^ ][^ ]*/"&",/g; s/,$//')"
  {
    echo
    echo "[tool.mutmut]"
    echo 'source_paths = ["src/"]'
    echo "only_mutate = [\"$f\"]"
    echo "pytest_add_cli_args_test_selection = [$selection, \"-m\", \"not slow\"]"
    echo 'pytest_add_cli_args = ["-p", "no:cacheprovider", "-q"]'
  } >> "$work/pyproject.toml"
  out="$here/mutation-results-$name.txt"
  start=$(date +%s)
  # MUTATION_SECONDS: stop each module's run after this long (the results so far are still listed)
  # One thread for torch/OpenMP/MKL: mutmut forks its children from a process that has imported torch, and
  # a forked child that enters an OpenMP region of the parent's pool hangs until mutmut's limit ("timeout"
  # for a mutant the tests never judged: 84 of certificates.py's first 158, issue 47). Timeouts left after
  # the run are run once more by name (a mutant that really loops times out again).
  export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
  # only the module's verdict functions (scripts/mutation_scope.py: the claims' checks and what they call)
  mapfile -t scope < <(python "$root/scripts/mutation_scope.py" patterns "$root/$f")
  (cd "$work" && PYTHONPATH="$work/tests" timeout "${MUTATION_SECONDS:-0}" mutmut run --max-children "${MUTMUT_CHILDREN:-2}" \
     "${scope[@]}" >/dev/null 2>&1) || true
  mapfile -t again < <(cd "$work" && mutmut results --all true 2>/dev/null | sed -n 's/^ *\([^ ]*\): timeout$/\1/p')
  if [ ${#again[@]} -gt 0 ]; then
    (cd "$work" && PYTHONPATH="$work/tests" timeout "${MUTATION_SECONDS:-0}" mutmut run --max-children "${MUTMUT_CHILDREN:-2}" \
       "${again[@]}" >/dev/null 2>&1) || true
  fi
  (cd "$work" && { mutmut results --all true > "$out" 2>&1 || mutmut results > "$out" 2>&1 || true; })
  secs=$(( $(date +%s) - start ))
  k=$(count killed "$out"); s=$(count survived "$out"); n=$(count "no tests" "$out"); t=$(count timeout "$out")
  u=$(count "not checked" "$out")
  checked=$(( k + s + t ))
  score="n/a"; [ "$checked" -gt 0 ] && score="$(( 100 * (k + t) / checked ))% ($(( 100 * k / checked ))% without timeouts)"
  line="$f: killed $k, timeout $t, survived $s, no tests $n, not checked $u; score $score of checked; ${secs} s"
  line="$line; $(python "$root/scripts/mutation_scope.py" score "$root/$f" "$out")"
  echo "$line" | tee -a "$here/mutation-scores.txt"
done
