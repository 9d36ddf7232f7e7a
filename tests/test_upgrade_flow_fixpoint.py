"""flow.Flow's worklist fixpoint reaches the values plain rounds reach.

``Flow._fixpoint`` re-applies only the constraints that read a slot that
changed (speed).  The reference here is the plain algorithm: apply every
constraint, in order, until a whole round adds nothing.  Both run on the
facts of real trees (this repository's tests and examples: legacy models,
optimizers, gin, partials, tables ...) and must give the same values.
"""

import os

import pytest

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import flow
from flaxlegacy.upgrade import shipping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _rounds(self, changed=None):  # pylint: disable=unused-argument
  """The reference fixpoint: full rounds until one adds nothing (every
  constraint, whatever changed since the last fixpoint)."""
  self.values = dict(self.values)
  for _ in range(flow.MAX_ROUNDS):
    self._changed = False  # pylint: disable=protected-access
    self._resolve_bases()  # pylint: disable=protected-access
    for c in self.constraints:
      self._apply(c)  # pylint: disable=protected-access
    if not self._changed:  # pylint: disable=protected-access
      return True
  return False


def _files(src):
  files, others = [], []
  for root, rel, path in api._walk(src):  # pylint: disable=protected-access
    sf = api.SourceFile(root, rel, path)
    (files if path.endswith('.py') else others).append(sf)
  markers = api._legacy_markers()  # pylint: disable=protected-access
  for sf in files:
    with open(sf.path, encoding='utf-8') as fh:
      sf.code = fh.read()
    if not sf.code.startswith(shipping.HEADER) and api._may_need_rewrite(  # pylint: disable=protected-access
        sf.code, markers):
      api._parse(sf)  # pylint: disable=protected-access
  api._parse_importers(files)  # pylint: disable=protected-access
  return files, others


def _solved(files, others):
  codebase = api._analyse(files, 'legacy', None, api._gin_configs(others))  # pylint: disable=protected-access
  f = codebase.flow
  return ({k: frozenset(v) for k, v in f.values.items() if v},
          set(f.optimizer_sites), set(f.optimizer_targets), set(f.carried_sites))


@pytest.mark.parametrize('tree,least', [('tests', 500), ('examples', 100)])
def test_worklist_gives_the_values_of_plain_rounds(tree, least, monkeypatch):
  files, others = _files(os.path.join(ROOT, tree))
  assert sum(sf.module is not None for sf in files) >= 5
  fast = _solved(files, others)
  monkeypatch.setattr(flow.Flow, '_fixpoint', _rounds)
  plain = _solved(files, others)
  assert len(plain[0]) > least  # a real amount of facts
  assert fast[1:] == plain[1:]
  differ = [k for k in set(fast[0]) | set(plain[0])
            if fast[0].get(k) != plain[0].get(k)]
  assert not differ, [(k, plain[0].get(k), fast[0].get(k))
                      for k in differ[:3]]


def test_a_chain_the_call_feeds_from_below_settles_as_plain_rounds(
    tmp_path, monkeypatch):
  # The call at the bottom feeds f's parameter; the value then runs down
  # 14 assignments that come before the call.  Plain rounds carry it down
  # in one round; a worklist that re-applied, in a sweep, only what the
  # sweep before changed would need a sweep per assignment (more than
  # MAX_ROUNDS: 'not settled', every value unknown).
  chain = '\n'.join(f'  a{i + 1} = a{i}' for i in range(14))
  (tmp_path / 'chain.py').write_text(
      'from flax import nn\n\n\ndef f(a0):\n' + chain +
      '\n  return a14\n\n\nmodel_def = f(nn.Dense)\n')
  files, others = _files(str(tmp_path))
  fast = _solved(files, others)
  monkeypatch.setattr(flow.Flow, '_fixpoint', _rounds)
  plain = _solved(files, others)
  assert fast == plain
  end = [v for k, v in plain[0].items() if k[-1] == 'a14']
  assert end == [frozenset({('layer', 'Dense', frozenset())})], plain[0]


def test_the_last_round_reapplies_what_reads_its_flag(tmp_path, monkeypatch):
  # f(**kw) with kw holding nothing the facts know: in the last round of a
  # solve its keys are unknown (f's parameters take unknown).  The solve's
  # later fixpoints start from what changed since the one before (the
  # flag's slot, FINAL): the same values as plain rounds of everything.
  (tmp_path / 'a.py').write_text(
      'from flax import nn\n\n'
      'def g():\n  pass\n\n'
      'def f(x, size=1, **rest):\n  return x\n\n'
      'def k():\n  kw = g()\n  return f(2, **kw)\n\n'
      'class M(nn.Module):\n'
      '  def apply(self, x, features=3):\n    return nn.Dense(x, features)\n')
  files, others = _files(str(tmp_path))
  fast = _solved(files, others)
  assert fast[0][('v', 'a.py', 'f', 'size')] >= {flow.UNKNOWN}
  monkeypatch.setattr(flow.Flow, '_fixpoint', _rounds)
  assert _solved(files, others) == fast
