#!/usr/bin/env bash
# Build (or find) the interpreters run_corpus.py compares, all under one
# cache directory (benchmarks/corpus/README.md, "Setup"):
#
#   benchmarks/corpus/setup_envs.sh [--cache-dir DIR] [--force] [LAYER ...]
#
# LAYER is any of: flaxlegacy oracle-0.3.5 oracle-0.3.6 upgraded (default:
# all four). Existing layers are kept unless --force.
#
#   CACHE/envs/flaxlegacy     layer over FLAXLEGACY_VENV (a venv where this
#                             checkout's flaxlegacy is installed: jax 0.10.2,
#                             flax 0.12.8, optax 0.2.8)
#   CACHE/envs/oracle-0.3.5   layer over ORACLE_VENV_035 (legacy flax 0.3.5 on
#                             jax 0.4.13, `from flax import nn`)
#   CACHE/envs/oracle-0.3.6   layer over ORACLE_VENV_036 (flax 0.3.6:
#                             flax.deprecated.nn)
#   CACHE/envs/upgraded       a venv of its own WITHOUT flaxlegacy: jax, flax,
#                             optax and the rest of flaxlegacy's pinned set
#                             (constraints.txt) plus the corpus extras; the
#                             upgraded tree's tests run here, and the script
#                             checks that `import flaxlegacy` fails in it.
#
# A layer is a thin venv whose .pth line adds the base's site-packages
# (site.addsitedir), so the base stays untouched and the corpus-only packages
# live in the layer. The extras (EXTRAS below plus every codebase's `extras`
# in corpus.json) go into every layer, each pip run constrained to the base's
# versions (jax, numpy, TF and flax never move). tensorflow-text pulls in
# `tensorflow`, a second copy of the base's tensorflow-cpu at the same
# version: it is removed again, so TF stays the base's own.
#
# Where the bases come from (environment variables; each is built under
# CACHE/envs when not given and not there yet):
#   FLAXLEGACY_VENV  default CACHE/envs/flaxlegacy-base: python -m venv, then
#                    pip install -c constraints.txt "<this checkout>[examples,test]"
#   ORACLE_VENV_035  default CACHE/envs/oracle-base-0.3.5 and
#   ORACLE_VENV_036  CACHE/envs/oracle-base-0.3.6: ORACLE_DIR/make_oracle_venv.sh
#   ORACLE_DIR       the oracle recipe (make_oracle_venv.sh,
#                    requirements-oracle.txt); default
#                    <checkout>/../shared/conformance/oracle
#   PY               the Python 3.11 to make venvs with (default python3.11)
#   CACHE            same as --cache-dir (default $FLAXLEGACY_CORPUS_CACHE,
#                    else $XDG_CACHE_HOME/flaxlegacy-corpus, else
#                    ~/.cache/flaxlegacy-corpus: run_corpus.py's rule)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

CACHE="${CACHE:-${FLAXLEGACY_CORPUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/flaxlegacy-corpus}}"
FORCE=0
LAYERS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cache-dir) CACHE="$2"; shift 2 ;;
    --cache-dir=*) CACHE="${1#*=}"; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) sed -n '2,45p' "$0"; exit 0 ;;
    flaxlegacy|oracle-0.3.5|oracle-0.3.6|upgraded) LAYERS+=("$1"); shift ;;
    *) echo "setup_envs: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ ${#LAYERS[@]} -gt 0 ] || LAYERS=(flaxlegacy oracle-0.3.5 oracle-0.3.6 upgraded)
mkdir -p "$CACHE/envs"
CACHE="$(cd "$CACHE" && pwd)"
ENVS="$CACHE/envs"

PY="${PY:-python3.11}"
FLAXLEGACY_VENV="${FLAXLEGACY_VENV:-$ENVS/flaxlegacy-base}"
ORACLE_VENV_035="${ORACLE_VENV_035:-$ENVS/oracle-base-0.3.5}"
ORACLE_VENV_036="${ORACLE_VENV_036:-$ENVS/oracle-base-0.3.6}"
ORACLE_DIR="${ORACLE_DIR:-$root/../shared/conformance/oracle}"

