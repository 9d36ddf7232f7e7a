#!/usr/bin/env bash
# Build the interpreters run_corpus.py compares (docs/corpus.md, "Setup").
#
#   benchmarks/corpus/setup_envs.sh            # defaults below
#
# Each side is a thin virtualenv LAYERED on an existing one through a .pth
# line (site.addsitedir), so the shared flaxlegacy venv and the oracle venvs
# stay untouched and the corpus-only packages live in the layer:
#   FLX_CORPUS     on MAIN_VENV (flaxlegacy's venv: jax 0.10.2 / flax 0.12.8)
#   ORACLE_CORPUS  on ORACLE_VENV (legacy flax 0.3.5, jax 0.4.13)
#   ORACLE_CORPUS_036 on ORACLE_VENV_036 (legacy flax 0.3.6: flax.deprecated.nn)
# The oracle venvs come from ../shared/conformance/oracle/make_oracle_venv.sh:
#   LEGACY_VENV=/work/oracle-0.3.5 make_oracle_venv.sh
#   LEGACY_VENV=/work/oracle-0.3.6 FLAX_VERSION=0.3.6 make_oracle_venv.sh
# The same extra packages go into every layer, each pip run constrained to
# the base's versions (jax, numpy, TF, flax never move). tensorflow-text pulls
# in `tensorflow`, a second copy of the base's tensorflow-cpu at the same
# version: it is removed again, so TF stays the base's own.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
PY="${PY:-python3.11}"
MAIN_VENV="${MAIN_VENV:-/work/main/.venv}"
ORACLE_VENV="${ORACLE_VENV:-/work/oracle-0.3.5}"
ORACLE_VENV_036="${ORACLE_VENV_036:-/work/oracle-0.3.6}"
FLX_CORPUS="${FLX_CORPUS:-/work/flx-corpus}"
ORACLE_CORPUS="${ORACLE_CORPUS:-/work/oracle-corpus}"
ORACLE_CORPUS_036="${ORACLE_CORPUS_036:-/work/oracle-corpus-0.3.6}"
ORACLE_REQS="${ORACLE_REQS:-$root/../shared/conformance/oracle/requirements-oracle.txt}"

# What the corpus's test files import beyond flaxlegacy / the oracle's set.
EXTRAS=(gin-config ml_collections jraph sentencepiece pandas tf_slim gym
        opencv-python-headless clu mock)

layer() {  # layer NEW BASE CONSTRAINTS TF_TEXT_SPEC
  local new="$1" base="$2" cons="$3" tftext="$4"
  "$PY" -m venv "$new"
  local site base_site
  site="$("$new/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  base_site="$("$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  echo "import site; site.addsitedir('$base_site')" >"$site/zz_layer_on_base.pth"
  "$new/bin/pip" install -q -c "$cons" "${EXTRAS[@]}" "$tftext"
  "$new/bin/pip" uninstall -y -q tensorflow || true
  # A dependency resolved against the constraints may have put a second
  # flax in the layer (clu depends on flax): the base's must win.
  if [ -d "$site/flax" ]; then "$new/bin/pip" uninstall -y -q flax; fi
  # The same environment shim on both sides (shims/corpus_tf_shims.py).
  cp "$here/shims/corpus_tf_shims.py" "$site/"
  echo "import corpus_tf_shims" >"$site/zz_corpus_tf_shims.pth"
}

oracle_cons="$(mktemp)"
trap 'rm -f "$oracle_cons"' EXIT
grep -v '^wheel' "$ORACLE_REQS" >"$oracle_cons"

layer "$FLX_CORPUS" "$MAIN_VENV" "$root/constraints.txt" 'tensorflow-text==2.21.*'
layer "$ORACLE_CORPUS" "$ORACLE_VENV" "$oracle_cons" 'tensorflow-text==2.17.*'
# 0.3.6's base has flax 0.3.6; the constraints file pins 0.3.5, so drop it.
grep -v '^flax==' "$oracle_cons" >"$oracle_cons.036"
layer "$ORACLE_CORPUS_036" "$ORACLE_VENV_036" "$oracle_cons.036" 'tensorflow-text==2.17.*'
rm -f "$oracle_cons.036"

for v in "$FLX_CORPUS" "$ORACLE_CORPUS" "$ORACLE_CORPUS_036"; do
  (cd /tmp && "$v/bin/python" -c 'import jax, flax, numpy, tensorflow as tf
print(__import__("sys").prefix, "jax", jax.__version__, "flax", flax.__version__,
      "numpy", numpy.__version__, "tf", tf.__version__)')
done
