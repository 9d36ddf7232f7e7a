"""A Python environment with jax, flax and optax but without flaxlegacy.

Code that ``flaxlegacy upgrade`` wrote must run where flaxlegacy is not
installed.  ``make(root)`` builds such an environment from the one the
tests run in, offline and in about a second: a venv made with
``python -m venv --without-pip`` whose site-packages holds one ``.pth``
file with a plain directory line (no ``import``), pointing at a directory
of links to every entry of this environment's site-packages except
flaxlegacy's own (its package, its dist-info and its start-up ``.pth``
files: ``.pth`` files of a directory added by a path line are not run
anyway).  The checkout is on no path of it; ``make`` checks that
``import flaxlegacy`` fails there.  (tests/installed.py builds the
opposite, flaxlegacy's wheel installed into such a venv, the same way.)
"""

import os
import shutil
import subprocess
import sys

from tests import parallel


def _site_packages():
  import jax  # pylint: disable=g-import-not-at-top
  return os.path.dirname(os.path.dirname(os.path.abspath(jax.__file__)))


def _skipped(entry):
  low = entry.lower()
  return (low.startswith(('flaxlegacy', '__editable__')) or
          low.endswith('.pth') or low == '__pycache__')


def env(**extra):
  """Environment variables for a run: no PYTHONPATH of ours, no layer."""
  out = {k: v for k, v in os.environ.items()
         if k not in ('PYTHONPATH', 'FLAXLEGACY', 'PYTHONHOME')}
  out.update(JAX_PLATFORMS='cpu', PYTHONNOUSERSITE='1', **extra)
  return out


def make(root):
  """The environment under ``root`` (built by the first caller; parallel
  workers share it, tests/parallel.py); returns its python."""
  root = os.fspath(root)
  os.makedirs(os.path.dirname(root) or '.', exist_ok=True)
  with parallel.locked(root + '.lock'):
    ready = os.path.join(root, 'ready')
    if not os.path.exists(ready):
      shutil.rmtree(root, ignore_errors=True)
      os.makedirs(root)
      _build(root)
      open(ready, 'w').close()
  return _python(os.path.join(root, 'venv'))


def _python(venv):
  python = os.path.join(venv, 'bin', 'python')
  if not os.path.exists(python):
    python = os.path.join(venv, 'Scripts', 'python.exe')
  return python


def _build(root):
  venv = os.path.join(root, 'venv')
  subprocess.run([sys.executable, '-m', 'venv', '--without-pip', venv],
                 check=True, capture_output=True, timeout=120)
  python = _python(venv)
  links = os.path.join(root, 'site-packages')
  os.makedirs(links)
  src = _site_packages()
  for entry in sorted(os.listdir(src)):
    if not _skipped(entry):
      os.symlink(os.path.join(src, entry), os.path.join(links, entry))
  purelib = subprocess.run(
      [python, '-c', 'import sysconfig; print(sysconfig.get_path("purelib"))'],
      check=True, capture_output=True, text=True, env=env(),
      timeout=60).stdout.strip()
  with open(os.path.join(purelib, 'deps.pth'), 'w', encoding='utf-8') as f:
    f.write(links + '\n')
  check = subprocess.run(
      [python, '-c', 'import jax, flax, optax\n'
       'try:\n  import flaxlegacy\nexcept ImportError:\n  print("absent")\n'
       'else:\n  print("present", flaxlegacy.__file__)'],
      capture_output=True, text=True, env=env(), cwd=root, timeout=300)
  if check.stdout.strip() != 'absent':
    raise RuntimeError('the environment without flaxlegacy is not: '
                       f'{check.stdout} {check.stderr[-2000:]}')
