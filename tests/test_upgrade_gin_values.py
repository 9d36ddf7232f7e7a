"""flaxlegacy upgrade: a module class that reaches ``X.partial(...)``
through a gin-configurable constructor argument (docs/corpus.md, issue 24
class 1).

The real shape: ``@gin.configurable class Model`` with
``model_cls=modules.Transformer`` as a default, a subclass that does
``model_cls = model_cls.partial(causal=True)`` and
``super().__init__(model_cls=model_cls, **kwargs)``, callers that splat
config dicts (``functools.partial(Model, **cfg)``, ``Model(**cfg)``), a
computed ``gin.bind_parameter('Model.%s' % k, v)``, and a loader that
splats a dict parsed with ``gin.config.parse_value``.  The facts pass
(flow.py) follows all of them: ``super()``, dict keys, ``**kwargs`` dicts,
the codebase's gin bindings (gin_bindings.py) and the value a statement
assigned last in its block; where a binding can give another module class,
the use keeps a TODO.

A stub ``gin`` package stands in for gin-config (not a dependency here):
the upgrade reads only the source.
"""

import textwrap

import numpy as np

from flaxlegacy.upgrade import api
from flaxlegacy.upgrade import flow as flow_lib
from tests.test_upgrade_port import _run_both
from tests.test_upgrade_port import _upgrade_dir

TODO = '# TODO(flaxlegacy upgrade)'

GIN_STUB = {
    'gin/__init__.py': '''\
        import contextlib

        from gin import config

        _BINDINGS = {}


        def configurable(fn_or_name=None, **kwargs):
          if callable(fn_or_name):
            return fn_or_name
          return lambda fn: fn


        def bind_parameter(name, value):
          _BINDINGS[name] = value


        @contextlib.contextmanager
        def config_scope(name):
          yield
        ''',
    'gin/config.py': '''\
        import ast


        def parse_value(text):
          return ast.literal_eval(text.strip())
        ''',
}

MODULES = '''\
    from flax import nn


    class Net(nn.Module):

      def apply(self, x, features, hidden=4, shift=False):
        y = nn.relu(nn.Dense(x, hidden, kernel_init=nn.initializers.ones))
        y = nn.Dense(y, features, kernel_init=nn.initializers.ones,
                     bias_init=nn.initializers.ones)
        return y + 1.0 if shift else y
    '''

MODELS = '''\
    import gin
    from gin import config
    import jax
    import jax.numpy as jnp
    from flax import nn

    import modules


    @gin.configurable
    class Base(object):

      def __init__(self, model_cls=modules.Net, seed=0, **model_kwargs):
        self._model_kwargs = model_kwargs
        self.model_def = model_cls.partial(features=3, **model_kwargs)
        _, self.params = self.model_def.init(jax.random.PRNGKey(seed),
                                             jnp.zeros((1, 4)))

      @property
      def model_kwargs(self):
        return self._model_kwargs

      def predict(self, x):
        return nn.Model(self.model_def, self.params)(x)


    @gin.configurable
    class Shifted(Base):

      def __init__(self, model_cls=modules.Net, **kwargs):
        model_cls = model_cls.partial(shift=True)
        super().__init__(model_cls=model_cls, **kwargs)


    def parse_config(lines):
      cfg = dict()
      for line in lines:
        key, value = line.split(' = ')
        _, kwarg = key.split('.')
        value = config.parse_value(value)
        cfg[kwarg] = value
      return cfg


    def load_model(lines, model_cls):
      return model_cls(**parse_config(lines))
    '''

MODELS_TEST = '''\
    import functools
    import json

    import gin
    import jax.numpy as jnp

    import models

    cfg = dict(hidden=5, seed=1)
    lm_cls = functools.partial(models.Shifted, **cfg)


    def run():
      x = jnp.arange(8.).reshape(2, 4) / 10.
      out = [lm_cls().predict(x).tolist(),
             models.Base(**cfg).predict(x).tolist()]
      with gin.config_scope('test'):
        for k, v in cfg.items():
          gin.bind_parameter('Shifted.%s' % k, v)
        loaded = models.load_model(['Shifted.hidden = 6'],
                                   model_cls=models.Shifted)
        out.append(loaded.predict(x).tolist())
      return out


    if __name__ == '__main__':
      print(json.dumps(run()))
    '''


def _files(**more):
  files = dict(GIN_STUB)
  files.update({'modules.py': MODULES, 'models.py': MODELS,
                'models_test.py': MODELS_TEST})
  files.update(more)
  return files


