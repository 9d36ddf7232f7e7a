"""Installs flaxlegacy: the legacy Flax API (flax.nn, flax.optim) on today's JAX.

Besides the package, the install drops ``flaxlegacy.pth`` into site-packages.
Python runs it at start-up; it registers a small import hook (dormant until a
legacy path such as ``flax.nn`` is imported).  This is the mechanism
setuptools uses for its ``distutils-precedence.pth``.
"""
import os

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.develop import develop

try:  # setuptools >= 64: PEP 660 editable installs
  from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # pragma: no cover
  editable_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
PTH_NAME = 'flaxlegacy.pth'


def _pth_text():
  with open(os.path.join(HERE, 'flaxlegacy', '_pth.txt')) as f:
    return f.read()


class BuildPyWithPth(build_py):
  """build_py that also places the start-up .pth next to the package."""

  def run(self):
    super().run()
    target = os.path.join(self.build_lib, PTH_NAME)
    self.mkpath(self.build_lib)
    with open(target, 'w') as f:
      f.write(_pth_text())

  def get_outputs(self, *args, **kwargs):
    return super().get_outputs(*args, **kwargs) + [
        os.path.join(self.build_lib, PTH_NAME)]


class DevelopWithPth(develop):
  """Legacy ``setup.py develop`` also installs the .pth."""

  def run(self):
    super().run()
    with open(os.path.join(self.install_dir, PTH_NAME), 'w') as f:
      f.write(_pth_text())


cmdclass = {'build_py': BuildPyWithPth, 'develop': DevelopWithPth}

if editable_wheel is not None:

  class EditableWheelWithPth(editable_wheel):
    """PEP 660 editable wheels get the .pth as a top-level file too."""

    # The editable wheel is assembled from a staging folder; a file placed
    # at its top level is installed into site-packages.
    def _run_build_commands(self, dist_name, unpacked_wheel, build_lib,
                            tmp_dir):
      result = super()._run_build_commands(dist_name, unpacked_wheel,
                                           build_lib, tmp_dir)
      with open(os.path.join(unpacked_wheel, PTH_NAME), 'w') as f:
        f.write(_pth_text())
      return result

  cmdclass['editable_wheel'] = EditableWheelWithPth


def _version():
  with open(os.path.join(HERE, 'flaxlegacy', 'version.py')) as f:
    namespace = {}
    exec(f.read(), namespace)
  return namespace['__version__']


setup(
    name='flaxlegacy',
    version=_version(),
    description=('The legacy Flax API (flax.nn, flax.optim, 2020-2021) '
                 'running unchanged on today\'s JAX, Flax linen and optax.'),
    long_description=open(os.path.join(HERE, 'README.md')).read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['flaxlegacy', 'flaxlegacy.*']),
    package_data={'flaxlegacy': ['_pth.txt']},
    python_requires='>=3.10',
    install_requires=[
        'jax>=0.10.2',
        'jaxlib>=0.10.2',
        'flax>=0.12.8',
        'optax>=0.2.8',
        'numpy>=1.26',
        'absl-py>=2.1',
        'msgpack>=1.0',
        'libcst>=1.0',
    ],
    extras_require={
        'examples': [
            'tensorflow-cpu>=2.16',
            'tensorflow-datasets>=4.9.7',
            'tensorboard>=2.16',
            'scikit-learn>=1.3',
            'importlib_resources',
        ],
        'test': [
            'pytest>=8',
            'pytest-xdist>=3',
            # tests/test_upgrade_gin_classes.py runs gfsa-style gin
            # bindings on both sides (skipped without it)
            'gin-config>=0.4',
            # tests/conftest.py: the run's shared JAX compilation cache is
            # locked with it
            'filelock>=3',
            # tests/test_install.py builds the wheel offline
            # (--no-build-isolation) with these.
            'setuptools>=64',
            'wheel',
        ],
    },
    entry_points={
        'console_scripts': ['flaxlegacy=flaxlegacy.cli:main'],
        # plain `pytest` in a legacy tree runs legacy from the start
        'pytest11': ['flaxlegacy = flaxlegacy.pytest_plugin'],
    },
    cmdclass=cmdclass,
    classifiers=[
        'Programming Language :: Python :: 3',
        'License :: OSI Approved :: Apache Software License',
        'Topic :: Scientific/Engineering :: Artificial Intelligence',
    ],
)
