"""The upgrade runs with fewer cyclic collections, and puts the collector's
thresholds back afterwards, also when it fails."""

import gc

import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import transform

SRC = 'from flax import nn\n\n\nclass M(nn.Module):\n\n  def apply(self, x):\n    return nn.Dense(x, 3)\n'


def test_thresholds_raised_during_the_run_and_restored(monkeypatch):
  before = gc.get_threshold()
  seen = []
  real = transform.upgrade_module

  def spy(*args, **kwargs):
    seen.append(gc.get_threshold())
    return real(*args, **kwargs)

  monkeypatch.setattr(transform, 'upgrade_module', spy)
  new, _ = api.upgrade_source(SRC)
  assert 'nn.compact' in new
  assert seen and seen[0][0] > before[0]
  assert gc.get_threshold() == before


def test_thresholds_restored_when_the_source_is_bad():
  before = gc.get_threshold()
  with pytest.raises(SyntaxError, match='syntax error'):
    api.upgrade_source('def f(:\n')
  assert gc.get_threshold() == before


def test_paths_restore_thresholds(tmp_path):
  before = gc.get_threshold()
  (tmp_path / 'src').mkdir()
  (tmp_path / 'src' / 'm.py').write_text(SRC)
  status, report = api.upgrade_paths([str(tmp_path / 'src')],
                                     out=str(tmp_path / 'out'))
  assert status == 0 and report['summary']['modules_rewritten'] == 1
  assert gc.get_threshold() == before