def test_gin_configurable_module_class_argument_numbers(tmp_path):
  """Every value ``model_cls`` can hold is ``Net`` (or its partial): the
  default, the subclass's partial through ``super().__init__``; the
  splatted dicts' keys (``hidden``, ``seed``) and the gin bindings
  (ints, and a ``parse_value`` literal) cannot bring another one.  So
  ``.partial`` becomes ``functools.partial`` and the life cycle linen's;
  the numbers match the legacy program's under the layer."""
  legacy, upgraded, (_, out, report) = _run_both(
      tmp_path, _files(), 'import runpy; runpy.run_path("models_test.py", '
      'run_name="__main__")', srcs=None)
  assert len(legacy) == 3
  for a, b in zip(legacy, upgraded):
    np.testing.assert_allclose(b, a, rtol=1e-6)
  new = (out / 'models.py').read_text()
  assert ('self.model_def = functools.partial(model_cls, features=3, '
          '**model_kwargs)') in new
  assert 'model_cls = functools.partial(model_cls, shift=True)' in new
  assert TODO not in new, new
  assert not report['files']['models.py']['left']


def test_gin_file_binding_another_module_class_splits_at_run_time(tmp_path):
  """A ``.gin`` file of the tree binds ``Base.model_cls`` to another
  registered module class with other parameters: no ``functools.partial``
  can be written for both, so ``.partial`` becomes
  ``legacy_model.partial_module`` (the keywords split by the class held at
  run time) and the model is carried; both classes give legacy's numbers
  (the run builds Base with each)."""
  wide = textwrap.dedent(MODULES) + textwrap.dedent('''\


      import gin


      @gin.configurable
      class Wide(nn.Module):

        def apply(self, x, features, width=8, hidden=4):
          y = nn.Dense(x, hidden, kernel_init=nn.initializers.ones)
          return nn.Dense(y, features * width,
                          kernel_init=nn.initializers.ones)
      ''')
  files = _files(**{'modules.py': wide,
                    'configs/wide.gin': 'Base.model_cls = @Wide\n'})
  legacy, upgraded, (_, out, report) = _run_both(tmp_path, files, '''\
      import json
      import jax.numpy as jnp
      import models, modules
      x = jnp.arange(8.).reshape(2, 4) / 10.
      print(json.dumps([
          models.Base(hidden=5).predict(x).tolist(),
          models.Base(model_cls=modules.Wide, hidden=3).predict(x).tolist(),
          models.Shifted(hidden=2).predict(x).tolist()]))
      ''')
  assert len(legacy) == 3 and len(legacy[1][0]) == 24  # Wide: features * 8
  for a, b in zip(legacy, upgraded):
    np.testing.assert_allclose(b, a, rtol=1e-6)
  new = (out / 'models.py').read_text()
  assert ('self.model_def = partial_module(model_cls, features=3, '
          '**model_kwargs)') in new, new
  assert not report['files']['models.py']['left'], report['files']


def test_binding_given_at_run_time_keeps_a_todo(tmp_path):
  """``gin.bind_parameter(name, value)`` with both from outside the
  codebase (a function nobody in it calls): any parameter of any
  configurable may take anything, so ``model_cls.partial`` keeps its
  TODO."""
  test = textwrap.dedent(MODELS_TEST) + textwrap.dedent('''\


      def configure(name, value):
        gin.bind_parameter(name, value)
      ''')
  _, out, status, _ = _upgrade_dir(tmp_path, _files(**{
      'models_test.py': test}))
  assert status == 0
  new = (out / 'models.py').read_text()
  assert 'model_cls.partial(' in new
  assert TODO in new


def test_unknown_dict_splat_keeps_a_todo(tmp_path):
  """``Base(**kw)`` in a function the codebase never calls: the keys are
  not known, so ``model_cls`` may be anything."""
  more = textwrap.dedent(MODELS) + textwrap.dedent('''\


      def make(**kw):
        return Base(**kw)
      ''')
  _, out, status, _ = _upgrade_dir(tmp_path, _files(**{'models.py': more}))
  assert status == 0
  new = (out / 'models.py').read_text()
  assert 'model_cls.partial(features=3' in new
  assert TODO in new


