"""Shared by the upgrade tests: upgrade a small source tree, then run a
snippet in it (legacy code under the layer, upgraded code with
FLAXLEGACY=off) in a fresh interpreter and read back its last JSON line."""

import json
import os
import subprocess
import sys
import textwrap

from flaxlegacy.upgrade import api


# A deterministic initializer (numbers any two runs agree on, no key used),
# as source text for the legacy programs of the tests (``jnp`` imported
# there); ``{}`` free, so a program may still be a ``str.format`` template.
RAMP_SRC = '''\
def ramp(key, shape, dtype=jnp.float32):
  del key
  n = 1
  for d in shape:
    n *= d
  return (jnp.sin(jnp.arange(n, dtype=dtype) * 0.37) * 0.5).reshape(shape)
'''


def write_tree(root, files):
  """Writes ``files`` ({relative path: source, dedented}) under ``root``."""
  for rel, text in files.items():
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
  return root


def upgrade_dir(tmp_path, files):
  """Writes ``files`` under tmp_path/src and upgrades it to tmp_path/out;
  (src, out, report)."""
  src = write_tree(tmp_path / 'src', files)
  out = tmp_path / 'out'
  status, report = api.upgrade_paths([str(src)], out=str(out))
  assert status == 0
  return src, out, report


def run_json(root, code, off, legacy_stream=False):
  """Runs ``code`` with ``root`` as working directory and PYTHONPATH; the
  JSON of its last output line.  ``off``: with FLAXLEGACY=off (the
  upgraded side); ``legacy_stream``: draw random numbers with the legacy
  PRNG stream there too (where the draws are inputs of a comparison, as
  --verify does)."""
  env = {k: v for k, v in os.environ.items() if k != 'FLAXLEGACY'}
  env.update(JAX_PLATFORMS='cpu', PYTHONPATH=str(root))
  if off:
    env['FLAXLEGACY'] = 'off'
    if legacy_stream:
      env['JAX_THREEFRY_PARTITIONABLE'] = 'false'
  p = subprocess.run([sys.executable, '-c', textwrap.dedent(code)],
                     cwd=str(root), env=env, capture_output=True, text=True,
                     timeout=600)
  assert p.returncode == 0, (root, p.stderr[-3000:])
  return json.loads(p.stdout.strip().splitlines()[-1])


def verify_source(tmp_path, source, class_name, inputs):
  """``flaxlegacy.upgrade.verify`` of the module class ``class_name`` of
  ``source`` (legacy code, one file) against its upgrade: the result dict
  (``status`` 'ok' where outputs agree at the given input shapes)."""
  from flaxlegacy.upgrade import upgrade_source  # pylint: disable=g-import-not-at-top
  from flaxlegacy.upgrade import verify  # pylint: disable=g-import-not-at-top
  legacy = tmp_path / 'legacy.py'
  legacy.write_text(source)
  out, report = upgrade_source(source)
  upgraded = tmp_path / 'upgraded.py'
  upgraded.write_text(out)
  (mod,) = [m for m in report.modules if m['class'] == class_name]
  return verify.verify_module(
      str(legacy), str(upgraded), class_name, inputs, {},
      fields=mod['fields'], call=mod['call'], var_kw=mod['var_kw'])
