"""flaxlegacy as users install it: a built wheel in a fresh virtualenv.

An editable install hides start-up bugs: its finder's ``.pth`` imports
``collections`` (and more) before flaxlegacy's own ``.pth`` runs.  These
helpers build the wheel the way ``pip install flaxlegacy`` gets it
(setuptools, no build isolation: no download), install it, non-editable and
without dependencies, into a new virtualenv made with ``--without-pip``, and
give that virtualenv the test environment's packages (jax, flax, numpy,
pytest) through a ``.pth`` file of plain path lines: such lines only extend
``sys.path``, so nothing of the test environment runs at start-up, its own
``.pth`` files (the editable finder) included.

No network: the wheel is built from the checkout, and pip installs only it.
"""

import glob
import os
import shutil
import subprocess
import sys
import sysconfig

from tests import parallel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What the wheel is built from (the rest of the checkout is not packaged).
_SOURCES = ('setup.py', 'pyproject.toml', 'README.md', 'flaxlegacy')


def build_wheel(root):
  """The flaxlegacy wheel, built once under ``root`` (shared by workers)."""
  os.makedirs(root, exist_ok=True)
  with parallel.locked(os.path.join(root, 'wheel.lock')):
    dist = os.path.join(root, 'dist')
    found = glob.glob(os.path.join(dist, 'flaxlegacy-*.whl'))
    if found:
      return found[0]
    src = os.path.join(root, 'src')
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    for name in _SOURCES:
      path = os.path.join(REPO, name)
      if os.path.isdir(path):
        shutil.copytree(path, os.path.join(src, name), ignore=(
            shutil.ignore_patterns('__pycache__', '*.pyc')))
      else:
        shutil.copy(path, src)
    proc = subprocess.run(
        [sys.executable, '-m', 'pip', 'wheel', '--no-deps',
         '--no-build-isolation', '--no-index', '-w', dist, src],
        capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
      raise RuntimeError('building the flaxlegacy wheel failed:\n' +
                         proc.stdout[-2000:] + proc.stderr[-4000:])
    return glob.glob(os.path.join(dist, 'flaxlegacy-*.whl'))[0]


def _purelib(python):
  return subprocess.run(
      [python, '-c',
       'import sysconfig; print(sysconfig.get_paths()["purelib"])'],
      capture_output=True, text=True, check=True, timeout=60).stdout.strip()


class Venv:
  """A virtualenv with flaxlegacy installed from the wheel."""

  def __init__(self, path):
    self.path = path
    self.bin = os.path.join(path, 'bin')
    self.python = os.path.join(self.bin, 'python')
    self.site = _purelib(self.python)

  def env(self, **extra):
    """The environment of a user's shell: none of the test's own settings."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(('FLAXLEGACY', 'PYTHON', 'JAX_', 'FLAX_',
                                'PYTEST', 'VIRTUAL_ENV'))}
    env.update(JAX_PLATFORMS='cpu', PYTHONDONTWRITEBYTECODE='1',
               PATH=self.bin + os.pathsep + env.get('PATH', ''),
               VIRTUAL_ENV=self.path)
    env.update(extra)
    return env

  def run(self, args, cwd, timeout=300, **env):
    """Runs ``args`` (``python`` and ``flaxlegacy`` are this venv's)."""
    exe = {'python': self.python,
           'flaxlegacy': os.path.join(self.bin, 'flaxlegacy')}
    args = [exe.get(args[0], args[0]), *args[1:]]
    return subprocess.run(args, cwd=cwd, env=self.env(**env),
                          capture_output=True, text=True, timeout=timeout)


def make_venv(root, wheel, python=sys.executable, with_packages=True):
  """A new virtualenv under ``root`` with the wheel installed (non-editable).

  ``with_packages``: the test environment's site-packages as a plain path
  line (only for an interpreter of the same version as this one).
  """
  os.makedirs(os.path.dirname(root) or '.', exist_ok=True)
  with parallel.locked(root + '.lock'):
    if not os.path.exists(os.path.join(root, 'ready')):
      shutil.rmtree(root, ignore_errors=True)
      subprocess.run([python, '-m', 'venv', '--without-pip', root],
                     check=True, capture_output=True, timeout=300)
      venv = Venv(root)
      proc = subprocess.run(
          [sys.executable, '-m', 'pip', '--python', venv.python, 'install',
           '--no-deps', '--no-index', '--no-compile', wheel],
          capture_output=True, text=True, timeout=300)
      if proc.returncode != 0:
        raise RuntimeError('installing the wheel failed:\n' + proc.stderr)
      if with_packages:
        outer = {sysconfig.get_paths()['purelib'],
                 sysconfig.get_paths()['platlib']}
        with open(os.path.join(venv.site, '_test_packages.pth'), 'w') as f:
          f.write(''.join(p + '\n' for p in sorted(outer)))
      open(os.path.join(root, 'ready'), 'w').close()
  return Venv(root)


shared_root = parallel.shared_root
