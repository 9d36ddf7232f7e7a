"""A rule that fails on one file leaves that file as it was, says so, and
the rest of the codebase is upgraded; a construct that used to crash the
whole run (a module-level partial of a layer alias) is rewritten."""

import textwrap

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import report as report_lib
from flaxlegacy.upgrade import transform

GOOD = textwrap.dedent('''\
    from flax import nn


    class M(nn.Module):

      def apply(self, x):
        return nn.Dense(x, 3)
''')


def test_one_failing_file_is_left_as_it_was_and_reported(tmp_path,
                                                         monkeypatch):
  src = tmp_path / 'src'
  src.mkdir()
  (src / 'good.py').write_text(GOOD)
  (src / 'bad.py').write_text(GOOD.replace('class M', 'class Bad'))
  real = transform.upgrade_module

  def flaky(path, *args, **kwargs):
    if path == 'bad.py':
      raise KeyError('a construct no rule knows')
    return real(path, *args, **kwargs)

  monkeypatch.setattr(transform, 'upgrade_module', flaky)
  status, report = api.upgrade_paths([str(src)], out=str(tmp_path / 'out'))
  assert status == 0
  assert (tmp_path / 'out' / 'bad.py').read_text() == (src / 'bad.py').read_text()
  assert 'nn.compact' in (tmp_path / 'out' / 'good.py').read_text()
  failed = report['summary']['failed']
  assert len(failed) == 1 and 'bad.py' in failed[0], failed
  assert "KeyError: 'a construct no rule knows'" in failed[0]
  assert report['files']['bad.py']['failed'] == failed[0]
  assert report['files']['bad.py']['rewritten'] == []
  assert 'failed' not in report['files']['good.py']
  assert 'not upgraded: ' in report_lib.summary_text(report)


def test_upgrade_source_contains_a_failing_rule(monkeypatch):
  # one string: the same containment as a tree (the source as it was, the
  # failure in the report), not the rule's exception
  from flaxlegacy.upgrade.rules import modules  # pylint: disable=g-import-not-at-top

  def broken(*args, **kwargs):
    raise KeyError('a construct no rule knows')

  monkeypatch.setattr(modules, 'convert_class', broken)
  new, report = api.upgrade_source(GOOD, path='m.py')
  assert new == GOOD
  assert report.failed.startswith('m.py: the upgrade failed on this file')
  assert "KeyError: 'a construct no rule knows'" in report.failed
  assert report.as_dict()['failed'] == report.failed
  assert report.rewritten == [] and report.left == []
  monkeypatch.undo()
  new, report = api.upgrade_source(GOOD, path='m.py')
  assert 'nn.compact' in new and report.failed is None


def test_module_level_partial_of_a_layer_alias():
  new, report = api.upgrade_source(textwrap.dedent('''\
      from flax import nn

      Dense = nn.Dense
      layer = Dense.partial(features=3)
  '''))
  assert 'layer = functools.partial(nn.Dense, features=3)' in new
  assert any(e['rule'] == 'partial' for e in report.rewritten)
