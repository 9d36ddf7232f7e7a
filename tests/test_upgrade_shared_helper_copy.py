"""flaxlegacy upgrade: a script directory given beside a package shares its
helper copy.

``flaxlegacy upgrade pkg drv --out DST`` where ``drv/run.py`` (bare
imports, no package of its own) imports ``pkg.models``: the package got
``pkg/legacy_helpers.py`` and the script ``drv/legacy_helpers.py``, two
``Model`` classes, so a model ``pkg.models`` made and the script applied
failed ``apply_model``'s isinstance (TypeError: ``variables['params'] is a
Model, not a legacy_model.Model``), and the script's ``stateful`` blocks
were not the frames the package's models read.  Now the script imports
the package's copy (``from pkg import legacy_helpers``); runs with the
layer off and gives the legacy numbers.
"""

import os

import numpy as np

from tests import test_upgrade_carried_target as carried
from tests import upgrade_run

TODO = '# TODO(flaxlegacy upgrade)'


def test_script_dir_uses_the_package_copy(tmp_path):
  run = carried.CARRIED_RUN.replace('import models\n',
                                    'from pkg import models\n')
  assert run != carried.CARRIED_RUN
  src = upgrade_run.write_tree(tmp_path / 'src', {
      'pkg/__init__.py': '', 'pkg/models.py': carried.MODELS,
      'drv/run.py': run})
  out = tmp_path / 'out'
  from flaxlegacy.upgrade import api  # pylint: disable=g-import-not-at-top
  status, _ = api.upgrade_paths([str(src / 'pkg'), str(src / 'drv')],
                                out=str(out))
  assert status == 0
  copies = sorted(os.path.relpath(os.path.join(d, f), out)
                  for d, _, fs in os.walk(out) for f in fs
                  if f.startswith('legacy_helpers'))
  assert copies == [os.path.join('pkg', 'legacy_helpers.py')], copies
  code = (out / 'drv' / 'run.py').read_text()
  assert 'from pkg import legacy_helpers as legacy_model' in code, code
  assert TODO not in code, code
  legacy = upgrade_run.run_json(src, 'import sys; sys.path.insert(0, "drv")\n'
                                + run, off=False)
  upgraded = upgrade_run.run_json(out, code, off=True)
  assert upgraded['keys'] == legacy['keys'] == ['out']
  np.testing.assert_allclose(upgraded['kernel'], legacy['kernel'],
                             rtol=1e-5, atol=2e-6)
