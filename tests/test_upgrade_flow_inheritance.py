"""flaxlegacy upgrade, flow.py: values through plain-class inheritance.

Training libraries keep the model definition on a base class: ``Base.__init__``
sets ``self.module_def = self.build()`` and each model subclass overrides
``build`` (or sets the attribute in an ``__init__`` of its own).  An
instance's attribute is then what any method of its class, its codebase
bases or its subclasses set, and ``self.build()`` in the base runs the
subclasses' overrides.  Before, flow.py saw only the attributes a class set
itself, so ``model.module_def`` read as the one class a subclass set
directly: a rewrite could follow that one class where others reach.
"""

import textwrap

import libcst as cst

from flaxlegacy.upgrade import api

NETS = '''\
    from flax import nn


    class NetA(nn.Module):

      def apply(self, x, scale=1.0):
        return nn.Dense(x, 2, kernel_init=nn.initializers.ones) * scale


    class NetB(nn.Module):

      def apply(self, x, width=3, scale=1.0):
        return nn.Dense(x, width, kernel_init=nn.initializers.ones) * scale
    '''

MODELS = '''\
    import nets


    class Base(object):

      def __init__(self, hps):
        self.hps = hps
        self.module_def = self.build()

      def build(self):
        raise NotImplementedError


    class ModelA(Base):

      def build(self):
        return nets.NetA.partial(scale=self.hps['scale'])


    class ModelB(Base):

      def __init__(self, hps):
        super().__init__(hps)
        self.module_def = nets.NetB.partial(width=4)


    MODELS = {'a': ModelA, 'b': ModelB}
    '''

PROGRAM = '''\
    import json
    import jax
    import jax.numpy as jnp
    from flax import nn

    import models


    def run(name):
      model = models.MODELS[name]({'scale': 2.0})
      _, params = model.module_def.init_by_shape(jax.random.PRNGKey(0),
                                                 [((1, 3), jnp.float32)])
      flax_module = nn.Model(model.module_def, params)
      return flax_module(jnp.ones((2, 3))).tolist()


    if __name__ == '__main__':
      print(json.dumps([run('a'), run('b')]))
    '''


def _flow(files):
  sfs = []
  for rel, text in files.items():
    sf = api.SourceFile('/nowhere', rel, rel)
    sf.code = textwrap.dedent(text)
    sf.module = cst.parse_module(sf.code)
    sfs.append(sf)
  return api._analyse(sfs).flow  # pylint: disable=protected-access


def _classes(values):
  return sorted(v[2] for v in values if v[0] == 'class')


def test_attribute_a_base_sets_holds_every_subclass_value():
  flow = _flow({'nets.py': NETS, 'models.py': MODELS, 'prog.py': PROGRAM})
  attr = cst.parse_expression('model.module_def')
  values = flow.values_of('prog.py', 'run', attr)
  # ModelA's through the base's self.build(), ModelB's set directly
  assert _classes(values) == ['NetA', 'NetB'], values
  # and a subclass's own instance reads the base's assignment too
  values = flow.values_of('models.py', 'ModelB.__init__',
                          cst.parse_expression('self.module_def'))
  assert 'NetA' in _classes(values), values


def test_a_base_method_runs_the_subclass_override():
  flow = _flow({'nets.py': NETS, 'models.py': MODELS})
  values = flow.values_of('models.py', 'Base.__init__',
                          cst.parse_expression('self.build()'))
  assert _classes(values) == ['NetA'], values


def test_inherited_method_found_on_an_instance():
  src = '''\
      from flax import nn


      class Net(nn.Module):

        def apply(self, x):
          return nn.Dense(x, 2)


      class Base(object):

        def module_def(self):
          return Net


      class Child(Base):
        pass


      def f():
        return Child().module_def()
      '''
  flow = _flow({'m.py': src})
  values = flow.values_of('m.py', 'f', cst.parse_expression(
      'Child().module_def()'))
  assert _classes(values) == ['Net'], values


def _upgrade(tmp_path, files):
  src = tmp_path / 'src'
  src.mkdir()
  for rel, text in files.items():
    (src / rel).write_text(textwrap.dedent(text))
  out = tmp_path / 'out'
  status, report = api.upgrade_paths([str(src)], out=str(out))
  assert status == 0
  return src, out, report


def test_keyword_whose_split_differs_across_the_values_split_at_run_time(
    tmp_path):
  """``scale`` given at init: a field of NetA, a call argument of NetB
  (an array there); the attribute holds both, so no one static rewrite is
  right: the init is carried to run time, where the class at hand splits
  the keywords (rules/lifecycle_runtime.py)."""
  nets = NETS.replace(
      '''      def apply(self, x, width=3, scale=1.0):
        return nn.Dense(x, width, kernel_init=nn.initializers.ones) * scale''',
      '''      def apply(self, x, scale, width=3):
        return nn.Dense(x, width, kernel_init=nn.initializers.ones) * (
            scale.sum())''')
  prog = PROGRAM.replace('[((1, 3), jnp.float32)])',
                         '[((1, 3), jnp.float32)], scale=jnp.ones(2))')
  _, out, _ = _upgrade(tmp_path, {'nets.py': nets, 'models.py': MODELS,
                                  'prog.py': prog})
  new = (out / 'prog.py').read_text()
  assert 'TODO(flaxlegacy upgrade)' not in new, new
  assert ('_, params = legacy_model.init_module_by_shape(model.module_def, '
          'jax.random.PRNGKey(0), [((1, 3), jnp.float32)], '
          'scale=jnp.ones(2))') in new, new
  # the model of either class carries it
  assert 'flax_module = legacy_model.Model(model.module_def, params)' in new


def test_life_cycle_in_a_file_without_flax_imports_carried_to_run_time(tmp_path):
  """A test that builds its model through the library only (no flax
  import of its own): ``X.create(rng, x)`` on a value that holds legacy
  module classes is still the legacy life cycle, never left silently:
  classes of different parameters, carried to run time."""
  prog = '''\
      import jax
      import jax.numpy as jnp

      import models


      def run(name):
        model = models.MODELS[name]({'scale': 2.0})
        _, flax_module = model.module_def.create(jax.random.PRNGKey(0),
                                                 jnp.ones((1, 3)))
        return flax_module
      '''
  _, out, _ = _upgrade(tmp_path, {'nets.py': NETS, 'models.py': MODELS,
                                  'prog.py': prog})
  new = (out / 'prog.py').read_text()
  assert ('_, flax_module = legacy_model.create_module(model.module_def, '
          'jax.random.PRNGKey(0), jnp.ones((1, 3)))') in new, new
  assert 'TODO(flaxlegacy upgrade)' not in new, new