# What the corpus's test files import beyond flaxlegacy / the oracle's set:
# these, plus every codebase's `extras` in corpus.json.
EXTRAS=(gin-config ml_collections jraph sentencepiece pandas tf_slim gym
        opencv-python-headless clu mock)
while IFS= read -r pkg; do
  [ -n "$pkg" ] && EXTRAS+=("$pkg")
done < <("$PY" - "$here/corpus.json" <<'EOF'
import json, sys
seen = set()
for cb in json.load(open(sys.argv[1]))['codebases']:
  for pkg in cb.get('extras', []):
    if pkg not in seen:
      seen.add(pkg)
      print(pkg)
EOF
)
# Each extra at most once (pip refuses a requirement given twice with
# different spellings only when they conflict; duplicates are harmless but
# noisy).
mapfile -t EXTRAS < <(printf '%s\n' "${EXTRAS[@]}" | awk '!seen[tolower($0)]++')

purelib() { "$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

want() {  # want LAYER: is it asked for, and (re)built?
  local l
  for l in "${LAYERS[@]}"; do
    if [ "$l" = "$1" ]; then
      if [ -x "$ENVS/$1/bin/python" ] && [ "$FORCE" = 0 ]; then
        echo "setup_envs: $ENVS/$1 exists (--force rebuilds it)"
        return 1
      fi
      rm -rf "${ENVS:?}/$1"
      return 0
    fi
  done
  return 1
}

shims() {  # shims VENV: the same environment shim on every side
  local site
  site="$(purelib "$1")"
  cp "$here/shims/corpus_tf_shims.py" "$site/"
  echo "import corpus_tf_shims" >"$site/zz_corpus_tf_shims.pth"
}

install_extras() {  # install_extras VENV CONSTRAINTS PKG...: all at once, else
  # one by one, naming those that cannot be installed under the constraints
  # (the codebases that need them then fail on that side, and say why).
  local venv="$1" cons="$2"; shift 2
  if "$venv/bin/pip" install -q -c "$cons" "$@"; then return; fi
  local pkg
  for pkg in "$@"; do
    "$venv/bin/pip" install -q -c "$cons" "$pkg" ||
      echo "setup_envs: NOT INSTALLED in $venv: $pkg (see pip's message above)" >&2
  done
}

oracle_shims() {  # oracle_shims VENV: JAX modules removed before 0.4.13 that
  # 2021 code imports, on the oracle side only (shims/oracle_jax_shims.py)
  local site
  site="$(purelib "$1")"
  cp "$here/shims/oracle_jax_shims.py" "$site/"
  echo "import oracle_jax_shims" >"$site/zz_oracle_jax_shims.pth"
}

layer() {  # layer NEW BASE CONSTRAINTS TF_TEXT_SPEC
  local new="$1" base="$2" cons="$3" tftext="$4"
  "$PY" -m venv "$new"
  local site base_site
  site="$(purelib "$new")"
  base_site="$(purelib "$base")"
  echo "import site; site.addsitedir('$base_site')" >"$site/zz_layer_on_base.pth"
  install_extras "$new" "$cons" "${EXTRAS[@]}" "$tftext"
  "$new/bin/pip" uninstall -y -q tensorflow || true
  # A dependency resolved against the constraints may have put a second
  # flax in the layer (clu depends on flax): the base's must win.
  if [ -d "$site/flax" ]; then "$new/bin/pip" uninstall -y -q flax; fi
  shims "$new"
}

need_base() {  # need_base DIR WHAT: fail with how to get it
  if [ ! -x "$1/bin/python" ]; then
    echo "setup_envs: no $2 at $1" >&2
    exit 2
  fi
}

oracle_base() {  # oracle_base DIR VERSION
  if [ -x "$1/bin/python" ]; then return; fi
  if [ ! -x "$ORACLE_DIR/make_oracle_venv.sh" ]; then
    echo "setup_envs: no oracle venv at $1 and no recipe at $ORACLE_DIR" \
         "(set ORACLE_VENV_0xx to an existing oracle venv, or ORACLE_DIR)" >&2
    exit 2
  fi
  LEGACY_VENV="$1" BASE_PY="$PY" FLAX_VERSION="$2" "$ORACLE_DIR/make_oracle_venv.sh"
}

oracle_cons="$(mktemp)"
trap 'rm -f "$oracle_cons" "$oracle_cons.036"' EXIT
if [ -f "$ORACLE_DIR/requirements-oracle.txt" ]; then
  grep -v '^wheel' "$ORACLE_DIR/requirements-oracle.txt" >"$oracle_cons"
fi

if want flaxlegacy; then
  if [ ! -x "$FLAXLEGACY_VENV/bin/python" ]; then
    "$PY" -m venv "$FLAXLEGACY_VENV"
    "$FLAXLEGACY_VENV/bin/pip" install -q -c "$root/constraints.txt" "$root[examples,test]"
  fi
  layer "$ENVS/flaxlegacy" "$FLAXLEGACY_VENV" "$root/constraints.txt" 'tensorflow-text==2.21.*'
fi
if want oracle-0.3.5; then
  oracle_base "$ORACLE_VENV_035" 0.3.5
  [ -s "$oracle_cons" ] || { echo "setup_envs: no $ORACLE_DIR/requirements-oracle.txt" >&2; exit 2; }
  layer "$ENVS/oracle-0.3.5" "$ORACLE_VENV_035" "$oracle_cons" 'tensorflow-text==2.17.*'
  oracle_shims "$ENVS/oracle-0.3.5"
fi
if want oracle-0.3.6; then
  oracle_base "$ORACLE_VENV_036" 0.3.6
  [ -s "$oracle_cons" ] || { echo "setup_envs: no $ORACLE_DIR/requirements-oracle.txt" >&2; exit 2; }
  # 0.3.6's base has flax 0.3.6; the constraints file pins 0.3.5, so drop it.
  grep -v '^flax==' "$oracle_cons" >"$oracle_cons.036"
  layer "$ENVS/oracle-0.3.6" "$ORACLE_VENV_036" "$oracle_cons.036" 'tensorflow-text==2.17.*'
  oracle_shims "$ENVS/oracle-0.3.6"
fi
if want upgraded; then
  # flaxlegacy's own pinned set without flaxlegacy: every line of
  # constraints.txt is installed, none of this checkout.
  mapfile -t MODERN < <(grep -v -e '^#' -e '^$' -e '^libcst' "$root/constraints.txt" | sed 's/==.*//')
  "$PY" -m venv "$ENVS/upgraded"
  "$ENVS/upgraded/bin/pip" install -q -c "$root/constraints.txt" "${MODERN[@]}"
  install_extras "$ENVS/upgraded" "$root/constraints.txt" "${EXTRAS[@]}"
  # tensorflow-text requires `tensorflow`, which would be a second copy of
  # tensorflow-cpu in the same site-packages (removing it again would take
  # tensorflow-cpu's files with it): install it without its dependencies.
  "$ENVS/upgraded/bin/pip" install -q --no-deps 'tensorflow-text==2.21.*'
  shims "$ENVS/upgraded"
  if (cd / && "$ENVS/upgraded/bin/python" -c 'import flaxlegacy' 2>/dev/null); then
    echo "setup_envs: flaxlegacy is importable in $ENVS/upgraded; it must not be" >&2
    exit 1
  fi
fi

for l in "${LAYERS[@]}"; do
  v="$ENVS/$l"
  [ -x "$v/bin/python" ] || continue
  (cd / && "$v/bin/python" -c 'import sys, importlib.util
import jax, flax, numpy, tensorflow as tf
print(sys.prefix, "jax", jax.__version__, "flax", flax.__version__,
      "numpy", numpy.__version__, "tf", tf.__version__,
      "flaxlegacy", "importable" if importlib.util.find_spec("flaxlegacy") else "absent")')
done