def _flow(tmp_path, files):
  src = tmp_path / 'flow'
  sfs = []
  for rel, text in files.items():
    p = src / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    sf = api.SourceFile(str(src), rel, str(p))
    sf.code = p.read_text()
    api._parse(sf)  # pylint: disable=protected-access
    sfs.append(sf)
  return api._analyse(sfs).flow  # pylint: disable=protected-access


def test_flow_facts_dict_keys_reaching_assignment_property(tmp_path):
  """The facts behind the rewrite, one by one."""
  flow = _flow(tmp_path, _files())
  kinds = lambda vals: sorted({v[0] for v in vals})
  # dict(hidden=5, seed=1): its keys
  cfg = flow.name_values('models_test.py', '', 'cfg')
  assert [flow.dict_keys(v) for v in cfg] == [{'hidden', 'seed'}]
  # super().__init__(model_cls=<partial>) reaches Base.__init__
  mc = flow.param_values('models.py', 'Base.__init__', 'model_cls')
  assert {v[3] for v in mc if v[0] == 'class'} == {
      frozenset(), frozenset({'shift'})}
  # what a gin binding gives is a literal, never a module
  assert flow_lib.usable(mc, 'partial', flow) == {
      v for v in mc if v[0] == 'class'}
  # ``value = config.parse_value(value)``: the dict parse_config builds
  # holds gin literals only (not the str.split result assigned before)
  d = flow.values.get(('r', 'models.py', 'parse_config'))
  assert kinds(d) == ['container']
  site = next(iter(d))[1]
  assert flow.values[site] == {flow_lib.GINVAL}
  # a property read gives what it returns, not a bound method
  assert kinds(flow.values.get(('r', 'models.py', 'Base.model_kwargs'))) \
      == ['container']


def test_plain_class_a_binding_names_is_not_a_module_class_to_partial(
    tmp_path):
  """A gin binding can name a plain class with a base from outside the
  codebase (dopamine's TF ``gym_lib.CartpoleDQNNetwork`` beside the JAX
  one): where the value is used as ``X.partial(...)`` / ``X.init(...)``,
  a class that does not define that method itself is not what a working
  program brings (only legacy modules have them), so the legacy module
  classes decide."""
  files = _files(**{'tfnets.py': '''
      import collections


      class Wide(collections.OrderedDict):  # a base from outside
        pass
      '''})
  flow = _flow(tmp_path, files)
  vals = set(flow.param_values('models.py', 'Base.__init__', 'model_cls'))
  plain = ('cls', 'tfnets.py', 'Wide')
  assert flow_lib.usable(vals | {plain}, 'partial', flow) == {
      v for v in vals if v[0] == 'class'}
  # read as a plain value it stays
  assert plain in flow_lib.usable({plain}, None, flow)


def test_qualified_gin_reference_picks_the_file_it_names(tmp_path):
  """Two configurables of the same name in two files (dopamine's
  TensorFlow ``gym_lib.CartpoleDQNNetwork`` and the JAX one): a binding
  that names one with its module (``@gym_lib.CartNet``) gives that one
  only, as gin resolves it; a bare ``@CartNet`` keeps both."""
  files = dict(GIN_STUB)
  files.update({
      'tfnets/__init__.py': '',
      'tfnets/gym_lib.py': '''
          import collections

          import gin


          @gin.configurable
          class CartNet(collections.OrderedDict):
            pass
          ''',
      'jaxnets/__init__.py': '',
      'jaxnets/networks.py': '''
          import gin
          from flax import nn


          @gin.configurable
          class CartNet(nn.Module):

            def apply(self, x):
              return nn.Dense(x, 2)
          ''',
      'agent.py': '''
          import gin


          @gin.configurable
          class Agent(object):

            def __init__(self, network=None):
              self.network = network


          @gin.configurable
          class Other(object):

            def __init__(self, network=None):
              self.network = network


          gin.parse_config("Agent.network = @gym_lib.CartNet")
          gin.parse_config("Other.network = @CartNet")
          ''',
  })
  flow = _flow(tmp_path, files)
  agent = set(flow.param_values('agent.py', 'Agent.__init__', 'network'))
  assert ('cls', 'tfnets/gym_lib.py', 'CartNet') in agent, agent
  assert not any(v[0] == 'class' for v in agent), agent
  other = set(flow.param_values('agent.py', 'Other.__init__', 'network'))
  assert ('cls', 'tfnets/gym_lib.py', 'CartNet') in other, other
  assert any(v[0] == 'class' and v[1] == 'jaxnets/networks.py'
             for v in other), other
